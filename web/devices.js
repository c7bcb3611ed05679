// devices.js - the device map: each GPU's memory slices (8 per GPU), with
// MIG slices placed by their placement start/size and whole GPUs as one
// block, coloured by the tenant holding them (the job on the slice and on
// hover). A tenant's key sees its own tenant's holders; other tenants'
// slices are grey. The admin sees every tenant, one colour each. A slice
// held by a serving replica ("rep_...") says which deployment it serves.
import {api} from './api.js';
import {live, poll} from './live.js';
import {h, fmtBytes, jobColour as tenantColour} from './util.js';

// The profile name with a line-break opportunity after its dot, so a
// narrow slice (a phone) shows "1g." over "18gb" rather than breaking
// mid-number.
function profileLabel(what) {
  const el = h('strong');
  const dot = what.indexOf('.');
  if (dot < 0) { el.textContent = what; return el; }
  el.append(what.slice(0, dot + 1), document.createElement('wbr'), what.slice(dot + 1));
  return el;
}

// Who holds a slice, short (in the slice) and long (its title): a job by
// name, a replica by its deployment's name when this tenant has it, else
// the id.
function holderText(id, names) {
  const name = names.get(id);
  if (String(id).startsWith('rep_')) {
    return name ? {short: `replica of ${name}`, long: `replica of deployment ${name} (${id})`}
      : {short: id, long: `replica ${id}`};
  }
  return {short: name || id, long: `job ${name ? name + ' (' + id + ')' : id}`};
}

function sliceEl(s, names) {
  const held = s.state === 'held', other = s.state === 'held_by_other_tenant';
  const what = s.profile || 'whole GPU';
  const who = held ? holderText(s.job, names) : null;
  const holder = held ? `${who.long}, tenant ${s.tenant}`
    : other ? 'held by another tenant' : 'free';
  const el = h('div', {
    class: 'slice ' + (held ? 'held' : other ? 'other' : 'free'),
    'data-slot': s.slot, 'data-state': s.state, 'data-job': s.job, 'data-tenant': s.tenant,
    title: `slot ${s.slot} · ${what} · ${fmtBytes(s.memory_bytes)} · ${holder}`,
    tabindex: 0, role: 'listitem', 'aria-label': `slot ${s.slot}, ${what}, ${holder}`,
  }, profileLabel(what), h('br'), held ? who.short : other ? 'other tenant' : 'free');
  if (held) el.style.background = tenantColour(s.tenant || s.job);
  if (s.placement) el.style.gridColumn = `${s.placement.start + 1} / span ${s.placement.size}`;
  else if (s.kind === 'gpu') el.style.gridColumn = '1 / -1';
  return el;
}

export function devicesPage(root) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const map = h('div', {id: 'device-map'});
  root.append(h('h1', {text: 'Devices'}), banner,
    h('div', {class: 'legend', 'aria-label': 'Legend'},
      h('span', {}, h('span', {class: 'swatch', style: 'background:var(--free);border:1px dashed #999'}), 'free'),
      h('span', {}, h('span', {class: 'swatch', style: 'background:hsl(210 60% 38%)'}), 'held by a tenant you see (one colour per tenant; hover for the job or replica)'),
      h('span', {}, h('span', {class: 'swatch', style: 'background:var(--other)'}), 'held by another tenant')),
    map);

  // Replicas start and stop without job events: while this tenant has
  // deployments, or a replica holds a slice, the map is also polled.
  let deployed = false;
  async function load() {
    try {
      const [dev, jobs, deps] = await Promise.all([api('/v1/devices'), api('/v1/jobs?limit=200&status=running'),
        api('/v1/deployments').catch((e) => { if (e.status === 401) throw e; return {items: []}; })]);
      const names = new Map(jobs.items.map((j) => [j.id, j.name]));
      for (const d of deps.items || []) for (const i of d.instances || []) names.set(i.id, d.name);
      deployed = (deps.items || []).length > 0 ||
        dev.gpus.some((g) => g.slices.some((x) => String(x.job || '').startsWith('rep_')));
      banner.textContent = '';
      if (!dev.gpus.length) {
        map.replaceChildren(h('div', {class: 'card', id: 'no-gpus'},
          h('h2', {text: 'No GPUs'}),
          h('p', {text: 'Jobs train on the CPU.' + (dev.reason ? ` Why: ${dev.reason}` : '')}),
          h('div', {class: 'slices'}, h('div', {class: 'slice free', style: 'grid-column:1 / -1', text: 'CPU'})),
          h('p', {class: 'muted', text: `Inventory source: ${dev.source}`})));
        return;
      }
      map.replaceChildren(...dev.gpus.map((g) => h('section', {class: 'card gpu', 'data-gpu': g.index},
        h('h2', {text: `GPU ${g.index}: ${g.name}${g.model ? ' (' + g.model + ')' : ''}`}),
        h('p', {class: 'muted', text: `${fmtBytes(g.memory_bytes)} · MIG ${g.mig ? 'on' : 'off'} · ${g.uuid}` +
          (g.utilization_gpu_percent !== null ? ` · ${g.utilization_gpu_percent} % busy` : '') +
          (g.temperature_c !== null ? ` · ${g.temperature_c} °C` : '')}),
        h('div', {class: 'slices', role: 'list', 'aria-label': `GPU ${g.index} slices`}, g.slices.map((s) => sliceEl(s, names))))),
        h('p', {class: 'muted', text: `Inventory source: ${dev.source}`}));
    } catch (e) { if (e.status !== 401) banner.textContent = `Could not load devices: ${e.message}`; }
  }

  load();
  // Placements change when jobs start and finish: redraw on those events,
  // and every 2 s without an events endpoint.
  const stream = live('/v1/events', {
    onEvent(type) { if (type === 'job.started' || type === 'job.finished') load(); },
    onReset: load, onPoll: load,
  });
  const replicas = poll(() => (deployed ? load() : null), {interval: 2000, mode: false});
  return () => { stream.stop(); replicas.stop(); };
}
