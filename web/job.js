// job.js - a job's page: where it is and how it does at a glance, its
// curves (curves.js), its epochs a page at a time (newest first), and what
// to do next: cancel, clone and edit, evaluate, download the metrics.
//
// Nothing here grows with the run's length: the curves are downsampled on
// the server, the table fetches one page, and a finished job opens no event
// stream (a running one gets only what happens from now on, appended).
import {api} from './api.js';
import {live} from './live.js';
import {h, field, fmtDuration, fmtNum, fmtBytes, fmtTime, jobSeconds, statusBadge,
        placementText, kv, pickLabel, resourceLink, TERMINAL} from './util.js';
import {progressCell, bestText, latestText, throughputText, etaText, waitText, endText,
        chanceWarning, position, isLMJob, fmtPpl} from './jobinfo.js';
import {curvesSection} from './curves.js';
import {cancel} from './jobs.js';

export const EPOCH_PAGE = 25;

// "val. 13.81 · train 12.82": a language model's latest perplexities.
function perplexityText(job) {
  const m = job.metrics || {};
  const parts = [];
  if (typeof m.val_perplexity === 'number') parts.push(`val. ${fmtPpl(m.val_perplexity)}`);
  if (typeof m.train_perplexity === 'number') parts.push(`train ${fmtPpl(m.train_perplexity)}`);
  return parts.join(' · ');
}

const fmtRate = (e) => (e.samples_per_sec ? Math.round(e.samples_per_sec).toLocaleString() : '—');
// [header, cell, hidden on a phone]. A regression run's records carry
// train_rmse, val_rmse, val_mae and val_r2 instead of accuracies.
const CLASSIFICATION = [['Epoch', (e) => e.epoch], ['Train loss', (e) => fmtNum(e.train_loss)],
  ['Train acc.', (e) => fmtNum(e.train_accuracy), true], ['Val. loss', (e) => fmtNum(e.val_loss)],
  ['Val. acc.', (e) => fmtNum(e.val_accuracy)], ['Samples/s', fmtRate, true], ['Seconds', (e) => fmtNum(e.seconds, 2), true]];
const REGRESSION = [['Epoch', (e) => e.epoch], ['Train loss', (e) => fmtNum(e.train_loss), true],
  ['Train RMSE', (e) => fmtNum(e.train_rmse), true], ['Val. loss', (e) => fmtNum(e.val_loss), true],
  ['Val. RMSE', (e) => fmtNum(e.val_rmse)], ['Val. MAE', (e) => fmtNum(e.val_mae)], ['Val. R²', (e) => fmtNum(e.val_r2)],
  ['Samples/s', fmtRate, true], ['Seconds', (e) => fmtNum(e.seconds, 2), true]];
// A language model's records: losses in nats, perplexities (exp of the
// losses) and tokens/s.
const fmtTokens = (e) => (e.tokens_per_second ? Math.round(e.tokens_per_second).toLocaleString() : '—');
const LANGUAGE = [['Epoch', (e) => e.epoch], ['Train loss (nats)', (e) => fmtNum(e.train_loss), true],
  ['Train perplexity', (e) => fmtPpl(e.train_perplexity)], ['Val. loss (nats)', (e) => fmtNum(e.val_loss), true],
  ['Val. perplexity', (e) => fmtPpl(e.val_perplexity)], ['Tokens/s', fmtTokens], ['Seconds', (e) => fmtNum(e.seconds, 2), true]];
const isLanguage = (records) => records.some((e) => ['tokens_per_second', 'train_perplexity', 'val_perplexity'].some((k) => typeof e[k] === 'number'));
const isRegression = (records) => records.some((e) => ['train_rmse', 'val_rmse', 'val_mae', 'val_r2'].some((k) => typeof e[k] === 'number')) &&
  !records.some((e) => typeof e.train_accuracy === 'number' || typeof e.val_accuracy === 'number');

// The epochs table: EPOCH_PAGE rows, newest first, with older/newer pages.
function epochTable(jobId) {
  const body = h('tbody');
  const info = h('span', {class: 'muted', id: 'epochs-info'});
  const newer = h('button', {type: 'button', class: 'secondary', id: 'epochs-newer', text: '← Newer'});
  const older = h('button', {type: 'button', class: 'secondary', id: 'epochs-older', text: 'Older →'});
  const head = h('thead');
  const el = h('section', {class: 'card'}, h('h2', {text: 'Epochs'}),
    h('div', {class: 'table-wrap'}, h('table', {id: 'epochs'},
      h('caption', {class: 'muted', text: 'Per epoch, newest first'}), head, body)),
    h('div', {class: 'pager'}, newer, info, older));
  let offset = 0, total = 0, columns = null, lm = false;
  // On a phone the table keeps the epoch, the losses and the validation
  // metric (it fits the width; the rest is in the CSV).
  function setColumns(records) {
    const want = lm || columns === LANGUAGE || isLanguage(records) ? LANGUAGE
      : columns === REGRESSION || isRegression(records) ? REGRESSION : CLASSIFICATION;
    if (want === columns) return;
    columns = want;
    head.replaceChildren(h('tr', {}, columns.map(([t, , narrow]) => h('th', {scope: 'col', class: narrow ? 'hide-narrow' : null, text: t}))));
  }
  setColumns([]);
  // A language model's job has its columns before its first epoch.
  const setLM = (yes) => { lm = yes; setColumns([]); };

  const row = (e) => h('tr', {'data-epoch': e.epoch},
    columns.map(([, cell, narrow]) => h('td', {class: narrow ? 'hide-narrow' : null, text: String(cell(e))})));

  function drawInfo() {
    info.textContent = total ? `${(offset + 1).toLocaleString()}–${Math.min(total, offset + body.children.length).toLocaleString()} of ${total.toLocaleString()} (newest first)` : 'No epochs yet';
    newer.disabled = offset === 0;
    older.disabled = offset + EPOCH_PAGE >= total;
  }

  async function load() {
    const doc = await api(`/v1/jobs/${jobId}/metrics?order=desc&limit=${EPOCH_PAGE}&offset=${offset}`);
    total = doc.total;
    setColumns(doc.epochs);
    body.replaceChildren(...doc.epochs.map(row));
    drawInfo();
  }
  newer.addEventListener('click', () => { offset = Math.max(0, offset - EPOCH_PAGE); load().catch(() => {}); });
  older.addEventListener('click', () => { offset += EPOCH_PAGE; load().catch(() => {}); });

  // A live epoch: on the first page it goes on top (the last row drops off).
  function add(e) {
    if ((columns !== REGRESSION && isRegression([e])) || (columns !== LANGUAGE && isLanguage([e]))) {
      setColumns([e]); body.replaceChildren(); offset = 0; load().catch(() => {}); return;
    }
    const old = body.querySelector(`tr[data-epoch="${e.epoch}"]`);
    if (old) { old.replaceWith(row(e)); return; }
    if (e.epoch <= total) return;   // replayed, on another page
    total = e.epoch;
    if (offset === 0) {
      body.prepend(row(e));
      while (body.children.length > EPOCH_PAGE) body.lastElementChild.remove();
    }
    drawInfo();
  }
  return {el, load, add, setLM};
}

// Saves a response as a file (the key goes in a header, so no plain link).
async function download(path, name, type) {
  const resp = await api(path, {raw: true});
  const blob = new Blob([await resp.arrayBuffer()], {type});
  const a = h('a', {href: URL.createObjectURL(blob), download: name, hidden: true});
  document.body.append(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

// Evaluate the job's model on a chosen dataset. A language model is scored
// on a text or tokens dataset's windows (loss in nats and perplexity), so
// its picker lists those only, and a classifier's or regression's lists
// the others.
function evaluateSection(job) {
  const lm = isLMJob(job);
  const ds = h('select', {id: 'eval-dataset'});
  const out = h('div', {id: 'eval-result', 'aria-live': 'polite'});
  const go = h('button', {type: 'submit', text: 'Evaluate'});
  const form = h('form', {class: 'card', id: 'evaluate', onsubmit: async (e) => {
    e.preventDefault();
    go.disabled = true;
    out.replaceChildren(h('p', {class: 'muted', text: 'Evaluating…'}));
    try {
      const r = await api(`/v1/models/${job.model}/evaluate`, {method: 'POST', json: {dataset: ds.value}});
      out.replaceChildren(kv(typeof r.perplexity === 'number'
        ? [['Windows', r.num_examples.toLocaleString()], ['Tokens', (r.num_tokens ?? 0).toLocaleString()],
          ['Loss (nats)', fmtNum(r.loss)], ['Perplexity', fmtPpl(r.perplexity)], ['Ran on', r.device || '—']]
        : [['Examples', r.num_examples.toLocaleString()], ['Loss', fmtNum(r.loss)],
          ['Accuracy', r.accuracy === null ? '— (regression)' : fmtNum(r.accuracy)], ['Ran on', r.device || '—']]));
      out.dataset.accuracy = r.accuracy === null || r.accuracy === undefined ? '' : String(r.accuracy);
      if (typeof r.perplexity === 'number') out.dataset.perplexity = String(r.perplexity);
    } catch (x) { out.replaceChildren(h('p', {class: 'error', text: `Could not evaluate: ${x.message}`})); }
    finally { go.disabled = false; }
  }}, h('h2', {text: 'Evaluate the model'}),
  h('div', {class: 'row'}, field('Dataset', ds), h('div', {class: 'field'}, h('span', {class: 'lbl', text: ' '}), go)), out);
  api('/v1/datasets?limit=200').then((doc) => {
    const items = doc.items.filter((d) => (d.task === 'language_modeling') === lm);
    const size = (d) => (d.task === 'language_modeling' ? `${Number(d.num_tokens || 0).toLocaleString()} tokens`
      : `${(d.num_examples || 0).toLocaleString()} examples`);
    ds.replaceChildren(...items.map((d) => h('option', {value: d.id,
      text: pickLabel(d, `(${size(d)})${d.id === job.dataset ? ' · trained on' : ''}`)})));
    // A dataset other than the training one is the likelier choice: of
    // its format (and a language model's, of its vocabulary and
    // tokenizer); else the training one.
    const train = items.find((x) => x.id === job.dataset) || {};
    const alike = (d) => d.format === train.format &&
      (!lm || (d.vocab_size === train.vocab_size && JSON.stringify(d.tokenizer) === JSON.stringify(train.tokenizer)));
    const other = items.find((d) => d.id !== job.dataset && alike(d));
    if (other) ds.value = other.id;
    else if (train.id) ds.value = train.id;
  }).catch(() => {});
  return form;
}

export function jobPage(root, id) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  root.append(h('p', {}, h('a', {href: '#/jobs', text: '← Jobs'})), banner);
  const head = h('div', {id: 'job-head'});
  const curves = curvesSection(id);
  const table = epochTable(id);
  const after = h('div', {id: 'after-training'});
  const details = h('div', {class: 'grid'});
  root.append(head, curves.el, table.el, after, details);
  let job = null, evalShown = false, stepVal = null;

  function stat(label, value, idAttr) {
    return h('div', {class: 'stat', id: idAttr}, h('div', {class: 'stat-label', text: label}), h('div', {class: 'stat-value', text: value || '—'}));
  }

  // A language model's validation loss measured every eval_every_steps:
  // the job's metrics val_loss with val_step. An epoch's record later
  // writes its own val_loss over it (val_step stays), so a val_loss that
  // is the epoch's (its exp is the epoch's val_perplexity) is not taken
  // for the step's. {step, loss} or null.
  function takeStepVal() {
    const m = job.metrics || {};
    if (typeof m.val_step !== 'number' || typeof m.val_loss !== 'number') return;
    if (stepVal && stepVal.step === m.val_step) return;
    const ppl = m.val_perplexity;
    if (typeof ppl === 'number' && Math.abs(Math.exp(m.val_loss) - ppl) <= 1e-6 * ppl) return;
    stepVal = {step: m.val_step, loss: m.val_loss};
    curves.addStepVal(stepVal, job);
  }

  function drawJob() {
    const lm = isLMJob(job);
    if (lm) takeStepVal();
    table.setLM(lm);
    curves.setJob(job);
    const end = endText(job), chance = chanceWarning(job), wait = waitText(job);
    const pos = position(job);
    const report = (msg) => { banner.textContent = msg; };
    head.replaceChildren(
      h('h1', {}, job.name, ' ', statusBadge(job.status)),
      h('div', {class: 'card', id: 'job-summary', 'data-status': job.status},
        progressCell(job),
        end.kind === 'error' ? h('p', {class: 'error', id: 'job-error', text: `Failed${pos.steps ? ` at step ${pos.step} of ${pos.steps}`
          : pos.epochs ? ` in epoch ${pos.epoch} of ${pos.epochs}` : ''}: ${end.text}`}) : null,
        end.kind === 'note' ? h('p', {class: 'note', id: 'job-note', text: end.text}) : null,
        chance ? h('p', {class: 'warn', id: 'job-warning', text: chance}) : null,
        wait ? h('p', {class: 'note', id: 'job-wait', text: `Waiting: ${wait}`}) : null,
        h('div', {class: 'stats'},
          stat('Best', bestText(job), 'stat-best'),
          stat('Latest', latestText(job), 'stat-latest'),
          lm ? stat('Perplexity', perplexityText(job), 'stat-perplexity') : null,
          lm && stepVal ? stat(`Validation at step ${stepVal.step.toLocaleString()}`,
            `loss ${fmtNum(stepVal.loss)} nats · perplexity ${fmtPpl(Math.exp(stepVal.loss))}`, 'stat-step-val') : null,
          stat('Throughput', throughputText(job), 'stat-throughput'),
          stat(job.status === 'running' ? 'Time left' : 'Duration',
            job.status === 'running' ? etaText(job) || 'estimating…' : fmtDuration(jobSeconds(job)), 'stat-time')),
        h('div', {class: 'actions row'},
          !TERMINAL.has(job.status) ? h('button', {type: 'button', class: 'danger', text: 'Cancel job',
            onclick: () => cancel(job, report)}) : null,
          h('a', {class: 'button secondary', id: 'clone', href: `#/new?from=${encodeURIComponent(job.id)}`, text: 'Clone and edit'}),
          // A language model's next-token probabilities are on its page.
          job.model && lm ? h('a', {class: 'button secondary', id: 'try-model', href: `#/models/${encodeURIComponent(job.model)}`, text: 'Try it'}) : null,
          job.model ? h('button', {type: 'button', class: 'secondary', id: 'show-evaluate', text: 'Evaluate…',
            onclick: () => { if (!evalShown) { evalShown = true; after.prepend(evaluateSection(job)); } document.getElementById('eval-dataset')?.focus(); }}) : null,
          h('button', {type: 'button', class: 'secondary', id: 'download-csv', text: 'Metrics CSV',
            onclick: () => download(`/v1/jobs/${id}/metrics?format=csv`, `${job.name}-metrics.csv`, 'text/csv').catch((x) => report(`Download failed: ${x.message}`))}),
          h('button', {type: 'button', class: 'secondary', id: 'download-json', text: 'Metrics JSON',
            onclick: () => download(`/v1/jobs/${id}/metrics`, `${job.name}-metrics.json`, 'application/json').catch((x) => report(`Download failed: ${x.message}`))})),
        kv([
          ['Job', job.id],
          ['Dataset', resourceLink(api, 'datasets', job.dataset, {id: 'dataset-link'})],
          ['Model', job.model ? resourceLink(api, 'models', job.model, {id: 'model-link'}) : '—'],
          ['Placement', placementText(job)],
          ['Estimated memory', fmtBytes(job.estimated_memory_bytes)],
          ['Attempts', String(job.attempts ?? '—')],
          ['Created', fmtTime(job.created_at)],
          ['Started', fmtTime(job.started_at)],
        ])));
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
      job = await api(`/v1/jobs/${id}`);
      drawJob();
      await Promise.all([curves.load(), table.load()]);
      curves.draw();
      banner.textContent = '';
    } catch (e) { if (e.status !== 401) banner.textContent = `Could not load job ${id}: ${e.message}`; throw e; }
  }

  let stream = null, stopped = false;
  load().then(() => {
    // A finished job has nothing more to say: no stream to replay it.
    if (stopped || TERMINAL.has(job.status)) return;
    stream = live(`/v1/jobs/${id}/events`, {
      final: 'job.finished',
      onEvent(type, data) {
        if (data && data.job) {
          // A queued job's wait report is the server's now, not the event's.
          if (data.job.status === 'queued') api(`/v1/jobs/${id}`).then((j) => { job = j; drawJob(); }).catch(() => {});
          else { job = data.job; drawJob(); curves.addStep(job); }
        }
        if (type === 'job.epoch' && data.epoch) { curves.addEpoch(data.epoch); table.add(data.epoch); }
        if (type === 'job.finished') { curves.load().catch(() => {}); table.load().catch(() => {}); }
      },
      onReset: () => load().catch(() => {}),
      onPoll: async () => { if (job && !TERMINAL.has(job.status)) await load(); },
    });
  }).catch(() => {});
  const ticker = setInterval(() => {
    const t = document.querySelector('#stat-time .stat-value');
    if (job && job.status === 'running' && t && !etaText(job)) t.textContent = 'estimating…';
  }, 1000);
  return () => { stopped = true; if (stream) stream.stop(); clearInterval(ticker); curves.destroy(); };
}
