// jobs.js - the jobs table, updated live a row at a time: where each job
// is, how it does, why it waits or why it ended. It is also the runs table
// (runs.js): sort by a metric's column, show chosen hyperparameters as
// columns, tick runs to overlay their curves. On a phone each row is a
// card. A job's page is job.js.
import {api} from './api.js';
import {live} from './live.js';
import {h, field, fmtDuration, fmtNum, jobSeconds, statusBadge, placementText, TERMINAL} from './util.js';
import {metricColumns, metricValue, hparamKeys, hparamValue, hparamText, runComparator, overlaySection} from './runs.js';
import {progressCell, bestText, latestText, throughputText, waitText, endText, chanceWarning} from './jobinfo.js';

const STATUSES = ['queued', 'scheduled', 'running', 'succeeded', 'failed', 'cancelled'];

export async function cancel(job, report) {
  if (!confirm(`Cancel job ${job.name}?`)) return;
  try { await api(`/v1/jobs/${job.id}/cancel`, {method: 'POST'}); }
  catch (e) { report(`Cancel failed: ${e.message}`); }
}

const HP_STORE = 'ty-hp-columns';
const chosenHparams = () => { try { return new Set(JSON.parse(localStorage.getItem(HP_STORE) || '[]')); } catch { return new Set(); } };

export function jobsPage(root) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const filter = h('select', {id: 'status-filter'},
    h('option', {value: '', text: 'all'}), STATUSES.map((s) => h('option', {value: s, text: s})));
  const thead = h('thead');
  const tbody = h('tbody', {id: 'jobs-body'});
  const empty = h('p', {class: 'muted', id: 'jobs-empty', text: 'No jobs yet: submit one under New job.'});
  const caption = h('caption', {class: 'muted', text: 'Jobs, newest first'});
  const table = h('div', {class: 'table-wrap'}, h('table', {id: 'jobs', class: 'cards'}, caption, thead, tbody));
  // The column chooser: a checkbox for each hyperparameter key present.
  const hpList = h('div', {class: 'chooser-list', id: 'hp-columns'});
  const chooser = h('details', {class: 'chooser', id: 'column-chooser'},
    h('summary', {text: 'Hyperparameter columns'}), hpList);
  // Sorting by a select too: a phone's cards have no header to click.
  const sortSel = h('select', {id: 'sort-by', onchange: () => {
    const [kind, key, dir] = sortSel.value.split('|');
    sort = kind ? {kind, key, dir: Number(dir)} : null;
    draw();
  }});
  const overlay = overlaySection();
  const compareNote = h('span', {class: 'muted', id: 'compare-note', text: 'Tick runs to compare their curves.'});
  root.append(h('h1', {text: 'Jobs'}), banner,
    h('div', {class: 'row jobs-tools'}, field('Status', filter), field('Sort by', sortSel), chooser, compareNote, h('a', {href: '#/new', text: 'New job'})),
    overlay.el, empty, table);

  const jobs = new Map();      // id -> job
  const selected = [];         // ids ticked for the overlay, in the order ticked
  const hpChosen = chosenHparams();
  let sort = null;             // null: newest first; else {kind, key, dir}
  let columns = null;          // the columns drawn: {metrics, hparams}
  const report = (msg) => { banner.textContent = msg; };

  const newest = (a, b) => (b.created_at || '').localeCompare(a.created_at || '') || b.id.localeCompare(a.id);
  const order = (a, b) => (sort ? runComparator(sort, newest)(a, b) : newest(a, b));
  const listed = () => [...jobs.values()].filter((j) => !filter.value || j.status === filter.value);

  // The columns the listed jobs call for: metrics some job has, the
  // hyperparameters chosen (and present).
  function wantColumns(list) {
    const keys = hparamKeys(list);
    return {metrics: metricColumns(list), hparams: keys.filter((k) => hpChosen.has(k)), keys};
  }
  const sameColumns = (a, b) => a && b && a.metrics.map((c) => c.key).join() === b.metrics.map((c) => c.key).join() &&
    a.hparams.join() === b.hparams.join() && a.keys.join() === b.keys.join();
  const labels = () => ['Compare', 'Name', 'Status', 'Progress', 'Best', 'Latest',
    ...columns.metrics.map((c) => c.label), ...columns.hparams, 'Where', 'Duration', ''];

  // A header that sorts: a click on it sorts by it (best first), a
  // second click the other way; the third goes back to newest first.
  function sortHeader(kind, key, label, better) {
    const on = sort && sort.kind === kind && sort.key === key;
    const arrow = on ? (sort.dir > 0 ? ' ▲' : ' ▼') : '';
    return h('th', {scope: 'col', class: 'sortable', 'data-sort': `${kind}:${key}`,
      'aria-sort': on ? (sort.dir > 0 ? 'ascending' : 'descending') : 'none'},
    h('button', {type: 'button', class: 'sort', text: label + arrow, title: `Sort by ${label}`, onclick: () => {
      const first = better === 'high' ? -1 : 1;
      if (!on) sort = {kind, key, dir: first};
      else if (sort.dir === first) sort = {kind, key, dir: -first};
      else sort = null;
      draw();
    }}));
  }

  function drawHead() {
    const th = (t, cls) => h('th', {scope: 'col', class: cls, text: t});
    thead.replaceChildren(h('tr', {},
      th('', 'select'), th('Name'), th('Status'), th('Progress'), th('Best'), th('Latest'),
      columns.metrics.map((c) => sortHeader('metric', c.key, c.label, c.better)),
      columns.hparams.map((k) => sortHeader('hparam', k, k, 'low')),
      th('Where'), th('Duration'), th('')));
    const what = sort ? (columns.metrics.find((c) => c.key === sort.key) || {label: sort.key}).label : null;
    caption.textContent = sort ? `Jobs by ${what}, ${sort.dir > 0 ? 'lowest' : 'highest'} first` : 'Jobs, newest first';
    const opts = [h('option', {value: '', text: 'newest first'})];
    for (const c of columns.metrics) {
      const first = c.better === 'high' ? -1 : 1;
      for (const dir of [first, -first]) {
        opts.push(h('option', {value: `metric|${c.key}|${dir}`, text: `${c.label}, ${dir > 0 ? 'lowest' : 'highest'} first`}));
      }
    }
    for (const k of columns.hparams) for (const dir of [1, -1]) opts.push(h('option', {value: `hparam|${k}|${dir}`, text: `${k}, ${dir > 0 ? 'lowest' : 'highest'} first`}));
    sortSel.replaceChildren(...opts);
    sortSel.value = sort ? `${sort.kind}|${sort.key}|${sort.dir}` : '';
    hpList.replaceChildren(...(columns.keys.length ? columns.keys.map((k) => h('label', {class: 'check'},
      h('input', {type: 'checkbox', value: k, checked: hpChosen.has(k), onchange: (e) => {
        if (e.target.checked) hpChosen.add(k); else hpChosen.delete(k);
        try { localStorage.setItem(HP_STORE, JSON.stringify([...hpChosen])); } catch { /* private mode */ }
        draw();
      }}), ' ', k)) : [h('p', {class: 'muted', text: 'No hyperparameters in the listed jobs.'})]));
  }

  function row(job) {
    const live = !TERMINAL.has(job.status);
    const end = endText(job), chance = chanceWarning(job), wait = waitText(job);
    const names = labels();
    let i = 0;
    const cell = (attrs, ...kids) => h('td', {'data-label': names[i++], ...attrs}, ...kids);
    const tick = h('input', {type: 'checkbox', class: 'select-run', 'data-job': job.id,
      checked: selected.includes(job.id), 'aria-label': `Compare ${job.name}`, onchange: (e) => {
        const at = selected.indexOf(job.id);
        if (e.target.checked && at < 0) selected.push(job.id);
        if (!e.target.checked && at >= 0) selected.splice(at, 1);
        showOverlay();
      }});
    return h('tr', {'data-job-id': job.id, 'data-status': job.status},
      cell({class: 'select'}, h('label', {class: 'check'}, tick, h('span', {class: 'select-text', text: ' compare'}))),
      cell({class: 'name'}, h('a', {href: `#/jobs/${job.id}`, text: job.name}), h('div', {class: 'muted id', text: job.id}),
        end.text ? h('div', {class: end.kind === 'error' ? 'row-error' : 'muted row-note', text: end.text}) : null,
        chance ? h('div', {class: 'row-warn', text: '⚠ at chance level'}) : null),
      cell({}, statusBadge(job.status)),
      cell({class: 'progress'}, progressCell(job)),
      cell({class: 'best', text: bestText(job) || '—'}),
      cell({class: 'latest'}, h('span', {text: latestText(job) || '—'}),
        throughputText(job) ? h('div', {class: 'muted throughput', text: `throughput ${throughputText(job)}`}) : null),
      columns.metrics.map((c) => cell({class: 'metric num', 'data-metric': c.key, text: fmtNum(metricValue(job, c.key))})),
      columns.hparams.map((k) => cell({class: 'hparam', 'data-hparam': k, text: hparamText(hparamValue(job, k))})),
      cell({class: wait ? 'queue' : 'placement', text: wait || placementText(job)}),
      cell({class: 'duration', text: fmtDuration(jobSeconds(job))}),
      cell({class: 'actions'}, live ? h('button', {type: 'button', class: 'danger', text: 'Cancel',
        'aria-label': `Cancel ${job.name}`, onclick: () => cancel(job, report)}) : null));
  }

  function showOverlay() {
    for (let k = selected.length - 1; k >= 0; k--) if (!jobs.has(selected[k])) selected.splice(k, 1);
    compareNote.textContent = selected.length ? `${selected.length} selected: their curves are above.` : 'Tick runs to compare their curves.';
    overlay.set(selected.map((id) => ({id, name: jobs.get(id).name})));
  }

  // The whole table (a load, a filter change, a sort, a column chosen).
  function draw() {
    const list = listed();
    columns = wantColumns(list);
    if (sort && !(sort.kind === 'metric' ? columns.metrics.some((c) => c.key === sort.key) : columns.hparams.includes(sort.key))) sort = null;
    drawHead();
    tbody.replaceChildren(...list.sort(order).map(row));
    empty.hidden = list.length > 0;
  }

  // One job changed: its row alone is replaced (or added in its place, or
  // dropped when the filter no longer shows it); focus stays where it was.
  // A change that brings a new column (a first metric) redraws the table.
  function update(job) {
    if (!sameColumns(columns, wantColumns(listed()))) { draw(); return; }
    const old = tbody.querySelector(`tr[data-job-id="${CSS.escape(job.id)}"]`);
    const want = filter.value;
    if (want && job.status !== want) { old?.remove(); empty.hidden = tbody.children.length > 0; return; }
    const focused = old && old.contains(document.activeElement)
      ? (document.activeElement.tagName === 'BUTTON' ? 'button' : document.activeElement.tagName === 'INPUT' ? 'input' : 'a') : null;
    const fresh = row(job);
    if (old && !sort) old.replaceWith(fresh);
    else {
      old?.remove();
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
      showOverlay();
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
  return () => { stream.stop(); clearInterval(ticker); overlay.destroy(); };
}

