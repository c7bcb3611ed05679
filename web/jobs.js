// jobs.js - the jobs table, updated live a row at a time: where each job
// is, how it does, why it waits or why it ended. On a phone each row is a
// card. A job's page is job.js.
import {api} from './api.js';
import {live} from './live.js';
import {h, field, fmtDuration, jobSeconds, statusBadge, placementText, TERMINAL} from './util.js';
import {progressCell, bestText, latestText, throughputText, waitText, endText, chanceWarning} from './jobinfo.js';

const STATUSES = ['queued', 'scheduled', 'running', 'succeeded', 'failed', 'cancelled'];

export async function cancel(job, report) {
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
  const COLUMNS = ['Name', 'Status', 'Progress', 'Best', 'Latest', 'Where', 'Duration', ''];
  const table = h('div', {class: 'table-wrap'}, h('table', {id: 'jobs', class: 'cards'},
    h('caption', {class: 'muted', text: 'Jobs, newest first'}),
    h('thead', {}, h('tr', {}, COLUMNS.map((t) => h('th', {scope: 'col', text: t})))), tbody));
  root.append(h('h1', {text: 'Jobs'}), banner,
    h('div', {class: 'row'}, field('Status', filter), h('a', {href: '#/new', text: 'New job'})), empty, table);

  const jobs = new Map();   // id -> job
  const report = (msg) => { banner.textContent = msg; };

  // A cell with its column's name, which the phone layout shows as a label.
  const cell = (i, attrs, ...kids) => h('td', {'data-label': COLUMNS[i], ...attrs}, ...kids);

  function row(job) {
    const live = !TERMINAL.has(job.status);
    const end = endText(job), chance = chanceWarning(job), wait = waitText(job);
    return h('tr', {'data-job-id': job.id, 'data-status': job.status},
      cell(0, {class: 'name'}, h('a', {href: `#/jobs/${job.id}`, text: job.name}), h('div', {class: 'muted id', text: job.id}),
        end.text ? h('div', {class: end.kind === 'error' ? 'row-error' : 'muted row-note', text: end.text}) : null,
        chance ? h('div', {class: 'row-warn', text: '⚠ at chance level'}) : null),
      cell(1, {}, statusBadge(job.status)),
      cell(2, {class: 'progress'}, progressCell(job)),
      cell(3, {class: 'best', text: bestText(job) || '—'}),
      cell(4, {class: 'latest'}, h('span', {text: latestText(job) || '—'}),
        throughputText(job) ? h('div', {class: 'muted throughput', text: `throughput ${throughputText(job)}`}) : null),
      cell(5, {class: wait ? 'queue' : 'placement', text: wait || placementText(job)}),
      cell(6, {class: 'duration', text: fmtDuration(jobSeconds(job))}),
      cell(7, {class: 'actions'}, live ? h('button', {type: 'button', class: 'danger', text: 'Cancel',
        'aria-label': `Cancel ${job.name}`, onclick: () => cancel(job, report)}) : null));
  }

  const order = (a, b) => (b.created_at || '').localeCompare(a.created_at || '') || b.id.localeCompare(a.id);

  // The whole table (a load, a filter change).
  function draw() {
    const want = filter.value;
    const list = [...jobs.values()].filter((j) => !want || j.status === want).sort(order);
    tbody.replaceChildren(...list.map(row));
    empty.hidden = list.length > 0;
  }

  // One job changed: its row alone is replaced (or added in its place, or
  // dropped when the filter no longer shows it); focus stays where it was.
  function update(job) {
    const old = tbody.querySelector(`tr[data-job-id="${CSS.escape(job.id)}"]`);
    const want = filter.value;
    if (want && job.status !== want) { old?.remove(); empty.hidden = tbody.children.length > 0; return; }
    const focused = old && old.contains(document.activeElement)
      ? (document.activeElement.tagName === 'BUTTON' ? 'button' : 'a') : null;
    const fresh = row(job);
    if (old) old.replaceWith(fresh);
    else {
      const next = [...tbody.children].find((tr) => order(job, jobs.get(tr.dataset.jobId) || {created_at: '', id: ''}) < 0);
      tbody.insertBefore(fresh, next || null);
    }
    empty.hidden = true;
    if (focused) fresh.querySelector(focused)?.focus();
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
      if (!data || !data.job || !data.job.id) return;
      jobs.set(data.job.id, data.job);
      update(data.job);
      // An event's wait report is as of the event: ask for today's.
      if (data.job.status === 'queued') {
        api(`/v1/jobs/${data.job.id}`).then((j) => {
          if (jobs.get(j.id)?.status === 'queued') { jobs.set(j.id, j); update(j); }
        }).catch(() => {});
      }
    },
    onReset: load,
    onPoll: load,
    onOpen: load,
  });
  // Running jobs' durations and queued jobs' waits tick between events.
  const ticker = setInterval(() => {
    for (const tr of tbody.querySelectorAll('tr[data-status="running"], tr[data-status="queued"]')) {
      const j = jobs.get(tr.dataset.jobId);
      if (!j) continue;
      if (j.status === 'running') tr.querySelector('.duration').textContent = fmtDuration(jobSeconds(j));
      else tr.querySelector('.queue').textContent = waitText(j);
    }
  }, 1000);
  return () => { stream.stop(); clearInterval(ticker); };
}

