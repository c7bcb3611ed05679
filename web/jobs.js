// jobs.js - the jobs table and a job's page, both updated live.
import {api} from './api.js';
import {live} from './live.js';
import {h, field, fmtDuration, fmtNum, fmtBytes, fmtTime, jobSeconds, statusBadge,
        placementText, queueText, kv, TERMINAL} from './util.js';

const STATUSES = ['queued', 'scheduled', 'running', 'succeeded', 'failed', 'cancelled'];

function progressCell(job) {
  const p = job.progress || {};
  const frac = typeof p.fraction === 'number' ? p.fraction : (job.status === 'succeeded' ? 1 : 0);
  const label = p.epochs ? `epoch ${p.epoch || 0}/${p.epochs}` : '';
  return h('span', {}, h('progress', {max: 1, value: frac, 'aria-label': `${job.name}: ${Math.round(frac * 100)} %`}),
           ' ', h('span', {class: 'muted', text: label}));
}

async function cancel(job, report) {
  if (!confirm(`Cancel job ${job.name}?`)) return;
  try { await api(`/v1/jobs/${job.id}/cancel`, {method: 'POST'}); }
  catch (e) { report(`Cancel failed: ${e.message}`); }
}

export function jobsPage(root) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const filter = h('select', {id: 'status-filter'},
    h('option', {value: '', text: 'all'}), STATUSES.map((s) => h('option', {value: s, text: s})));
  const tbody = h('tbody', {id: 'jobs-body'});
  const empty = h('p', {class: 'muted', id: 'jobs-empty', text: 'No jobs yet: submit one under New job.'});
  const table = h('div', {class: 'table-wrap'}, h('table', {id: 'jobs'},
    h('caption', {class: 'muted', text: 'Jobs, newest first'}),
    h('thead', {}, h('tr', {}, ['Name', 'Status', 'Progress', 'Placement', 'Queue', 'Duration', ''].map((t, i) =>
      h('th', {scope: 'col', class: i === 4 ? 'hide-narrow' : null, text: t})))), tbody));
  root.append(h('h1', {text: 'Jobs'}), banner,
    h('div', {class: 'row'}, field('Status', filter), h('a', {href: '#/new', text: 'New job'})), empty, table);

  const jobs = new Map();   // id -> job
  const report = (msg) => { banner.textContent = msg; };

  function row(job) {
    const live = !TERMINAL.has(job.status);
    return h('tr', {'data-job-id': job.id, 'data-status': job.status},
      h('td', {}, h('a', {href: `#/jobs/${job.id}`, text: job.name}), h('div', {class: 'muted', text: job.id})),
      h('td', {}, statusBadge(job.status)),
      h('td', {}, progressCell(job)),
      h('td', {class: 'placement', text: placementText(job)}),
      h('td', {class: 'hide-narrow queue', text: queueText(job)}),
      h('td', {class: 'duration', text: fmtDuration(jobSeconds(job))}),
      h('td', {}, live ? h('button', {type: 'button', class: 'danger', text: 'Cancel',
        'aria-label': `Cancel ${job.name}`, onclick: () => cancel(job, report)}) : null));
  }

  function draw() {
    const want = filter.value;
    const list = [...jobs.values()].filter((j) => !want || j.status === want)
      .sort((a, b) => (b.created_at || '').localeCompare(a.created_at || '') || b.id.localeCompare(a.id));
    const focused = document.activeElement && tbody.contains(document.activeElement)
      ? document.activeElement.closest('tr')?.dataset.jobId : null;
    tbody.replaceChildren(...list.map(row));
    empty.hidden = list.length > 0;
    if (focused) tbody.querySelector(`tr[data-job-id="${focused}"] button, tr[data-job-id="${focused}"] a`)?.focus();
  }

  async function load() {
    const want = filter.value;
    try {
      const doc = await api('/v1/jobs?limit=200' + (want ? `&status=${want}` : ''));
      jobs.clear();
      for (const j of doc.items) jobs.set(j.id, j);
      report('');
      draw();
    } catch (e) { if (e.status !== 401) report(`Could not load jobs: ${e.message}`); }
  }

  filter.addEventListener('change', load);
  load();
  const stream = live('/v1/events', {
    onEvent(type, data) {
      if (data && data.job && data.job.id) { jobs.set(data.job.id, data.job); draw(); }
    },
    onReset: load,
    onPoll: load,
    onOpen: load,
  });
  // Running jobs' durations tick between events.
  const ticker = setInterval(() => {
    for (const tr of tbody.querySelectorAll('tr[data-status="running"]')) {
      const j = jobs.get(tr.dataset.jobId);
      if (j) tr.querySelector('.duration').textContent = fmtDuration(jobSeconds(j));
    }
  }, 1000);
  return () => { stream.stop(); clearInterval(ticker); };
}

// ---- a job's page ----

function makeChart(canvas, title, series) {
  if (!window.Chart) return null;
  return new window.Chart(canvas, {
    type: 'line',
    data: {labels: [], datasets: series.map(([label, colour]) => ({label, data: [], borderColor: colour,
      backgroundColor: colour, tension: 0.2, spanGaps: true}))},
    options: {responsive: true, maintainAspectRatio: false, animation: false,
      plugins: {title: {display: true, text: title}},
      scales: {x: {title: {display: true, text: 'epoch'}}}},
  });
}

export function jobPage(root, id) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  root.append(h('p', {}, h('a', {href: '#/jobs', text: '← Jobs'})), banner);
  const head = h('div', {id: 'job-head'});
  const lossCanvas = h('canvas', {id: 'loss-chart', role: 'img', 'aria-label': 'Loss per epoch'});
  const accCanvas = h('canvas', {id: 'acc-chart', role: 'img', 'aria-label': 'Accuracy per epoch'});
  const noChart = window.Chart ? null : h('p', {class: 'muted',
    text: 'Charts need Chart.js, which this server does not have (Debian package libjs-chart.js); the table below has the numbers.'});
  const charts = h('section', {class: 'card', id: 'charts', 'data-epochs': '0', 'aria-label': 'Training curves'},
    h('h2', {text: 'Training curves'}), noChart,
    h('div', {class: 'grid'}, h('div', {class: 'chart-box'}, lossCanvas), h('div', {class: 'chart-box'}, accCanvas)));
  const epochBody = h('tbody');
  const epochTable = h('div', {class: 'table-wrap'}, h('table', {id: 'epochs'},
    h('caption', {class: 'muted', text: 'Per epoch'}),
    h('thead', {}, h('tr', {}, ['Epoch', 'Train loss', 'Train acc.', 'Val. loss', 'Val. acc.', 'Samples/s', 'Seconds']
      .map((t) => h('th', {scope: 'col', text: t})))), epochBody));
  const details = h('div', {class: 'grid'});
  root.append(head, charts, h('section', {class: 'card'}, h('h2', {text: 'Epochs'}), epochTable), details);

  const loss = makeChart(lossCanvas, 'Loss', [['train loss', '#1f5fbf'], ['validation loss', '#d9822b']]);
  const acc = makeChart(accCanvas, 'Accuracy', [['train accuracy', '#1e7f3c'], ['validation accuracy', '#9c27b0']]);
  const epochs = new Map();   // epoch number -> record
  let job = null;

  function drawEpochs() {
    const list = [...epochs.values()].sort((a, b) => a.epoch - b.epoch);
    charts.dataset.epochs = String(list.length);
    for (const [chart, keys] of [[loss, ['train_loss', 'val_loss']], [acc, ['train_accuracy', 'val_accuracy']]]) {
      if (!chart) continue;
      chart.data.labels = list.map((e) => e.epoch);
      keys.forEach((k, i) => { chart.data.datasets[i].data = list.map((e) => e[k] ?? null); });
      chart.update('none');
    }
    epochBody.replaceChildren(...list.map((e) => h('tr', {},
      [e.epoch, fmtNum(e.train_loss), fmtNum(e.train_accuracy), fmtNum(e.val_loss), fmtNum(e.val_accuracy),
       e.samples_per_sec ? Math.round(e.samples_per_sec).toLocaleString() : '—', fmtNum(e.seconds, 2)]
        .map((v) => h('td', {text: v})))));
  }

  function drawJob() {
    const m = job.metrics || {};
    head.replaceChildren(
      h('h1', {}, job.name, ' ', statusBadge(job.status)),
      h('div', {class: 'card', id: 'job-summary', 'data-status': job.status},
        progressCell(job),
        job.error ? h('p', {class: 'error', id: 'job-error', text: `Error: ${job.error}`}) : null,
        kv([
          ['Job', job.id],
          ['Dataset', h('a', {href: `#/datasets/${job.dataset}`, text: job.dataset})],
          ['Model', job.model ? h('a', {href: `#/models/${job.model}`, id: 'model-link', text: job.model}) : '—'],
          ['Placement', placementText(job)],
          job.status === 'queued' && job.queue ? ['Waiting', queueText(job)] : null,
          ['Throughput', m.samples_per_sec ? `${Math.round(m.samples_per_sec).toLocaleString()} samples/s` : '—'],
          ['Duration', h('span', {id: 'job-duration', text: fmtDuration(jobSeconds(job))})],
          ['Estimated memory', fmtBytes(job.estimated_memory_bytes)],
          ['Attempts', String(job.attempts ?? '—')],
          ['Created', fmtTime(job.created_at)],
        ]),
        !TERMINAL.has(job.status) ? h('p', {}, h('button', {type: 'button', class: 'danger', text: 'Cancel job',
          onclick: () => cancel(job, (msg) => { banner.textContent = msg; })})) : null));
    details.replaceChildren(
      h('section', {class: 'card'}, h('h2', {text: 'Hyperparameters'}),
        h('pre', {id: 'hyperparameters', text: JSON.stringify(job.hyperparameters, null, 2)})),
      h('section', {class: 'card'}, h('h2', {text: 'Model spec'}),
        h('pre', {id: 'spec', text: JSON.stringify(job.spec, null, 2)})),
      h('section', {class: 'card'}, h('h2', {text: 'Resources and placement'}),
        h('pre', {text: JSON.stringify({resources: job.resources, placement: job.placement, device: job.device}, null, 2)})));
  }

  async function load() {
    try {
      const [j, met] = await Promise.all([api(`/v1/jobs/${id}`), api(`/v1/jobs/${id}/metrics`)]);
      job = j;
      for (const e of met.epochs || []) epochs.set(e.epoch, e);
      drawJob();
      drawEpochs();
      banner.textContent = '';
    } catch (e) { if (e.status !== 401) banner.textContent = `Could not load job ${id}: ${e.message}`; throw e; }
  }

  let stream = null, stopped = false;
  load().then(() => {
    if (stopped) return;
    stream = live(`/v1/jobs/${id}/events`, {
      final: 'job.finished',
      onEvent(type, data) {
        if (data && data.job) { job = data.job; drawJob(); }
        if (type === 'job.epoch' && data.epoch) { epochs.set(data.epoch.epoch, data.epoch); drawEpochs(); }
      },
      onReset: load,
      onOpen: () => load().catch(() => {}),
      onPoll: async () => { if (job && !TERMINAL.has(job.status)) await load(); },
    });
  }).catch(() => {});
  const ticker = setInterval(() => {
    const d = document.getElementById('job-duration');
    if (job && job.status === 'running' && d) d.textContent = fmtDuration(jobSeconds(job));
  }, 1000);
  return () => { stopped = true; if (stream) stream.stop(); clearInterval(ticker); for (const c of [loss, acc]) c?.destroy(); };
}
