// curves.js - a job's training curves: loss (per step and per epoch),
// accuracy and the learning rate, with a log scale, smoothing, the best
// epoch marked, and other runs drawn beside it.
//
// Every series comes from GET /v1/jobs/{id}/curves, which downsamples on
// the server to at most POINTS points whatever the run's length. Live
// epochs and steps are appended while the series are whole (one record a
// point) and short of POINTS; after that a refetch (at most every
// RELOAD_MS) brings the newly downsampled series. A chart never holds more
// than POINTS points a series, so a 20,000-epoch run draws as fast as a
// 20-epoch one.
//
// A language model's run (jobinfo.isLMJob) draws its losses in nats, the
// second chart its perplexity per epoch (exp of the epoch losses: for a
// point that is the mean of several epochs, their geometric-mean
// perplexity), and, while it runs, the validation loss measured every
// eval_every_steps (addStepVal) on the loss chart.
import {api} from './api.js';
import {h, field, jobColour} from './util.js';
import {metricName, isLMJob} from './jobinfo.js';

export const POINTS = 200;
const RELOAD_MS = 10000;
const COMPARE_MAX = 4;
// Regression metrics per epoch, when a run has them: [key, label, colour,
// chart, axis]. R² (at most 1) gets its own axis on the right: beside an
// RMSE in the target's units (20,000 for prices) it would be a flat line
// at 0 on theirs.
const REGRESSION = [['train_rmse', 'train RMSE', '#1e7f3c', 'acc'], ['val_rmse', 'validation RMSE', '#9c27b0', 'acc'],
  ['val_mae', 'validation MAE', '#b8860b', 'acc'], ['val_r2', 'validation R²', '#0e7490', 'acc', 'r2']];

// An exponential moving average, debiased as TensorBoard's smoothing (so
// the first points are not pulled towards 0); null values stay gaps.
function smooth(points, weight) {
  if (!weight) return points;
  let last = 0, n = 0;
  return points.map((p) => {
    if (p.y === null || p.y === undefined || !isFinite(p.y)) return p;
    last = last * weight + (1 - weight) * p.y;
    n++;
    return {x: p.x, y: last / (1 - weight ** n)};
  });
}

const series = (points, xKey, yKey) =>
  points.map((p) => ({x: p[xKey], y: typeof p[yKey] === 'number' ? p[yKey] : null}));
const hasValues = (pts) => pts.some((p) => p.y !== null);

function makeChart(canvas, yTitle, r2Axis = false) {
  if (!window.Chart) return null;
  // The R² axis exists on the second chart only, shown for a regression run.
  const r2 = r2Axis ? {r2: {type: 'linear', position: 'right', display: false, grid: {drawOnChartArea: false},
    title: {display: true, text: 'R²'}}} : {};
  return new window.Chart(canvas, {
    type: 'line',
    data: {datasets: []},
    options: {
      responsive: true, maintainAspectRatio: false, animation: false, parsing: false, normalized: true,
      spanGaps: true, interaction: {mode: 'nearest', intersect: false},
      plugins: {legend: {labels: {boxWidth: 12}}},
      scales: {x: {type: 'linear', title: {display: true, text: 'epoch'}, min: 0},
               y: {type: 'linear', title: {display: true, text: yTitle}}, ...r2},
    },
  });
}

const line = (label, data, colour, extra = {}) =>
  ({label, data, borderColor: colour, backgroundColor: colour, pointRadius: data.length > 60 ? 0 : 2,
    borderWidth: 2, tension: 0.15, ...extra});

// The section: {el, setJob(job), addEpoch(record), addStep(job), load(),
// destroy()}. others: a promise of the tenant's other jobs [{id, name}]
// for the comparison picker.
export function curvesSection(jobId) {
  const state = {epochs: [], steps: [], stepVals: [], perEpoch: 1, perStep: 1, totalEpochs: 0, job: null};
  const compared = new Map();   // id -> {name, curves}
  const logScale = h('input', {type: 'checkbox', id: 'curve-log'});
  const smoothing = h('input', {type: 'range', id: 'curve-smoothing', min: 0, max: 0.95, step: 0.05, value: 0});
  const smoothOut = h('output', {for: 'curve-smoothing', id: 'curve-smoothing-value', text: '0'});
  const compare = h('select', {id: 'curve-compare'}, h('option', {value: '', text: 'Add a run…'}));
  const chips = h('div', {class: 'chips', id: 'compare-chips'});
  const note = h('p', {class: 'muted', id: 'curves-note'});
  const canvases = {
    loss: h('canvas', {id: 'loss-chart', role: 'img', 'aria-label': 'Loss per step and per epoch'}),
    acc: h('canvas', {id: 'acc-chart', role: 'img', 'aria-label': 'Accuracy per epoch'}),
    lr: h('canvas', {id: 'lr-chart', role: 'img', 'aria-label': 'Learning rate per step'}),
  };
  const waiting = {
    loss: h('p', {class: 'chart-waiting', id: 'loss-waiting', text: 'Waiting for the first steps…'}),
    acc: h('p', {class: 'chart-waiting', id: 'acc-waiting', text: 'Waiting for the first epoch…'}),
    lr: h('p', {class: 'chart-waiting', id: 'lr-waiting', text: 'Waiting for the first steps…'}),
  };
  const box = (k) => h('div', {class: 'chart-box'}, canvases[k], waiting[k]);
  const noChart = window.Chart ? null : h('p', {class: 'muted',
    text: 'Charts need Chart.js, which this server does not have (Debian package libjs-chart.js); the table below has the numbers.'});
  const el = h('section', {class: 'card', id: 'charts', 'data-epochs': '0', 'aria-label': 'Training curves'},
    h('h2', {text: 'Training curves'}), noChart,
    h('div', {class: 'row chart-controls'},
      h('label', {class: 'check'}, logScale, ' Log scale (loss, learning rate)'),
      h('div', {class: 'field inline'}, h('label', {for: smoothing.id, text: 'Smoothing'}), smoothing, smoothOut),
      field('Compare with', compare), chips),
    h('div', {class: 'grid charts'}, box('loss'), box('acc'), box('lr')), note);
  const charts = {loss: makeChart(canvases.loss, 'loss'), acc: makeChart(canvases.acc, 'accuracy', true),
    lr: makeChart(canvases.lr, 'learning rate')};

  function draw() {
    const w = Number(smoothing.value);
    smoothOut.textContent = String(w);
    const ep = state.epochs, st = state.steps;
    const best = state.job && state.job.metrics && state.job.metrics.best;
    const sets = {loss: [], acc: [], lr: []};
    const lm = !!state.job && isLMJob(state.job);
    const stepLoss = series(st, 'x', 'loss');
    if (hasValues(stepLoss)) sets.loss.push(line('train loss (per step, epoch mean so far)', smooth(stepLoss, w), '#8fb3e8', {borderWidth: 1, pointRadius: 0}));
    // A regression run has no accuracy: its errors (RMSE, MAE) and R² take
    // the second chart (epoch records' train_rmse, val_rmse, val_mae, val_r2).
    const regression = !ep.some((p) => typeof p.train_accuracy === 'number' || typeof p.val_accuracy === 'number') &&
      ep.some((p) => REGRESSION.some(([k]) => typeof p[k] === 'number'));
    if (charts.acc) {
      charts.acc.options.scales.y.title.text = lm ? 'perplexity' : regression ? 'RMSE, MAE (target units)' : 'accuracy';
      charts.acc.options.scales.r2.display = regression;
    }
    if (charts.loss) charts.loss.options.scales.y.title.text = lm ? 'loss (nats)' : 'loss';
    canvases.acc.setAttribute('aria-label', lm ? 'Perplexity per epoch' : regression ? 'RMSE, MAE and R² per epoch' : 'Accuracy per epoch');
    canvases.loss.setAttribute('aria-label', lm ? 'Loss in nats per step and per epoch' : 'Loss per step and per epoch');
    for (const [k, label, colour, chart, axis] of [['train_loss', 'train loss', '#1f5fbf', 'loss'], ['val_loss', 'validation loss', '#d9822b', 'loss'],
      ['train_accuracy', 'train accuracy', '#1e7f3c', 'acc'], ['val_accuracy', 'validation accuracy', '#9c27b0', 'acc'],
      ...(regression ? REGRESSION : [])]) {
      const pts = series(ep, 'epoch', k);
      if (hasValues(pts)) sets[chart].push(line(label, smooth(pts, w), colour, axis ? {yAxisID: axis} : {}));
    }
    if (lm) drawLM(w, sets);
    const lr = series(st, 'x', 'lr');
    if (hasValues(lr)) sets.lr.push(line('learning rate', lr, '#5b6470', {pointRadius: 0, tension: 0}));
    if (best && typeof best.value === 'number') {
      const chart = /accuracy/.test(best.metric) ? 'acc' : 'loss';
      sets[chart].push({label: `best ${metricName(best.metric)} (epoch ${best.epoch})`, data: [{x: best.epoch, y: best.value}],
        showLine: false, pointStyle: 'star', pointRadius: 9, pointHoverRadius: 11, borderColor: '#b3261e',
        backgroundColor: '#b3261e', borderWidth: 2});
    }
    for (const [id, c] of compared) {
      const colour = jobColour(id);
      const e = c.curves.epochs.points;
      const lossKey = e.some((p) => typeof p.val_loss === 'number') ? 'val_loss' : 'train_loss';
      const accKey = ['val_accuracy', 'train_accuracy', 'val_rmse', 'train_rmse'].find((k) => e.some((p) => typeof p[k] === 'number')) || 'val_accuracy';
      const l = series(e, 'epoch', lossKey);
      // Beside a language model, the other run's perplexity (exp of its loss).
      const a = lm ? l.map((p) => ({x: p.x, y: p.y === null ? null : Math.exp(p.y)})) : series(e, 'epoch', accKey);
      const dash = {borderDash: [6, 4], pointRadius: 0};
      if (hasValues(l)) sets.loss.push(line(`${c.name}: ${metricName(lossKey)}`, smooth(l, w), colour, dash));
      if (hasValues(a)) sets.acc.push(line(`${c.name}: ${lm ? `${lossKey === 'val_loss' ? 'val. ' : ''}perplexity` : metricName(accKey)}`, smooth(a, w), colour, dash));
    }
    for (const k of ['loss', 'acc', 'lr']) {
      const most = Math.max(0, ...sets[k].map((d) => d.data.length));
      canvases[k].dataset.points = String(most);
      canvases[k].dataset.series = String(sets[k].length);
      waiting[k].hidden = sets[k].length > 0;
      const chart = charts[k];
      if (!chart) continue;
      chart.data.datasets = sets[k];
      chart.options.scales.y.type = logScale.checked && (k !== 'acc' || lm) ? 'logarithmic' : 'linear';
      chart.update('none');
    }
    el.dataset.epochs = String(state.totalEpochs);
    note.textContent = (state.perEpoch > 1
      ? `${state.totalEpochs.toLocaleString()} epochs: each point of the epoch curves is the mean of ${state.perEpoch} epochs. ` : '') +
      (state.steps.some((p) => p.n > 1) ? `The per-step curves are thinned to at most ${POINTS} points (means).` : '');
  }

  // A language model: perplexity per epoch on the second chart, and the
  // validation loss measured every eval_every_steps on the first.
  function drawLM(w, sets) {
    for (const [k, label, colour] of [['train_loss', 'train perplexity', '#1e7f3c'], ['val_loss', 'validation perplexity', '#9c27b0']]) {
      const pts = series(state.epochs, 'epoch', k).map((p) => ({x: p.x, y: p.y === null ? null : Math.exp(p.y)}));
      if (hasValues(pts)) sets.acc.push(line(label, smooth(pts, w), colour));
    }
    const every = state.job.hyperparameters && state.job.hyperparameters.eval_every_steps;
    if (state.stepVals.length) {
      sets.loss.push(line(`validation loss (every ${every || 'N'} steps)`, state.stepVals, '#e8a33d',
        {pointRadius: 3, borderDash: [2, 3], borderWidth: 1}));
    }
  }

  // The validation loss of a step (the job's metrics val_loss at val_step),
  // drawn where the server draws that step's training loss.
  function addStepVal(v, job) {
    const p = job.progress || {};
    if (!p.total_steps || !p.epochs || state.stepVals.some((q) => q.step === v.step)) return;
    state.stepVals.push({step: v.step, x: v.step * p.epochs / p.total_steps, y: v.loss});
    canvases.loss.dataset.stepVals = String(state.stepVals.length);
    draw();
  }

  function take(doc) {
    state.epochs = doc.epochs.points;
    state.steps = doc.steps.points;
    state.perEpoch = doc.epochs.per_point;
    state.perStep = doc.steps.per_point;
    state.totalEpochs = doc.epochs.total;
  }

  async function load() {
    take(await api(`/v1/jobs/${jobId}/curves?points=${POINTS}`));
    draw();
  }

  // A refetch soon, at most one per RELOAD_MS.
  let reloadTimer = null, lastReload = 0;
  function reloadSoon() {
    if (reloadTimer) return;
    const wait = Math.max(0, lastReload + RELOAD_MS - Date.now());
    reloadTimer = setTimeout(async () => {
      reloadTimer = null;
      lastReload = Date.now();
      try { await load(); } catch { /* the next event tries again */ }
    }, wait);
  }

  function addEpoch(rec) {
    if (!rec || typeof rec.epoch !== 'number') return;
    const last = state.epochs.length ? state.epochs[state.epochs.length - 1].epoch : 0;
    if (rec.epoch <= last) return;   // a repeat after a resume
    state.totalEpochs = Math.max(state.totalEpochs + 1, rec.epoch);
    if (state.perEpoch === 1 && state.epochs.length < POINTS) {
      state.epochs.push({epoch: rec.epoch, n: 1, train_loss: rec.train_loss, val_loss: rec.val_loss,
        train_accuracy: rec.train_accuracy, val_accuracy: rec.val_accuracy, train_rmse: rec.train_rmse,
        val_rmse: rec.val_rmse, val_mae: rec.val_mae, val_r2: rec.val_r2});
      draw();
    } else reloadSoon();
  }

  function addStep(job) {
    const p = job.progress || {}, m = job.metrics || {};
    if (!p.step || !p.total_steps || !p.epochs) return;
    const last = state.steps.length ? state.steps[state.steps.length - 1].step : 0;
    if (p.step <= last) return;
    if (state.perStep === 1 && state.steps.length < POINTS) {
      state.steps.push({step: p.step, x: p.step * p.epochs / p.total_steps, n: 1, loss: m.train_loss, lr: m.learning_rate});
      draw();
    } else reloadSoon();
  }

  function setJob(job) { state.job = job; }

  // The comparison picker: the tenant's other jobs that have epochs.
  async function fillCompare() {
    try {
      const doc = await api('/v1/jobs?limit=200');
      for (const j of doc.items) {
        if (j.id === jobId || !(j.metrics && j.metrics.epoch)) continue;
        compare.append(h('option', {value: j.id, text: `${j.name} (${j.status})`}));
      }
    } catch { /* no picker; the page still works */ }
  }
  compare.addEventListener('change', async () => {
    const id = compare.value;
    compare.value = '';
    if (!id || compared.has(id) || compared.size >= COMPARE_MAX) return;
    const name = compare.querySelector(`option[value="${CSS.escape(id)}"]`).textContent.replace(/ \(\w+\)$/, '');
    try {
      compared.set(id, {name, curves: await api(`/v1/jobs/${id}/curves?points=${POINTS}`)});
    } catch { return; }
    chips.append(h('span', {class: 'chip', 'data-job': id}, h('span', {class: 'swatch', style: `background:${jobColour(id)}`}), name,
      h('button', {type: 'button', class: 'secondary small', text: '×', 'aria-label': `Stop comparing ${name}`,
        onclick: (e) => { compared.delete(id); e.target.closest('.chip').remove(); draw(); }})));
    draw();
  });
  logScale.addEventListener('change', draw);
  smoothing.addEventListener('input', draw);
  fillCompare();

  return {el, setJob, addEpoch, addStep, addStepVal, load, draw,
    destroy() { clearTimeout(reloadTimer); for (const c of Object.values(charts)) c?.destroy(); }};
}
