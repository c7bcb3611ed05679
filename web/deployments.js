// deployments.js - serving deployments (/v1/deployments): the list with
// live traffic, the create form, and a deployment's page with its
// replicas, spec, two live charts (latency and batch size, drawn on a
// canvas from the polls) and its actions (scale, change model, delete).
// A language model's deployment also has its text generation (time to
// first token, inter-token latency and tokens/s charted the same way, its
// engines' sequences and KV cache) and a streaming Try it (generate.js).
// There is no event stream for deployments: the pages poll while visible.
import {api} from './api.js';
import {poll} from './live.js';
import {generateTryIt} from './generate.js';
import {h, field, setFieldError, fmtNum, fmtTime, kv, syncChildren, labelCells, pickLabel} from './util.js';

const POLL_MS = 1000;
const SAMPLES = 120;   // per deployment, about two minutes at POLL_MS

// The traffic samples of each deployment seen in this tab (id -> array of
// {t, p50, p99, batch, requests, and for a language model ttft50, ttft99,
// itl50, itl99, tps}); the list and the page both add to it, so a page
// opened from the list already has a history.
const history = new Map();

function sample(d) {
  const t = d.traffic || {};
  let list = history.get(d.id);
  if (!list) history.set(d.id, list = []);
  // The charts follow the recent window (10-20 s) when the server gives
  // one, else the figures over the deployment's life.
  const w = t.recent || {latency_ms: t.latency_ms, batch_size_mean: t.batch_size?.mean};
  // Generation's recent window: milliseconds (deploy/books.c
  // lat_quantile), tokens/s from the first generation on (0 before is no
  // measurement, so a gap).
  const g = d.generate && d.generate.recent ? d.generate.recent : null;
  const some = !!(d.generate && d.generate.requests);
  list.push({t: Date.now(), p50: w.latency_ms?.p50 ?? null, p99: w.latency_ms?.p99 ?? null,
    batch: w.batch_size_mean ?? null, requests: t.requests ?? 0,
    ttft50: g?.ttft_ms?.p50 ?? null, ttft99: g?.ttft_ms?.p99 ?? null,
    itl50: g?.itl_ms?.p50 ?? null, itl99: g?.itl_ms?.p99 ?? null,
    tps: some ? g.tokens_per_second ?? null : null});
  if (list.length > SAMPLES) list.splice(0, list.length - SAMPLES);
  return list;
}

const ms = (x) => (x === null || x === undefined ? '—' : x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : Math.round(x).toString());
const latencyText = (l) => (l && l.p50 !== null && l.p50 !== undefined ? `${ms(l.p50)} / ${ms(l.p99)} ms` : '—');
const replicasText = (r) => (r ? `${r.ready ?? 0}/${r.desired ?? 0} (${r.min}–${r.max})` : '—');
// Why a replica the deployment asked for has not started: the server's own
// words for a queued job's wait (replicas.waiting_reason), or nothing.
const waitingNote = (r) => (r && r.waiting_reason
  ? h('div', {class: 'muted row-note waiting-reason', text: `A replica waits: ${r.waiting_reason}`}) : null);
const count = (x) => (x === null || x === undefined ? '—' : Number(x).toLocaleString());

function badge(status) {
  return h('span', {class: 'status dstatus-' + status, text: status.replace(/_/g, ' ')});
}

function modelLink(id, names) {
  return h('a', {href: `#/models/${encodeURIComponent(id)}`, text: names.get(id) || id});
}

// The slice a replica holds: "GPU 0 · 1g.18gb · slot 3", "GPU 1 · whole
// GPU · slot 7"; none on the CPU; "—" while queued.
function sliceText(i) {
  if (i.gpu !== null && i.gpu !== undefined) return `GPU ${i.gpu} · ${i.profile || 'whole GPU'} · slot ${i.slot}`;
  return i.state === 'queued' ? '—' : 'none (CPU)';
}

// resources.gpu: "none", "any", "whole", a profile, or {min_memory_gb, ...}.
function gpuText(r) {
  const g = r && r.gpu;
  if (g === null || g === undefined) return '—';
  if (typeof g !== 'object') return String(g);
  return Object.entries(g).map(([k, v]) => `${k.replace(/_/g, ' ')} ${v}`).join(', ');
}

async function modelNames() {
  const doc = await api('/v1/models?limit=200');
  return doc.items;
}

// ---- the list and the create form ----

// The create form's controls, each with the problem "field" it answers to.
function createForm(onCreated) {
  const top = h('p', {class: 'banner', id: 'dep-form-error', role: 'alert'});
  const num = (id, attrs = {}) => h('input', {id, type: 'number', ...attrs});
  const c = {
    name: h('input', {id: 'dep-name', required: true, maxlength: 63, pattern: '[A-Za-z0-9._\\-]+', placeholder: 'fashion'}),
    model: h('select', {id: 'dep-model', required: true}),
    min: num('dep-min', {min: 0, max: 64, value: 1}),
    max: num('dep-max', {min: 1, max: 64, value: 1}),
    gpu: h('input', {id: 'dep-gpu', list: 'dep-gpu-choices', placeholder: 'server default'}),
    max_batch_size: num('dep-max_batch_size', {min: 1, max: 4096, placeholder: '32'}),
    max_queue_delay_us: num('dep-max_queue_delay_us', {min: 0, max: 1000000, placeholder: '500'}),
    requests_per_second: num('dep-rps', {min: 0, step: 'any', placeholder: 'no limit'}),
    burst: num('dep-burst', {min: 1, placeholder: 'from the rate'}),
    max_concurrency: num('dep-max_concurrency', {min: 1, placeholder: 'no limit'}),
    tokens_per_minute: num('dep-tokens_per_minute', {min: 1, placeholder: 'no limit'}),
  };
  const gpuChoices = h('datalist', {id: 'dep-gpu-choices'});
  const setGpuChoices = (profiles) => gpuChoices.replaceChildren(
    ...[...new Set(['none', 'any', 'whole', ...profiles])].map((v) => h('option', {value: v})));
  setGpuChoices([]);
  const fieldOf = {
    name: c.name, model: c.model, replicas: c.max, 'replicas.min': c.min, 'replicas.max': c.max,
    resources: c.gpu, 'resources.gpu': c.gpu, batching: c.max_batch_size,
    'batching.max_batch_size': c.max_batch_size, 'batching.max_queue_delay_us': c.max_queue_delay_us,
    limits: c.requests_per_second, 'limits.requests_per_second': c.requests_per_second,
    'limits.burst': c.burst, 'limits.max_concurrency': c.max_concurrency,
    'limits.tokens_per_minute': c.tokens_per_minute,
  };
  const controlFor = (f) => (f ? fieldOf[f] || fieldOf[f.split(/[.[]/)[0]] || null : null);
  const submit = h('button', {type: 'submit', text: 'Create deployment'});

  const form = h('form', {class: 'card', id: 'dep-form', novalidate: true, onsubmit: async (e) => {
    e.preventDefault();
    top.textContent = '';
    for (const el of Object.values(c)) setFieldError(el, '');
    const n = (el) => (el.value.trim() === '' ? undefined : Number(el.value));
    const body = {name: c.name.value.trim(), model: c.model.value,
      replicas: {min: n(c.min) ?? 1, max: n(c.max) ?? 1}};
    const gpu = c.gpu.value.trim();
    if (gpu) body.resources = {gpu};
    const batching = {max_batch_size: n(c.max_batch_size), max_queue_delay_us: n(c.max_queue_delay_us)};
    const limits = {requests_per_second: n(c.requests_per_second), burst: n(c.burst), max_concurrency: n(c.max_concurrency),
      tokens_per_minute: n(c.tokens_per_minute)};
    for (const [k, o] of [['batching', batching], ['limits', limits]]) {
      for (const key of Object.keys(o)) if (o[key] === undefined) delete o[key];
      if (Object.keys(o).length) body[k] = o;
    }
    submit.disabled = true;
    try {
      const doc = await api('/v1/deployments', {method: 'POST', json: body});
      top.textContent = '';
      c.name.value = '';
      onCreated(doc);
    } catch (x) {
      const el = controlFor(x.field);
      if (el) { setFieldError(el, x.message); el.focus(); }
      else top.textContent = (x.field ? `${x.field}: ` : '') + x.message;
    } finally { submit.disabled = false; }
  }},
  h('h2', {text: 'New deployment'}), top,
  h('div', {class: 'row'}, field('Name', c.name), field('Model', c.model),
    field('Min replicas', c.min), field('Max replicas', c.max),
    field('GPU (none, any, whole, a MIG profile)', c.gpu, gpuChoices)),
  h('fieldset', {}, h('legend', {text: 'Batching and limits (empty: the defaults)'}),
    h('div', {class: 'row'}, field('Max batch size', c.max_batch_size), field('Max queue delay (µs)', c.max_queue_delay_us),
      field('Requests per second', c.requests_per_second), field('Burst', c.burst),
      field('Max concurrency', c.max_concurrency),
      field('Tokens per minute (generation: prompt + max tokens)', c.tokens_per_minute))),
  submit);

  function setModels(models) {
    const keep = c.model.value;
    c.model.replaceChildren(...models.map((m) => h('option', {value: m.id, text: pickLabel(m)})));
    if (!models.length) {
      c.model.append(h('option', {value: '', text: 'no models yet'}));
      submit.disabled = true;
      top.replaceChildren('No models yet: a job that succeeds makes one (', h('a', {href: '#/new', text: 'new job'}), ').');
    } else if (keep && models.some((m) => m.id === keep)) c.model.value = keep;
  }
  return {form, setModels, setGpuChoices};
}

const INSTANCE_COLUMNS = ['Replica', 'State', 'Generation', 'Device', 'Slice (GPU · profile · slot)', 'In flight', 'Started'];

export function deploymentsPage(root) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const tbody = h('tbody', {id: 'deployments-body'});
  const empty = h('p', {class: 'muted', id: 'deployments-empty', hidden: true,
    text: 'No deployments yet: create one below to serve a model on its own replicas.'});
  const cols = [['Name'], ['Model', 'hide-narrow'], ['Status'], ['Replicas ready/desired (min–max)'],
    ['Requests'], ['Latency p50 / p99'], ['Mean batch', 'hide-narrow'], ['429s', 'hide-narrow']];
  const table = h('div', {class: 'table-wrap', hidden: true}, h('table', {id: 'deployments', class: 'cards'},
    h('caption', {class: 'muted', text: 'Deployments of this tenant, updated every second'}),
    h('thead', {}, h('tr', {}, cols.map(([t, cls]) => h('th', {scope: 'col', class: cls || null, text: t})))), tbody));
  let names = new Map();
  const created = h('p', {id: 'dep-created', role: 'status'});
  const {form, setModels, setGpuChoices} = createForm((doc) => {
    created.replaceChildren('Created ', h('a', {href: `#/deployments/${encodeURIComponent(doc.id)}`, text: doc.name}),
      ` (${doc.id}); its replicas are starting.`);
    poller.now();
  });
  root.append(h('h1', {text: 'Deployments'}), banner, empty, table, created, form);

  function row(d) {
    const t = d.traffic || {};
    const gone = d.status === 'deleting';
    return labelCells(h('tr', {'data-key': d.id, 'data-deployment-id': d.id, 'data-status': d.status, 'data-requests': t.requests ?? 0},
      h('td', {class: 'name'}, gone ? h('span', {text: d.name}) : h('a', {href: `#/deployments/${encodeURIComponent(d.id)}`, text: d.name}),
        h('div', {class: 'muted', text: d.id})),
      h('td', {class: 'hide-narrow'}, modelLink(d.model, names)),
      h('td', {}, badge(d.status)),
      h('td', {class: 'replicas'}, replicasText(d.replicas), waitingNote(d.replicas)),
      h('td', {class: 'requests', text: count(t.requests)}),
      h('td', {class: 'latency', text: latencyText(t.latency_ms)}),
      h('td', {class: 'hide-narrow batch', text: fmtNum(t.batch_size?.mean ?? null, 2)}),
      h('td', {class: 'hide-narrow rejected', text: count(t.rejected)})), cols.map(([t]) => t));
  }

  async function load() {
    try {
      const doc = await api('/v1/deployments');
      for (const d of doc.items) sample(d);
      syncChildren(tbody, doc.items.map(row), 1);
      empty.hidden = doc.items.length > 0;
      table.hidden = !doc.items.length;
      banner.textContent = '';
    } catch (e) {
      if (e.status === 404) banner.textContent = 'This server has no deployments API.';
      else if (e.status !== 401) banner.textContent = `Could not load deployments: ${e.message}`;
    }
  }

  modelNames().then((models) => {
    names = new Map(models.map((m) => [m.id, m.name]));
    setModels(models);
  }).catch((e) => { if (e.status !== 401) banner.textContent = `Could not load models: ${e.message}`; });
  // The MIG profiles this host has, for the GPU choices.
  api('/v1/devices').then((dev) => setGpuChoices((dev.gpus || []).flatMap((g) => g.slices.map((s) => s.profile).filter(Boolean))))
    .catch(() => {});
  const poller = poll(load, {interval: POLL_MS});
  return () => poller.stop();
}

// ---- the charts: lines over time on a <canvas>, no library ----

// A round step for about `n` ticks up to `max`.
function niceStep(max, n) {
  const raw = max / n, p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

// Draws series ({label, colour, key}) of samples ({t, [key]: number|null})
// against time: x in seconds before the newest sample, y from 0 with round
// ticks, both axes labelled. A null value is a gap in its line.
function drawChart(canvas, samples, {series, yLabel, yDigits = 1}) {
  const dpr = window.devicePixelRatio || 1;
  const cssW = canvas.clientWidth || 320, cssH = canvas.clientHeight || 200;
  if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, cssW, cssH);
  const css = getComputedStyle(document.documentElement);
  const fg = css.getPropertyValue('--fg').trim() || '#1b1f24';
  const muted = css.getPropertyValue('--muted').trim() || '#5b6470';
  const line = css.getPropertyValue('--line').trim() || '#d5dae1';
  ctx.font = '12px system-ui, sans-serif';
  const L = 52, R = 20, T = 24, B = 36;
  const w = Math.max(10, cssW - L - R), hgt = Math.max(10, cssH - T - B);

  const tEnd = samples.length ? samples[samples.length - 1].t : Date.now();
  const span = Math.max(30, samples.length ? (tEnd - samples[0].t) / 1000 : 0);
  let yMax = 0;
  for (const s of samples) for (const se of series) if (typeof s[se.key] === 'number') yMax = Math.max(yMax, s[se.key]);
  const yStep = niceStep(yMax > 0 ? yMax * 1.05 : 1, 4);
  const yTop = Math.max(yStep, Math.ceil((yMax * 1.05) / yStep) * yStep);
  const X = (t) => L + w - ((tEnd - t) / 1000 / span) * w;
  const Y = (v) => T + hgt - (v / yTop) * hgt;

  // Grid, ticks and axis labels.
  ctx.strokeStyle = line; ctx.fillStyle = muted; ctx.lineWidth = 1;
  ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
  for (let v = 0; v <= yTop + yStep / 2; v += yStep) {
    const y = Math.round(Y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(L + w, y); ctx.stroke();
    ctx.fillText(String(Number(v.toFixed(3))), L - 6, y);   // 2.5, not 3
  }
  ctx.textAlign = 'center'; ctx.textBaseline = 'top';
  const xStep = niceStep(span, 5);
  for (let s = 0; s <= span + 1e-9; s += xStep) {
    const x = Math.round(L + w - (s / span) * w) + 0.5;
    ctx.beginPath(); ctx.moveTo(x, T + hgt); ctx.lineTo(x, T + hgt + 4); ctx.stroke();
    ctx.fillText(s === 0 ? 'now' : `−${Math.round(s)}`, x, T + hgt + 6);
  }
  ctx.fillText('time (seconds ago)', L + w / 2, T + hgt + 20);
  ctx.save();
  ctx.translate(12, T + hgt / 2); ctx.rotate(-Math.PI / 2);
  ctx.textBaseline = 'middle';
  ctx.fillText(yLabel, 0, 0);
  ctx.restore();
  ctx.strokeStyle = fg;
  ctx.beginPath(); ctx.moveTo(L + 0.5, T); ctx.lineTo(L + 0.5, T + hgt + 0.5); ctx.lineTo(L + w, T + hgt + 0.5); ctx.stroke();

  // The lines, the first series on top (p99 under p50: a wider line, so
  // equal values show both), then the legend with each latest value.
  ctx.save();
  ctx.beginPath(); ctx.rect(L, T - 2, w + 2, hgt + 4); ctx.clip();
  for (const se of [...series].reverse()) {
    ctx.strokeStyle = ctx.fillStyle = se.colour; ctx.lineWidth = se.width || 2;
    ctx.beginPath();
    let pen = false, alone = null;
    for (const s of samples) {
      const v = s[se.key];
      if (typeof v !== 'number') { pen = false; continue; }
      if (pen) { ctx.lineTo(X(s.t), Y(v)); alone = null; } else { ctx.moveTo(X(s.t), Y(v)); alone = s; }
      pen = true;
    }
    ctx.stroke();
    if (alone) { ctx.beginPath(); ctx.arc(X(alone.t), Y(alone[se.key]), ctx.lineWidth + 0.5, 0, Math.PI * 2); ctx.fill(); }
  }
  ctx.restore();
  ctx.textAlign = 'left'; ctx.textBaseline = 'middle';
  let lx = L;
  const last = samples[samples.length - 1] || {};
  for (const se of series) {
    const v = last[se.key];
    const text = `${se.label}: ${typeof v === 'number' ? v.toFixed(yDigits) : '—'}`;
    ctx.fillStyle = se.colour; ctx.fillRect(lx, 7, 12, 3);
    ctx.fillStyle = fg; ctx.fillText(text, lx + 16, 9);
    lx += 16 + ctx.measureText(text).width + 16;
  }
  if (!samples.some((s) => series.some((se) => typeof s[se.key] === 'number'))) {
    ctx.fillStyle = muted; ctx.textAlign = 'center';
    ctx.fillText('no requests yet', L + w / 2, T + hgt / 2);
  }
}

function chart(id, title, opts) {
  const canvas = h('canvas', {id, class: 'dchart', role: 'img', 'data-samples': '0', 'aria-label': title});
  const el = h('figure', {class: 'dchart-box'}, h('figcaption', {text: title}), canvas);
  let last = [];
  const draw = (samples = last) => {
    last = samples;
    drawChart(canvas, samples, opts);
    const s = samples[samples.length - 1] || {};
    canvas.dataset.samples = String(samples.length);
    const values = opts.series.map((se) => `${se.label} ${typeof s[se.key] === 'number' ? s[se.key].toFixed(opts.yDigits ?? 1) : 'none'}`);
    canvas.setAttribute('aria-label', `${title}: ${samples.length} samples; latest ${values.join(', ')} ${opts.unit}`);
  };
  return {el, draw};
}

// ---- a language model's deployment: its text generation ----

const ENGINE_COLUMNS = ['Replica', 'Sequences running', 'Waiting', 'KV cache blocks used / total', 'KV cache blocks cached',
  'Prompt tokens', 'Prompt tokens from prefix cache', 'Generated tokens'];
const blocksText = (used, total) => (total ? `${count(used)} / ${count(total)} (${Math.round((100 * used) / total)} %)`
  : `${count(used)} / ${count(total)} (no cache while idle)`);
// The prompt tokens whose keys and values came from the prefix cache.
const hitText = (hit, prompt) => (prompt ? `${count(hit)} of ${count(prompt)} (${Math.round((100 * (hit || 0)) / prompt)} %)`
  : count(hit));

// The deployment's generation figures, its engines (one row a replica, as
// its last heartbeat said) and three charts of the recent window: time to
// first token, inter-token latency (both in ms, p50 and p99) and generated
// tokens per second. {el, draw(d, samples), redraw()}.
function generationSection() {
  const figures = h('div', {id: 'dep-gen-figures'});
  const ttft = chart('ttft-chart', 'Time to first token (ms)', {yLabel: 'time to first token (ms)', unit: 'ms', yDigits: 2, series: [
    {label: 'p50', colour: '#1f5fbf', key: 'ttft50'}, {label: 'p99', colour: '#d9822b', key: 'ttft99', width: 4}]});
  const itl = chart('itl-chart', 'Inter-token latency (ms)', {yLabel: 'between tokens (ms)', unit: 'ms', yDigits: 2, series: [
    {label: 'p50', colour: '#1f5fbf', key: 'itl50'}, {label: 'p99', colour: '#d9822b', key: 'itl99', width: 4}]});
  const tps = chart('tps-chart', 'Generated tokens per second', {yLabel: 'tokens per second', unit: 'tokens/s', yDigits: 1,
    series: [{label: 'tokens/s', colour: '#1e7f3c', key: 'tps'}]});
  const engBody = h('tbody', {id: 'engines-body'});
  const el = h('section', {class: 'card', id: 'dep-generate', 'aria-label': 'Text generation'},
    h('h2', {text: 'Text generation'}), figures,
    h('p', {class: 'muted', text: 'Sampled every second with the traffic; each value covers the generations of the last 10 to 20 seconds. ' +
      'Time to first token counts from the request\'s arrival; the latencies are histogram buckets (about 19 % apart).'}),
    h('div', {class: 'grid', id: 'dep-gen-charts'}, ttft.el, itl.el, tps.el),
    h('h3', {text: 'Engines (each replica\'s last heartbeat, every 2 s)'}),
    h('div', {class: 'table-wrap'}, h('table', {id: 'engines', class: 'cards'},
      h('thead', {}, h('tr', {}, ENGINE_COLUMNS.map((t) => h('th', {scope: 'col', text: t})))), engBody)));

  function engineRow(i) {
    const e = i.generate;
    if (!e) {
      return labelCells(h('tr', {'data-key': i.id, 'data-instance-id': i.id}, h('td', {text: i.id}),
        h('td', {colspan: ENGINE_COLUMNS.length - 1, class: 'muted', text: i.state === 'ready' ? 'no heartbeat yet' : i.state})),
      ENGINE_COLUMNS);
    }
    return labelCells(h('tr', {'data-key': i.id, 'data-instance-id': i.id, 'data-sequences': e.sequences, 'data-waiting': e.waiting,
      'data-kv-used': e.kv_blocks_used, 'data-kv-total': e.kv_blocks_total, 'data-kv-cached': e.kv_blocks_cached ?? 0,
      'data-prompt': e.prompt_tokens, 'data-prefix-hit': e.prefix_cache_hit_tokens ?? 0, 'data-generated': e.generated_tokens},
    h('td', {text: i.id}), h('td', {text: count(e.sequences)}), h('td', {text: count(e.waiting)}),
    h('td', {text: blocksText(e.kv_blocks_used, e.kv_blocks_total)}), h('td', {text: count(e.kv_blocks_cached)}),
    h('td', {text: count(e.prompt_tokens)}), h('td', {text: hitText(e.prefix_cache_hit_tokens, e.prompt_tokens)}),
    h('td', {text: count(e.generated_tokens)})), ENGINE_COLUMNS);
  }

  function draw(d, samples) {
    const g = d.generate || {requests: 0, prompt_tokens: 0, generated_tokens: 0, sequences: 0, waiting: 0,
      kv_blocks_used: 0, kv_blocks_total: 0, kv_blocks_cached: 0, ttft_ms: {}, itl_ms: {}, recent: null};
    const r = g.recent;
    el.dataset.requests = String(g.requests);
    el.dataset.generatedTokens = String(g.generated_tokens);
    syncChildren(figures, [h('div', {class: 'grid'},
      kv([['Generations', h('span', {id: 'gen-requests', text: count(g.requests)})],
        ['Prompt tokens', count(g.prompt_tokens)], ['Generated tokens', h('span', {id: 'gen-generated', text: count(g.generated_tokens)})],
        ['Time to first token p50 / p99', latencyText(g.ttft_ms)], ['Inter-token latency p50 / p99', latencyText(g.itl_ms)]]),
      kv([['Tokens per second', r && g.requests ? `${fmtNum(r.tokens_per_second, 1)} (the last ${Math.round(r.window_s)} s)` : '—'],
        ['Sequences running / waiting', h('span', {id: 'gen-sequences', text: `${count(g.sequences)} / ${count(g.waiting)}`})],
        ['KV cache blocks used / total', h('span', {id: 'gen-kv', text: blocksText(g.kv_blocks_used, g.kv_blocks_total)})],
        ['KV cache blocks cached', h('span', {id: 'gen-kv-cached', 'data-kv-cached': g.kv_blocks_cached ?? 0,
          text: count(g.kv_blocks_cached)})]]))], 2);
    const list = d.instances || [];
    syncChildren(engBody, list.length ? list.map(engineRow)
      : [h('tr', {}, h('td', {colspan: ENGINE_COLUMNS.length, class: 'muted', text: 'No replicas.'}))], 1);
    for (const c of [ttft, itl, tps]) c.draw(samples);
  }
  return {el, draw, redraw() { for (const c of [ttft, itl, tps]) c.draw(); }};
}

// ---- a deployment's page ----

export function deploymentPage(root, id) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const head = h('div', {id: 'dep-head'});
  const summary = h('section', {class: 'card', id: 'dep-summary'});
  const latency = chart('latency-chart', 'Latency (ms)', {yLabel: 'latency (ms)', unit: 'ms', yDigits: 2, series: [
    {label: 'p50', colour: '#1f5fbf', key: 'p50'}, {label: 'p99', colour: '#d9822b', key: 'p99', width: 4}]});
  const batch = chart('batch-chart', 'Mean batch size (requests per batch)', {yLabel: 'requests per batch', unit: 'requests',
    yDigits: 2, series: [{label: 'mean batch', colour: '#1e7f3c', key: 'batch'}]});
  const charts = h('section', {class: 'card', id: 'dep-charts', 'aria-label': 'Traffic over time'},
    h('h2', {text: 'Traffic over time'}),
    h('p', {class: 'muted', text: 'Sampled every second while this tab shows the deployment (the last 2 minutes); each value covers the requests of the last 10 to 20 seconds.'}),
    h('div', {class: 'grid'}, latency.el, batch.el));
  const instBody = h('tbody', {id: 'instances-body'});
  const instances = h('section', {class: 'card', id: 'dep-instances'}, h('h2', {text: 'Replicas'}),
    h('div', {class: 'table-wrap'}, h('table', {id: 'instances', class: 'cards'},
      h('thead', {}, h('tr', {}, INSTANCE_COLUMNS
        .map((t, i) => h('th', {scope: 'col', class: i === 6 ? 'hide-narrow' : null, text: t})))), instBody)));
  const spec = h('div', {class: 'grid', id: 'dep-spec'});
  const actions = h('section', {class: 'card', id: 'dep-actions'}, h('h2', {text: 'Actions'}));
  root.append(h('p', {}, h('a', {href: '#/deployments', text: '← Deployments'})), banner, head, summary, charts,
    instances, h('section', {class: 'card'}, h('h2', {text: 'Spec'}), spec), actions);

  let dep = null, names = new Map(), gone = false;
  // A language model's sections, added once the deployment is known to be
  // one (its model's task, or a `generate` object): never for other models.
  let tasks = new Map(), gen = null, tryIt = null;
  function addGeneration(d) {
    if (gen || !(d.generate || tasks.get(d.model) === 'language_modeling')) return;
    gen = generationSection();
    tryIt = generateTryIt(d.name, {idPrefix: 'gen', maxTokens: 16, note: `Generates on this deployment's replicas ` +
      `(POST /v2/models/${d.name}/generate_stream): the text appears as it is written; Stop ends the generation.`});
    charts.after(gen.el, h('section', {class: 'card', id: 'dep-try-it'}, h('h2', {text: 'Try it'}), tryIt.el));
  }

  // Scale: PATCH replicas {min, max}.
  const minIn = h('input', {id: 'scale-min', type: 'number', min: 0, max: 64});
  const maxIn = h('input', {id: 'scale-max', type: 'number', min: 1, max: 64});
  const scaleMsg = h('p', {class: 'banner', id: 'scale-error', role: 'alert'});
  const scaleBtn = h('button', {type: 'submit', text: 'Scale'});
  const scaleForm = h('form', {id: 'scale-form', novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    patch({replicas: {min: Number(minIn.value), max: Number(maxIn.value)}}, scaleBtn, scaleMsg,
      {'replicas.min': minIn, 'replicas.max': maxIn, replicas: maxIn});
  }}, h('h3', {text: 'Scale'}), scaleMsg,
  h('div', {class: 'row'}, field('Min replicas', minIn), field('Max replicas', maxIn)), scaleBtn);

  // Change model: PATCH model (a rolling update: new replicas start beside
  // the old, traffic moves when enough are ready).
  const modelSel = h('select', {id: 'change-model'});
  const modelMsg = h('p', {class: 'banner', id: 'model-error', role: 'alert'});
  const modelBtn = h('button', {type: 'submit', text: 'Roll out'});
  const modelForm = h('form', {id: 'model-form', novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    if (!modelSel.value) return;
    patch({model: modelSel.value}, modelBtn, modelMsg, {model: modelSel});
  }}, h('h3', {text: 'Change model (rolling update)'}), modelMsg, field('Model', modelSel), modelBtn);

  const delMsg = h('p', {class: 'banner', id: 'delete-error', role: 'alert'});
  const delBtn = h('button', {type: 'button', class: 'danger', id: 'delete-deployment', text: 'Delete deployment', onclick: async () => {
    if (!dep || !confirm(`Delete deployment ${dep.name}? Its replicas stop once their requests are answered.`)) return;
    delBtn.disabled = true;
    delMsg.textContent = '';
    // No poll may race the delete (its 404 would say "not there").
    await poller.stop();
    try {
      await api(`/v1/deployments/${encodeURIComponent(dep.id)}`, {method: 'DELETE'});
      location.hash = '#/deployments';
    } catch (e) {
      delMsg.textContent = `Delete failed: ${e.message}`;
      delBtn.disabled = false;
      poller = poll(load, {interval: POLL_MS});
    }
  }});
  actions.append(h('div', {class: 'grid'}, scaleForm, modelForm,
    h('div', {}, h('h3', {text: 'Delete'}), delMsg, h('p', {}, delBtn))));

  async function patch(body, button, msg, controls) {
    msg.textContent = '';
    for (const c of Object.values(controls)) setFieldError(c, '');
    button.disabled = true;
    try {
      dep = await api(`/v1/deployments/${encodeURIComponent(dep.id)}`, {method: 'PATCH', json: body});
      draw();
      poller.now();
    } catch (e) {
      const el = e.field && controls[e.field];
      if (el) setFieldError(el, e.message);
      else msg.textContent = (e.field ? `${e.field}: ` : '') + e.message;
    } finally { button.disabled = false; }
  }

  function instanceRow(i) {
    return labelCells(h('tr', {'data-key': i.id, 'data-instance-id': i.id, 'data-state': i.state},
      h('td', {text: i.id}),
      h('td', {}, badge(i.state)),
      h('td', {text: String(i.generation) + (dep && i.generation < dep.generation ? ' (old)' : '')}),
      h('td', {text: i.device || '—'}),
      h('td', {class: 'slice-cell', text: sliceText(i)}),
      h('td', {text: String(i.in_flight ?? 0)}),
      h('td', {class: 'hide-narrow', text: fmtTime(i.started_at)})), INSTANCE_COLUMNS);
  }

  function draw() {
    const d = dep, t = d.traffic || {};
    syncChildren(head, [h('h1', {}, d.name, ' ', badge(d.status))], 0);
    summary.dataset.status = d.status;
    summary.dataset.requests = String(t.requests ?? 0);
    summary.dataset.generation = String(d.generation);
    syncChildren(summary, [h('div', {class: 'grid'},
      kv([['Id', d.id], ['Model', modelLink(d.model, names)], ['Generation', String(d.generation)],
        ['Replicas ready/desired', h('span', {id: 'dep-replicas'}, replicasText(d.replicas), waitingNote(d.replicas))],
        ['GPU', gpuText(d.resources)], ['Priority', String(d.priority ?? 0)],
        ['Created', fmtTime(d.created_at)], ['Updated', fmtTime(d.updated_at)]]),
      kv([['Requests', h('span', {id: 'dep-requests', text: count(t.requests)})],
        ['Errors', count(t.errors)], ['Rejected (429)', count(t.rejected)], ['In flight', count(t.in_flight)],
        ['Latency p50 / p99', latencyText(t.latency_ms)], ['Queue p50 / p99', latencyText(t.queue_ms)],
        ['Compute p50 / p99', latencyText(t.compute_ms)],
        ['Batch size mean / max', t.batch_size ? `${fmtNum(t.batch_size.mean ?? null, 2)} / ${t.batch_size.max ?? '—'}` : '—'],
        ['Cold start', t.cold_start_s ? `${fmtNum(t.cold_start_s, 2)} s` : '—']]))], 2);
    const list = d.instances || [];
    syncChildren(instBody, list.length ? list.map(instanceRow) : [h('tr', {}, h('td', {colspan: 7, class: 'muted',
      text: d.status === 'scaled_to_zero' ? 'Scaled to zero: the next request starts a replica.' : 'No replicas.'}))], 1);
    const b = d.batching || {}, l = d.limits || {}, a = d.autoscaling || {};
    const none = (x, unit = '') => (x === null || x === undefined ? 'none' : `${x}${unit}`);
    syncChildren(spec, [
      h('div', {id: 'spec-batching'}, h('h3', {text: 'Batching'}), kv([
        ['Max batch size', String(b.max_batch_size ?? '—')], ['Max queue delay', `${b.max_queue_delay_us ?? '—'} µs`],
        ['Preferred sizes', b.preferred_batch_sizes && b.preferred_batch_sizes.length ? b.preferred_batch_sizes.join(', ') : 'any']])),
      h('div', {id: 'spec-limits'}, h('h3', {text: 'Limits'}), kv([
        ['Requests per second', none(l.requests_per_second)], ['Burst', none(l.burst)],
        ['Max concurrency', none(l.max_concurrency)],
        ['Tokens per minute', none(l.tokens_per_minute)]])),
      h('div', {id: 'spec-autoscaling'}, h('h3', {text: 'Autoscaling'}), kv([
        ['Replicas', `${d.replicas?.min ?? '—'} to ${d.replicas?.max ?? '—'}`],
        ['Target in flight per replica', fmtNum(a.target_in_flight ?? null, 2)],
        ['Target queue time', a.target_queue_ms ? `${fmtNum(a.target_queue_ms, 2)} ms` : 'none'],
        ['Scale up after', `${fmtNum(a.scale_up_after_s ?? null, 1)} s`],
        ['Scale down after', `${fmtNum(a.scale_down_after_s ?? null, 1)} s`]]))], 2);
    // Fill the action forms once, and again only when nobody is editing them.
    if (!scaleForm.contains(document.activeElement) && !scaleForm.dataset.edited) {
      minIn.value = d.replicas?.min ?? 0;
      maxIn.value = d.replicas?.max ?? 1;
    }
    if (!modelForm.contains(document.activeElement) && !modelSel.dataset.edited && names.has(d.model)) modelSel.value = d.model;
    const samples = history.get(d.id) || [];
    latency.draw(samples);
    batch.draw(samples);
    addGeneration(d);
    if (gen) gen.draw(d, samples);
  }
  for (const el of [minIn, maxIn]) el.addEventListener('input', () => { scaleForm.dataset.edited = '1'; });
  modelSel.addEventListener('change', () => { modelSel.dataset.edited = '1'; });

  async function load() {
    if (gone) return;
    try {
      dep = await api(`/v1/deployments/${encodeURIComponent(id)}`);
      sample(dep);
      draw();
      banner.textContent = '';
    } catch (e) {
      if (e.status === 404) {
        gone = true;
        poller?.stop();
        banner.replaceChildren(`Deployment ${id} is not there (deleted?). `, h('a', {href: '#/deployments', text: 'All deployments'}));
      } else if (e.status !== 401) banner.textContent = `Could not load deployment ${id}: ${e.message}`;
    }
  }

  modelNames().then((models) => {
    names = new Map(models.map((m) => [m.id, m.name]));
    tasks = new Map(models.map((m) => [m.id, m.task]));
    modelSel.replaceChildren(...models.map((m) => h('option', {value: m.id, text: pickLabel(m)})));
    if (dep) draw();
  }).catch(() => {});
  const onResize = () => { if (dep) { latency.draw(); batch.draw(); gen?.redraw(); } };
  window.addEventListener('resize', onResize);
  let poller = null;
  poller = poll(load, {interval: POLL_MS});
  return () => { poller.stop(); tryIt?.stop(); window.removeEventListener('resize', onResize); };
}
