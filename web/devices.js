// devices.js - the device map: each GPU's memory slices (8 per GPU), with
// MIG slices placed by their placement start/size and whole GPUs as one
// block, coloured by the tenant holding them, with a legend that names each
// tenant. Every slice says its holder, memory and utilisation; a click, tap
// or Enter on one shows its details in a panel under its GPU. On a phone
// the slices become a list of cards (style.css, "device map").
//
// What a viewer sees of a holder is what GET /v1/devices gives it: the
// admin every tenant and job by name; a tenant key its own, and of another
// tenant's slice only "another tenant" (the server sends no id or name for
// it, so the page cannot show one). A slice held by a serving replica
// ("rep_...") says which deployment it serves when this tenant has it.
import {api} from './api.js';
import {live, poll} from './live.js';
import {h, fmtBytes, kv} from './util.js';

// Tenant colours: a fixed qualitative palette, each at least 4.5:1 against
// the slices' white text (WCAG AA), ordered so that the first colours are
// the farthest apart (each the one farthest, in CIELAB, from all before
// it: five tenants are at least 50 apart, ten at least 29). Tenants take
// them in the order of their names, so a map never shows two near-equal
// colours; a hash of the id (as before) picked red, rose and rust for
// three tenants as readily as blue, green and red. Another tenant's
// slices are grey stripes.
const PALETTE = ['#1d4ed8', '#4d7c0f', '#be123c', '#0e7490', '#a16207',
  '#a21caf', '#047857', '#57534e', '#c2410c', '#7c2d12'];

// A colour for each tenant [id, name]: by name, then id; past the
// palette's size colours repeat.
function tenantColours(tenants) {
  const out = new Map();
  [...tenants].sort((a, b) => String(a[1]).localeCompare(String(b[1])) || String(a[0]).localeCompare(String(b[0])))
    .forEach(([id], i) => out.set(id, PALETTE[i % PALETTE.length]));
  return out;
}

// The profile name with a line-break opportunity after its dot.
function profileLabel(what) {
  const el = h('strong', {class: 'slice-line slice-profile'});
  const dot = what.indexOf('.');
  if (dot < 0) { el.textContent = what; return el; }
  el.append(what.slice(0, dot + 1), document.createElement('wbr'), what.slice(dot + 1));
  return el;
}

// Who holds a slice the viewer may see: the job (or replica) by name, the
// id only where no name is known; short (on the slice) and long (details).
function holderText(s, names) {
  const id = s.job;
  if (String(id).startsWith('rep_')) {
    // The server names the deployment (s.deployment) for every holder the
    // viewer may see, the admin's view of other tenants' replicas included.
    // A replica the server no longer lists (its deployment deleted or
    // scaled down while it stops) keeps the name the page saw it under;
    // one never seen is "a serving replica", its id only in the details.
    const dep = (s.deployment && s.deployment.name) || names.get(id);
    return dep ? {short: `replica of ${dep}`, long: `replica of deployment ${dep} (${id})`}
      : {short: 'serving replica', long: `serving replica ${id} (stopping, or of a deployment you cannot see)`};
  }
  const name = s.job_name || names.get(id);
  return {short: name || id, long: `job ${name ? name + ' (' + id + ')' : id}`};
}

const tenantLabel = (s) => s.tenant_name || s.tenant;
const utilText = (s) => (s.utilization_percent === null || s.utilization_percent === undefined
  ? '—' : `${s.utilization_percent} %`);

// The data-parallel gangs (resources.gpus) the viewer may see: a job that
// holds more than one slice -> its members [{gpu, slot}] in map order. A
// gang is one job: its members are drawn as one (the same name, colour
// and "gang i of n"), and the details list where the others are.
function gangsOf(gpus) {
  const members = new Map();
  for (const g of gpus) {
    for (const s of g.slices) {
      if (s.state !== 'held' || !s.job || String(s.job).startsWith('rep_')) continue;
      if (!members.has(s.job)) members.set(s.job, []);
      members.get(s.job).push({gpu: g.index, slot: s.slot});
    }
  }
  for (const [job, list] of members) if (list.length < 2) members.delete(job);
  return members;
}

// Slice s's place in its gang: {i (1-based), n, gpus}, or null.
function gangPlace(gangs, s) {
  const list = s.state === 'held' ? gangs.get(s.job) : null;
  if (!list) return null;
  return {i: list.findIndex((m) => String(m.slot) === String(s.slot)) + 1, n: list.length,
    gpus: list.map((m) => m.gpu)};
}

function sliceEl(s, names, colours, selected, gang) {
  const held = s.state === 'held', other = s.state === 'held_by_other_tenant';
  const what = s.profile || 'whole GPU';
  const who = held ? holderText(s, names) : null;
  const member = gang ? `, member ${gang.i} of a gang of ${gang.n} GPUs` : '';
  const holder = held ? `${who.long}${member}, tenant ${tenantLabel(s)}`
    : other ? 'held by another tenant' : 'free';
  const el = h('button', {
    type: 'button', class: 'slice ' + (held ? 'held' : other ? 'other' : 'free') + (gang ? ' gang' : ''),
    'data-slot': s.slot, 'data-state': s.state, 'data-job': s.job, 'data-tenant': s.tenant,
    'data-gang': gang ? `${gang.i}/${gang.n}` : null,
    title: `slot ${s.slot} · ${what} · ${fmtBytes(s.memory_bytes)} · ${holder}`,
    'aria-label': `slot ${s.slot}, ${what}, ${holder}, ${fmtBytes(s.memory_bytes)}, utilisation ${utilText(s)}`,
    'aria-controls': 'slice-details', 'aria-expanded': selected ? 'true' : 'false',
  }, profileLabel(what),
  held ? [h('span', {class: 'slice-line slice-tenant', text: tenantLabel(s)}),
    h('span', {class: 'slice-line slice-job', text: gang ? `${who.short} · gang ${gang.i} of ${gang.n}` : who.short})]
    : h('span', {class: 'slice-line slice-tenant', text: other ? 'another tenant' : 'free'}),
  h('span', {class: 'slice-line slice-mem', text: fmtBytes(s.memory_bytes)}),
  h('span', {class: 'slice-line slice-util', text: `util ${utilText(s)}`}));
  if (held) el.style.background = colours.get(s.tenant) || PALETTE[0];
  if (s.placement) el.style.setProperty('--slice-col', `${s.placement.start + 1} / span ${s.placement.size}`);
  else if (s.kind === 'gpu') el.style.setProperty('--slice-col', '1 / -1');
  return el;
}

// The details of slice s of GPU g, as this viewer may see them.
function detailsEl(g, s, names, gang, onClose) {
  const held = s.state === 'held', other = s.state === 'held_by_other_tenant';
  const pairs = [
    ['Slot', String(s.slot)],
    ['GPU', `${g.index}: ${g.name}`],
    hasDomain(g) && ['NVLink domain', String(g.nvlink_domain)],
    ['Profile', s.profile || 'whole GPU'],
    ['Memory', fmtBytes(s.memory_bytes)],
    ['Utilisation', utilText(s) + (s.utilization_percent === null && s.kind === 'mig' ? ' (not reported per MIG slice or when simulated)' : '')],
    ['Compute slices', `${s.compute_slices} of 7`],
    s.placement && ['Memory slices', (s.placement.size > 1 ? `${s.placement.start + 1}–` : '') +
      `${s.placement.start + s.placement.size} of 8`],
    ['UUID', s.uuid],
  ];
  let holder;
  if (held) {
    const who = holderText(s, names);
    const mine = names.has(s.job);
    pairs.push(['Tenant', tenantLabel(s)],
      ['Held by', mine && !String(s.job).startsWith('rep_')
        ? h('a', {href: `#/jobs/${encodeURIComponent(s.job)}`, text: who.long}) : who.long]);
    if (gang) pairs.push(['Gang', `one job on ${gang.n} GPUs (GPU ${gang.gpus.join(', ')}): this is member ${gang.i}`]);
    holder = `${who.short} (${tenantLabel(s)})`;
  } else if (other) {
    pairs.push(['Held by', 'another tenant (its name and jobs are not shown to you)']);
    holder = 'another tenant';
  } else {
    pairs.push(['Held by', 'nobody: free']);
    holder = 'free';
  }
  return h('section', {id: 'slice-details', class: 'slice-details', 'data-slot': s.slot,
    'aria-label': `Slot ${s.slot} details`, 'aria-live': 'polite', tabindex: -1},
  h('div', {class: 'slice-details-head'},
    h('h3', {text: `Slot ${s.slot} · ${s.profile || 'whole GPU'} · ${holder}`}),
    h('button', {type: 'button', class: 'secondary', text: 'Close', onclick: onClose})),
  kv(pairs));
}

function legendEl(tenants, colours, anyOther) {
  const item = (cls, colour, text) => {
    const sw = h('span', {class: 'swatch ' + cls, 'aria-hidden': 'true'});
    if (colour) sw.style.background = colour;
    return h('li', {}, sw, text);
  };
  return [
    item('swatch-free', null, 'free'),
    ...[...tenants].sort((a, b) => a[1].localeCompare(b[1]))
      .map(([id, name]) => item('swatch-tenant', colours.get(id), name)),
    anyOther ? item('swatch-other', null, 'another tenant (not shown to you)') : null,
  ].filter(Boolean);
}

const hasDomain = (g) => g.nvlink_domain !== null && g.nvlink_domain !== undefined;

// The GPU cards (gpuEl(g) each), grouped by interconnect domain where the
// inventory gives any: one group per NVLink domain in the order of its
// first GPU, captioned "NVLink domain N", then the GPUs on none ("No
// NVLink"). A gang's members go inside one domain when they can, so the
// groups show where a gang fits. Without domains, the cards as they are.
function domainGroups(gpus, gpuEl) {
  if (!gpus.some(hasDomain)) return gpus.map(gpuEl);
  const groups = new Map();
  for (const g of gpus) {
    const key = hasDomain(g) ? g.nvlink_domain : null;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(g);
  }
  const keys = [...groups.keys()].filter((k) => k !== null);
  if (groups.has(null)) keys.push(null);
  return keys.map((k) => {
    const caption = k === null ? 'No NVLink' : `NVLink domain ${k}`;
    return h('section', {class: 'gpu-domain', 'data-domain': k === null ? '' : k, 'aria-label': caption},
      h('h2', {class: 'domain-caption', text: caption}), groups.get(k).map(gpuEl));
  });
}

export function devicesPage(root) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const legend = h('ul', {class: 'legend', id: 'device-legend', 'aria-label': 'Legend: colour of each tenant'});
  const queued = h('p', {id: 'queued-jobs', class: 'queued'});
  const map = h('div', {id: 'device-map'});
  root.append(h('h1', {text: 'Devices'}), banner,
    h('div', {class: 'device-summary'}, legend, queued),
    h('p', {class: 'muted device-hint', text: 'Select a slice (click, tap or Enter) for its details.'}),
    map);

  let selected = null;  // the slot whose details are open
  let last = null;      // the last answer, to redraw on a selection
  // Replicas start and stop without job events: while this tenant has
  // deployments, or a replica holds a slice, the map is also polled.
  let deployed = false;
  // Every replica seen on a load -> its deployment's name, kept for the
  // page's life: a stopping replica holds its slice a while after its
  // deployment stops listing it.
  const replicaNames = new Map();

  // Escape closes the details, leaving the focus on their slice.
  map.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && selected !== null) { e.preventDefault(); select(selected); }
  });

  function select(slot) {
    selected = selected === slot ? null : slot;
    if (last) draw(last, {focusSlot: slot});
    const panel = document.getElementById('slice-details');
    if (panel && selected !== null && window.innerWidth <= 700) panel.scrollIntoView({block: 'nearest'});
  }

  function draw({dev, names}, {focusSlot = null} = {}) {
    const focused = document.activeElement && map.contains(document.activeElement)
      ? document.activeElement.dataset.slot : null;
    const slices = dev.gpus.flatMap((g) => g.slices);
    const tenants = new Map();
    for (const s of slices) if (s.state === 'held' && s.tenant) tenants.set(s.tenant, tenantLabel(s));
    const colours = tenantColours(tenants);
    legend.replaceChildren(...legendEl(tenants, colours, slices.some((s) => s.state === 'held_by_other_tenant')));
    const n = dev.queued_jobs;
    queued.textContent = n === null || n === undefined ? ''
      : `${n} ${n === 1 ? 'job' : 'jobs'} queued (${dev.queued_jobs_scope === 'all' ? 'all tenants' : 'your tenant'})`;
    if (!slices.some((s) => String(s.slot) === String(selected))) selected = null;
    const gangs = gangsOf(dev.gpus);
    const gpuEl = (g) => {
      const chosen = g.slices.find((s) => String(s.slot) === String(selected));
      return h('section', {class: 'card gpu', 'data-gpu': g.index},
        h('h2', {text: `GPU ${g.index}: ${g.name}${g.model ? ' (' + g.model + ')' : ''}`}),
        h('p', {class: 'muted gpu-meta', text: `${fmtBytes(g.memory_bytes)} · MIG ${g.mig ? 'on' : 'off'} · ${g.uuid}` +
          (hasDomain(g) ? ` · NVLink domain ${g.nvlink_domain}` : '') +
          (g.utilization_gpu_percent !== null ? ` · ${g.utilization_gpu_percent} % busy` : '') +
          (g.temperature_c !== null ? ` · ${g.temperature_c} °C` : '')}),
        h('div', {class: 'slices', role: 'group', 'aria-label': `GPU ${g.index} slices`},
          g.slices.map((s) => {
            const el = sliceEl(s, names, colours, s === chosen, gangPlace(gangs, s));
            el.addEventListener('click', () => select(s.slot));
            return el;
          })),
        chosen ? detailsEl(g, chosen, names, gangPlace(gangs, chosen), () => { select(chosen.slot); }) : null);
    };
    map.replaceChildren(...domainGroups(dev.gpus, gpuEl), h('p', {class: 'muted', text: `Inventory source: ${dev.source}`}));
    const again = focusSlot ?? focused;
    if (again !== null && again !== undefined) {
      const el = map.querySelector(`.slice[data-slot="${again}"]`);
      if (el) el.focus();
    }
  }

  async function load() {
    try {
      const [dev, jobs, deps] = await Promise.all([api('/v1/devices'), api('/v1/jobs?limit=200&status=running'),
        api('/v1/deployments').catch((e) => { if (e.status === 401) throw e; return {items: []}; })]);
      const names = new Map(jobs.items.map((j) => [j.id, j.name]));
      for (const d of deps.items || []) for (const i of d.instances || []) replicaNames.set(i.id, d.name);
      for (const g of dev.gpus) for (const x of g.slices) if (x.deployment && x.deployment.name) replicaNames.set(x.job, x.deployment.name);
      for (const [rep, dep] of replicaNames) names.set(rep, dep);
      deployed = (deps.items || []).length > 0 ||
        dev.gpus.some((g) => g.slices.some((x) => String(x.job || '').startsWith('rep_')));
      banner.textContent = '';
      if (!dev.gpus.length) {
        legend.replaceChildren();
        queued.textContent = '';
        map.replaceChildren(h('div', {class: 'card', id: 'no-gpus'},
          h('h2', {text: 'No GPUs'}),
          h('p', {text: 'Jobs train on the CPU.' + (dev.reason ? ` Why: ${dev.reason}` : '')}),
          h('div', {class: 'slices'}, h('div', {class: 'slice free', style: 'grid-column:1 / -1', text: 'CPU'})),
          h('p', {class: 'muted', text: `Inventory source: ${dev.source}`})));
        return;
      }
      last = {dev, names};
      draw(last);
    } catch (e) { if (e.status !== 401) banner.textContent = `Could not load devices: ${e.message}`; }
  }

  load();
  // Placements change when jobs start and finish: redraw on those events,
  // and every 2 s without an events endpoint.
  const stream = live('/v1/events', {
    onEvent(type) { if (['job.created', 'job.started', 'job.finished'].includes(type)) load(); },
    onReset: load, onPoll: load,
  });
  const replicas = poll(() => (deployed ? load() : null), {interval: 2000, mode: false});
  return () => { stream.stop(); replicas.stop(); };
}
