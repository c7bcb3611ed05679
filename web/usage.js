// usage.js - what each tenant used (#/usage): GPU-equivalent hours by day,
// training and serving stacked, a table by tenant, and the figures of the
// window (slice-hours, GPU-hours, CPU-hours; for the admin, the
// inventory's GPU-hours and how many of them sat idle), with the same
// window as CSV.
//
// Everything comes from GET /v1/usage: group_by=day,kind for the bars,
// group_by=tenant,kind for the table. A tenant key gets its own tenant's
// rows only (the server filters; the page shows what it is given); the
// admin gets every tenant and the inventory (which is how the page tells
// the admin). Tenant names come from GET /v1/tenants (the admin) or
// GET /v1/tenants/{id} (a tenant's own);
// a tenant the page cannot name is shown by its id.
import {api} from './api.js';
import {h, field} from './util.js';

const DAY = 86400;
const WINDOWS = [['1', 'Last 24 hours'], ['7', 'Last 7 days'], ['30', 'Last 30 days'], ['90', 'Last 90 days']];
const KINDS = [['training', 'Training', '#1d4ed8'], ['serving', 'Serving', '#be123c']];

// Hours with as many digits as a small figure needs.
export function fmtHours(x) {
  if (x === null || x === undefined || !isFinite(x)) return '—';
  if (x === 0) return '0';
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(0) : a >= 1 ? x.toFixed(2) : a >= 0.01 ? x.toFixed(3) : x.toExponential(1);
}

const iso = (sec) => new Date(sec * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');

// The window [from, to): to is now, rounded up to the minute (so two
// requests of one draw agree); from `days` before it.
function windowOf(days) {
  const to = Math.ceil(Date.now() / 1000 / 60) * 60;
  return {from: to - days * DAY, to};
}

// Every day (UTC, as the server groups) from the window's first to its
// last, so a day without use is an empty bar, not a missing one.
export function daysOf(from, to) {
  const out = [];
  for (let t = Math.floor(from / DAY) * DAY; t < to; t += DAY) out.push(new Date(t * 1000).toISOString().slice(0, 10));
  return out;
}

// rows of group_by=tenant,kind -> [{tenant, training, serving, slice_hours, gpu_hours, cpu_hours, intervals}],
// most GPU-hours first (then CPU-hours, then the tenant).
export function byTenant(rows) {
  const m = new Map();
  for (const r of rows) {
    const t = m.get(r.tenant) || {tenant: r.tenant, training: 0, serving: 0, slice_hours: 0, gpu_hours: 0, cpu_hours: 0, intervals: 0};
    if (r.kind === 'training' || r.kind === 'serving') t[r.kind] += r.gpu_hours || 0;
    for (const k of ['slice_hours', 'gpu_hours', 'cpu_hours', 'intervals']) t[k] += r[k] || 0;
    m.set(r.tenant, t);
  }
  return [...m.values()].sort((a, b) => b.gpu_hours - a.gpu_hours || b.cpu_hours - a.cpu_hours ||
    String(a.tenant).localeCompare(String(b.tenant)));
}

// Every tenant's name, for the admin (whose usage report has the
// inventory); a tenant's key may not list tenants, and reads its own below.
async function tenantNames(admin) {
  const names = new Map();
  if (!admin) return names;
  try {
    const doc = await api('/v1/tenants');
    for (const t of doc.data || doc.tenants || []) names.set(t.id, t.name);
  } catch { /* the ids stand in */ }
  return names;
}

export function usagePage(root) {
  const banner = h('p', {class: 'banner', role: 'alert', id: 'usage-error'});
  const windowSel = h('select', {id: 'usage-window'}, WINDOWS.map(([v, t]) => h('option', {value: v, text: t})));
  windowSel.value = '7';
  const csv = h('button', {type: 'button', class: 'secondary', id: 'usage-csv', text: 'Download CSV'});
  const stats = h('div', {class: 'stats', id: 'usage-stats'});
  const canvas = h('canvas', {id: 'usage-chart', role: 'img', 'aria-label': 'GPU-equivalent hours by day, training and serving'});
  const chartEmpty = h('p', {class: 'chart-waiting', id: 'usage-chart-empty', hidden: true, text: 'No GPU use in this window.'});
  const tbody = h('tbody', {id: 'usage-body'});
  const empty = h('p', {class: 'muted', id: 'usage-empty', hidden: true, text: 'Nothing ran in this window.'});
  const labels = ['Tenant', 'GPU-hours, training', 'GPU-hours, serving', 'GPU-hours', 'Slice-hours', 'CPU-hours', 'Intervals'];
  const table = h('div', {class: 'table-wrap'}, h('table', {id: 'usage-tenants', class: 'cards'},
    h('caption', {class: 'muted', text: 'By tenant, most GPU-hours first'}),
    h('thead', {}, h('tr', {}, labels.map((l) => h('th', {scope: 'col', text: l})))), tbody));
  root.append(h('h1', {text: 'Usage'}), banner,
    h('div', {class: 'row chart-controls'}, field('Window', windowSel), csv),
    h('p', {class: 'muted', text: 'A GPU-hour is a whole GPU for an hour: a slice counts its share of the GPU\'s compute slices (a 3g slice of a 7-slice GPU, 3/7). Days are UTC.'}),
    stats,
    h('div', {class: 'card'}, h('h2', {text: 'GPU-hours by day'}), h('div', {class: 'chart-box'}, canvas, chartEmpty)),
    h('h2', {text: 'By tenant'}), empty, table);

  let chart = null;
  let names = new Map();
  let gone = false;
  let seq = 0;
  const stat = (label, value, id) => h('div', {id}, h('div', {class: 'stat-label', text: label}), h('div', {class: 'stat-value', text: value}));
  const nameOf = (id) => names.get(id) || id;

  function drawChart(days, rows) {
    const data = KINDS.map(([kind, label, colour]) => ({label, backgroundColor: colour, stack: 'gpu',
      data: days.map((d) => rows.filter((r) => r.day === d && r.kind === kind).reduce((s, r) => s + (r.gpu_hours || 0), 0))}));
    const anything = data.some((ds) => ds.data.some((v) => v > 0));
    chartEmpty.hidden = anything;
    canvas.dataset.points = JSON.stringify(Object.fromEntries(KINDS.map(([k], i) => [k, data[i].data])));
    if (!window.Chart) return;
    if (!chart) {
      chart = new window.Chart(canvas, {type: 'bar', data: {labels: days, datasets: data}, options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        plugins: {legend: {labels: {boxWidth: 12}}, tooltip: {callbacks: {label: (c) => `${c.dataset.label}: ${fmtHours(c.parsed.y)} GPU-hours`}}},
        scales: {x: {stacked: true}, y: {stacked: true, beginAtZero: true, title: {display: true, text: 'GPU-hours'}}}}});
    } else {
      chart.data.labels = days;
      chart.data.datasets = data;
      chart.update();
    }
  }

  function drawTable(rows) {
    const list = byTenant(rows);
    empty.hidden = list.length > 0;
    tbody.replaceChildren(...list.map((t) => {
      const cells = [nameOf(t.tenant), fmtHours(t.training), fmtHours(t.serving), fmtHours(t.gpu_hours),
        fmtHours(t.slice_hours), fmtHours(t.cpu_hours), String(t.intervals)];
      return h('tr', {'data-tenant': t.tenant}, cells.map((c, i) => h(i ? 'td' : 'th', {scope: i ? null : 'row', 'data-label': labels[i], text: c})));
    }));
  }

  function drawStats(total, inventory) {
    const items = [stat('GPU-hours', fmtHours(total.gpu_hours), 'usage-gpu-hours'),
      stat('Slice-hours', fmtHours(total.slice_hours), 'usage-slice-hours'),
      stat('CPU-hours', fmtHours(total.cpu_hours), 'usage-cpu-hours')];
    if (inventory) {
      const util = inventory.gpu_hours > 0 ? 100 * (inventory.gpu_hours - inventory.idle_gpu_hours) / inventory.gpu_hours : null;
      items.push(stat(`Inventory (${inventory.gpus} GPU${inventory.gpus === 1 ? '' : 's'})`, `${fmtHours(inventory.gpu_hours)} GPU-hours`, 'usage-inventory'),
        stat('Idle', `${fmtHours(inventory.idle_gpu_hours)} GPU-hours${util === null ? '' : ` (${util.toFixed(1)} % used)`}`, 'usage-idle'));
    }
    stats.replaceChildren(...items);
  }

  async function load() {
    const mine = ++seq;
    banner.textContent = '';
    const {from, to} = windowOf(Number(windowSel.value));
    const q = `from=${encodeURIComponent(iso(from))}&to=${encodeURIComponent(iso(to))}`;
    try {
      const [daily, tenants] = await Promise.all([api(`/v1/usage?${q}&group_by=day,kind`), api(`/v1/usage?${q}&group_by=tenant,kind`)]);
      if (gone || mine !== seq) return;
      if (!names.size) names = await tenantNames(!!daily.inventory);
      for (const r of tenants.rows) {
        if (!names.has(r.tenant)) {
          try { const t = await api(`/v1/tenants/${encodeURIComponent(r.tenant)}`); names.set(r.tenant, t.name); }
          catch { names.set(r.tenant, r.tenant); }
        }
      }
      if (gone || mine !== seq) return;
      drawStats(daily.total, daily.inventory);
      drawChart(daysOf(from, to), daily.rows);
      drawTable(tenants.rows);
      root.dataset.loaded = String(mine);
    } catch (e) {
      if (!gone && mine === seq) banner.textContent = `Could not load usage: ${e.message}`;
    }
  }

  // The CSV of the table's grouping, fetched with the key (a plain link
  // would carry no Authorization header) and saved as a file.
  csv.addEventListener('click', async () => {
    const {from, to} = windowOf(Number(windowSel.value));
    try {
      const resp = await api(`/v1/usage?from=${encodeURIComponent(iso(from))}&to=${encodeURIComponent(iso(to))}&group_by=tenant,kind&format=csv`, {raw: true});
      const url = URL.createObjectURL(await resp.blob());
      const a = h('a', {href: url, download: `usage-${iso(from).slice(0, 10)}-${iso(to).slice(0, 10)}.csv`});
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 1000);
    } catch (e) { banner.textContent = `Could not download the CSV: ${e.message}`; }
  });
  windowSel.addEventListener('change', load);
  load();
  const timer = setInterval(load, 60000);
  return () => { gone = true; clearInterval(timer); if (chart) chart.destroy(); };
}
