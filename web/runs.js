// runs.js - what the jobs list needs to compare runs, as an experiment
// tracker's runs table does: metric columns to sort by, hyperparameter
// columns chosen from the keys the listed jobs have, and the curves of
// the selected runs overlaid in one chart per metric.
//
// Metrics come from each job's `metrics` (its latest epoch); regression
// runs add rmse, mae and r2, and their epochs train_rmse, val_rmse,
// val_mae and val_r2; language models val_perplexity: a column or a chart
// is shown only when some job has it. The overlay fetches each run's
// curves once (GET /v1/jobs/{id}/curves, downsampled on the server), so it
// costs the same for a 20,000-epoch run.
import {api} from './api.js';
import {h, fmtNum} from './util.js';

// The metric columns, in their order; better: which end sorts first.
export const METRIC_COLUMNS = [
  {key: 'train_loss', label: 'Loss', better: 'low'},
  {key: 'val_loss', label: 'Val. loss', better: 'low'},
  {key: 'val_accuracy', label: 'Val. acc.', better: 'high'},
  {key: 'val_perplexity', label: 'Val. perplexity', better: 'low'},
  {key: 'rmse', label: 'RMSE', better: 'low'},
  {key: 'mae', label: 'MAE', better: 'low'},
  {key: 'r2', label: 'R²', better: 'high'},
];

export const metricValue = (job, key) => {
  const v = job.metrics && job.metrics[key];
  return typeof v === 'number' && isFinite(v) ? v : null;
};

// The metric columns some job of jobs has a value for.
export function metricColumns(jobs) {
  return METRIC_COLUMNS.filter((c) => jobs.some((j) => metricValue(j, c.key) !== null));
}

// The hyperparameter keys the jobs have, sorted.
export function hparamKeys(jobs) {
  const keys = new Set();
  for (const j of jobs) for (const k of Object.keys(j.hyperparameters || {})) keys.add(k);
  return [...keys].sort();
}

export function hparamValue(job, key) {
  const v = job.hyperparameters ? job.hyperparameters[key] : undefined;
  return v === undefined || v === null ? null : v;
}

export const hparamText = (v) => (v === null ? '—' : typeof v === 'object' ? JSON.stringify(v) : String(v));

// A comparator for a sort {kind: 'metric'|'hparam', key, dir: 1|-1}: jobs
// without the value go last either way; ties keep the newest first.
export function runComparator(sort, newest) {
  const value = sort.kind === 'metric' ? (j) => metricValue(j, sort.key) : (j) => hparamValue(j, sort.key);
  return (a, b) => {
    const x = value(a), y = value(b);
    if (x === null || y === null) return (x === null) - (y === null) || newest(a, b);
    const c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y), undefined, {numeric: true});
    return c * sort.dir || newest(a, b);
  };
}

// Run colours for the overlay: a qualitative palette (Tableau 10), in the
// order runs were selected.
export const RUN_COLOURS = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2',
  '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

// What the second chart shows: the validation metric the selected runs
// have, in this order of preference.
const VAL_METRICS = [['val_accuracy', 'validation accuracy'], ['val_r2', 'validation R²'],
  ['val_rmse', 'validation RMSE'], ['val_mae', 'validation MAE'], ['val_loss', 'validation loss']];
const LOSS_METRICS = [['train_loss', 'train loss'], ['train_rmse', 'train RMSE'], ['val_loss', 'validation loss']];

function chart(canvas, yTitle) {
  if (!window.Chart) return null;
  return new window.Chart(canvas, {
    type: 'line', data: {datasets: []},
    options: {
      responsive: true, maintainAspectRatio: false, animation: false, parsing: false, spanGaps: true,
      interaction: {mode: 'nearest', intersect: false},
      plugins: {legend: {display: false}},  // the section's own legend names the runs
      scales: {x: {type: 'linear', title: {display: true, text: 'epoch'}, min: 0},
               y: {type: 'linear', title: {display: true, text: yTitle}}},
    },
  });
}

// The overlay section: {el, set(runs: [{id, name}]), destroy()}. One line a
// run in each chart, in its colour, its name in the legend; the canvas
// says how many series it draws (data-series) and their names
// (data-names, JSON) for people without Chart.js and for tests.
export function overlaySection() {
  const note = h('p', {class: 'muted', id: 'overlay-note'});
  const canvases = {
    loss: h('canvas', {id: 'overlay-loss', role: 'img', 'aria-label': 'Loss per epoch of the selected runs'}),
    val: h('canvas', {id: 'overlay-val', role: 'img', 'aria-label': 'Validation metric per epoch of the selected runs'}),
  };
  const titles = {loss: h('h3', {text: 'Loss'}), val: h('h3', {text: 'Validation'})};
  const legend = h('ul', {class: 'legend', id: 'overlay-legend', 'aria-label': 'Runs in the charts'});
  const el = h('section', {class: 'card', id: 'overlay', hidden: true, 'aria-label': 'Selected runs compared'},
    h('h2', {text: 'Selected runs'}), legend,
    window.Chart ? null : h('p', {class: 'muted', text: 'Charts need Chart.js (Debian package libjs-chart.js), which this server does not have.'}),
    h('div', {class: 'overlay-charts'},
      h('div', {class: 'overlay-chart'}, titles.loss, h('div', {class: 'chart-box'}, canvases.loss)),
      h('div', {class: 'overlay-chart'}, titles.val, h('div', {class: 'chart-box'}, canvases.val))),
    note);
  // Made on the first draw with runs, once the section is in the page and
  // shown: Chart.js watches a detached canvas for its attachment and
  // throws when it is destroyed before that.
  const charts = {loss: null, val: null};
  const curves = new Map();   // id -> curves document (fetched once)
  let want = [];

  function draw() {
    const runs = want.filter((r) => curves.has(r.id));
    const pts = (r) => curves.get(r.id).epochs.points;
    const has = (k) => runs.some((r) => pts(r).some((p) => typeof p[k] === 'number'));
    const lossKey = LOSS_METRICS.find(([k]) => has(k)) || LOSS_METRICS[0];
    const valKey = VAL_METRICS.find(([k]) => has(k)) || VAL_METRICS[0];
    const picked = {loss: lossKey, val: valKey};
    legend.replaceChildren(...runs.map((r, i) => h('li', {'data-job': r.id},
      h('span', {class: 'swatch', 'aria-hidden': 'true', style: `background:${RUN_COLOURS[i % RUN_COLOURS.length]}`}), r.name)));
    for (const k of ['loss', 'val']) {
      const [key, label] = picked[k];
      titles[k].textContent = label[0].toUpperCase() + label.slice(1) + ' per epoch';
      const sets = runs.map((r, i) => {
        const colour = RUN_COLOURS[i % RUN_COLOURS.length];
        const data = pts(r).map((p) => ({x: p.epoch, y: typeof p[key] === 'number' ? p[key] : null}));
        return {label: r.name, data, borderColor: colour, backgroundColor: colour, borderWidth: 2,
          pointRadius: data.length > 60 ? 0 : 2, tension: 0.15};
      }).filter((s) => s.data.some((p) => p.y !== null));
      canvases[k].dataset.series = String(sets.length);
      canvases[k].dataset.metric = key;
      canvases[k].dataset.names = JSON.stringify(sets.map((s) => s.label));
      if (!charts[k] && sets.length && el.isConnected && !el.hidden) charts[k] = chart(canvases[k], label);
      const c = charts[k];
      if (c) {
        c.data.datasets = sets;
        c.options.scales.y.title.text = label;
        c.update('none');
      }
    }
    note.textContent = runs.length < want.length ? 'Loading curves…' : '';
  }

  async function set(runs) {
    want = runs;
    el.hidden = runs.length === 0;
    draw();
    await Promise.all(runs.filter((r) => !curves.has(r.id)).map(async (r) => {
      try { curves.set(r.id, await api(`/v1/jobs/${encodeURIComponent(r.id)}/curves?points=200`)); }
      catch { curves.set(r.id, {epochs: {points: []}}); }
    }));
    if (want === runs) draw();
  }

  return {el, set, destroy() { for (const c of Object.values(charts)) c?.destroy(); }};
}
