// jobinfo.js - what a job's row and a job's header say at a glance: where it
// is (epoch, within the epoch, ETA), how it does (best and latest metrics),
// why it waits, why it ended, and whether it learned anything. A language
// model's run (text or tokens data) is told in optimizer steps, perplexity
// and tokens/s.
import {h, fmtDuration, fmtNum} from './util.js';

// A language model's job: its normalized hyperparameters always name the
// context length (only language models take one); its records have
// tokens/s and perplexities.
export function isLMJob(job) {
  const hp = job.hyperparameters || {}, m = job.metrics || {};
  return typeof hp.context_length === 'number' || typeof m.tokens_per_second === 'number' ||
    typeof m.train_perplexity === 'number';
}
const isNum = (x) => typeof x === 'number' && isFinite(x);
// A perplexity: 13.81, 1,234.5 (a fresh model's is about the vocabulary).
export const fmtPpl = (x) => (isNum(x) ? (x >= 1000 ? fmtNum(x) : x.toFixed(2)) : '—');
// Tokens per second: a language model's epoch figure, else the progress's
// windows per second times the context length (before the first epoch).
export function tokensPerSecond(job) {
  const m = job.metrics || {}, hp = job.hyperparameters || {};
  if (isNum(m.tokens_per_second) && m.tokens_per_second > 0) return m.tokens_per_second;
  if (isNum(m.samples_per_sec) && m.samples_per_sec > 0 && isNum(hp.context_length)) return m.samples_per_sec * hp.context_length;
  return null;
}

// Where a run is: the epoch it trains (1-based), of how many, and how far
// into that epoch (0..1). progress.epoch is the epoch in training when the
// line was written; an epoch record written since (metrics.epoch) moves it
// on, so the two never disagree.
export function position(job) {
  const p = job.progress || {}, m = job.metrics || {};
  // A language model: by optimizer steps (max_steps may end it mid-epoch,
  // so its epochs say little about how far it is).
  if (isLMJob(job) && p.total_steps) {
    const step = job.status === 'succeeded' ? p.total_steps : Math.min(p.step || 0, p.total_steps);
    const fraction = step / p.total_steps;
    return {epoch: m.epoch || 0, epochs: 0, within: fraction, fraction, done: m.epoch || 0, step, steps: p.total_steps};
  }
  const epochs = p.epochs || (job.hyperparameters && job.hyperparameters.epochs) || 0;
  const done = m.epoch || 0;
  if (job.status === 'succeeded') return {epoch: epochs || done, epochs, within: 1, fraction: 1, done: epochs || done};
  let epoch = Math.max(p.epoch || 0, done + (job.status === 'running' ? 1 : 0));
  if (epochs) epoch = Math.min(epoch, epochs);
  let within = 0;
  if (p.total_steps && epochs && p.epoch === epoch) {
    const spe = p.total_steps / epochs;
    within = Math.max(0, Math.min(1, (p.step - (epoch - 1) * spe) / spe));
  } else if (done >= epoch) within = 1;
  const fraction = epochs ? Math.min(1, (epoch - 1 + within) / epochs) : (p.fraction || 0);
  return {epoch, epochs, within, fraction, done};
}

export function etaText(job) {
  const eta = job.progress && job.progress.eta_seconds;
  return job.status === 'running' && typeof eta === 'number' ? fmtDuration(eta) : '';
}

// A fraction of the run as a percentage that never claims more than is done
// and still moves early in a long run: whole percents from 10 %, one
// decimal from 1 %, below that the first nonzero digit ("0.03"), and
// "< 0.0001" for less. 100 only at the end.
export function runPercent(f) {
  if (!(f > 0)) return '0';
  if (f >= 1) return '100';
  const p = f * 100;
  const d = p >= 10 ? 0 : p >= 1 ? 1 : Math.min(4, Math.ceil(-Math.log10(p)));
  const k = 10 ** d;
  const v = Math.floor(p * k + 1e-9) / k;
  return v > 0 ? v.toFixed(d) : `< ${(1 / k).toFixed(d)}`;
}

// The progress cell: the run's bar (its position within the epoch moves it
// between epochs' marks), "epoch k/N · x % of the run", the time left while
// it runs; how far into the epoch in training is the bar's tooltip.
export function progressCell(job) {
  const pos = position(job);
  const eta = etaText(job);
  const running = job.status === 'running';
  const run = `${runPercent(pos.fraction)} % of the run`;
  const label = pos.steps ? (running ? `step ${pos.step.toLocaleString()}/${pos.steps.toLocaleString()} · ${run}`
    : job.status === 'succeeded' ? `${pos.steps.toLocaleString()} steps` : `${pos.step.toLocaleString()}/${pos.steps.toLocaleString()} steps done`)
    : !pos.epochs ? '' : running
    ? `epoch ${pos.epoch}/${pos.epochs} · ${run}`
    : job.status === 'succeeded' ? `${pos.epochs} epoch${pos.epochs === 1 ? '' : 's'}` : pos.done ? `${pos.done}/${pos.epochs} epochs done` : `0/${pos.epochs} epochs`;
  const inEpoch = running && pos.epochs ? `; epoch ${pos.epoch} is ${Math.floor(pos.within * 100)} % done` : '';
  return h('span', {class: 'progress-cell'},
    h('progress', {max: 1, value: pos.fraction, title: `${run}${inEpoch}`, 'aria-label': `${job.name}: ${run}${inEpoch}`}),
    ' ', h('span', {class: 'muted progress-text', text: label}),
    eta ? h('span', {class: 'muted eta', text: ` · ${eta} left`}) : null);
}

const METRIC_NAMES = {val_accuracy: 'val. accuracy', val_loss: 'val. loss',
  train_accuracy: 'train accuracy', train_loss: 'train loss', val_rmse: 'val. RMSE', train_rmse: 'train RMSE',
  val_mae: 'val. MAE', val_r2: 'val. R²', rmse: 'RMSE', mae: 'MAE', r2: 'R²'};
export const metricName = (k) => METRIC_NAMES[k] || k;

// "0.9123 val. accuracy (epoch 7)", or '' before the first epoch.
export function bestText(job) {
  const b = job.metrics && job.metrics.best;
  // A language model's best validation loss, as the perplexity it is.
  if (b && isNum(b.value) && isLMJob(job) && /loss/.test(b.metric)) {
    return `${fmtPpl(Math.exp(b.value))} ${b.metric === 'val_loss' ? 'val. ' : ''}perplexity (loss ${fmtNum(b.value)} nats, epoch ${b.epoch})`;
  }
  return b && typeof b.value === 'number' ? `${fmtNum(b.value)} ${metricName(b.metric)} (epoch ${b.epoch})` : '';
}

// The latest epoch's headline numbers: "val. acc. 0.91 · loss 0.31".
export function latestText(job) {
  const m = job.metrics || {};
  const parts = [];
  if (isLMJob(job)) {
    // The validation perplexity (the training one without validation) and
    // the training loss: short enough for the jobs list's cell.
    if (isNum(m.val_perplexity)) parts.push(`val. perplexity ${fmtPpl(m.val_perplexity)}`);
    else if (isNum(m.train_perplexity)) parts.push(`train perplexity ${fmtPpl(m.train_perplexity)}`);
    if (isNum(m.train_loss)) parts.push(`loss ${fmtNum(m.train_loss)} nats`);
    return parts.join(' · ');
  }
  if (typeof m.val_accuracy === 'number') parts.push(`val. acc. ${fmtNum(m.val_accuracy)}`);
  else if (typeof m.train_accuracy === 'number') parts.push(`acc. ${fmtNum(m.train_accuracy)}`);
  if (typeof m.rmse === 'number') parts.push(`RMSE ${fmtNum(m.rmse)}`);
  if (typeof m.r2 === 'number') parts.push(`R² ${fmtNum(m.r2)}`);
  if (typeof m.val_loss === 'number') parts.push(`val. loss ${fmtNum(m.val_loss)}`);
  if (typeof m.train_loss === 'number') parts.push(`loss ${fmtNum(m.train_loss)}`);
  return parts.join(' · ');
}

export function throughputText(job) {
  if (isLMJob(job)) {
    const t = tokensPerSecond(job);
    return t ? `${Math.round(t).toLocaleString()} tokens/s` : '';
  }
  const s = job.metrics && job.metrics.samples_per_sec;
  return typeof s === 'number' && s > 0 ? `${Math.round(s).toLocaleString()} samples/s` : '';
}

// Classes the model predicts: its last layer with units (a classifier's
// output), or 0 when the spec does not say.
function classesOf(job) {
  const layers = (job.spec && job.spec.layers) || [];
  for (let i = layers.length - 1; i >= 0; i--) if (layers[i].units) return layers[i].units;
  return 0;
}

// A warning when a classifier's best accuracy is at chance level (within a
// tenth of the way from 1/classes to 1): it "succeeded" without learning.
export function chanceWarning(job) {
  const b = job.metrics && job.metrics.best;
  const k = classesOf(job);
  if (!TERMINAL_OR_RUNNING.has(job.status) || !b || !/accuracy/.test(b.metric) || k < 2) return '';
  if (job.status === 'running' && (job.metrics.epoch || 0) < 3) return '';
  const chance = 1 / k;
  if (b.value > chance + 0.1 * (1 - chance)) return '';
  const lr = job.hyperparameters && job.hyperparameters.learning_rate;
  return `Best ${metricName(b.metric)} ${fmtNum(b.value, 3)} is chance level for ${k} classes (${fmtNum(chance, 3)}): ` +
    `the model has not learned${lr >= 1 ? ` (a learning rate of ${lr} is very high)` : ''}.`;
}
const TERMINAL_OR_RUNNING = new Set(['succeeded', 'failed', 'cancelled', 'running']);

// Why a queued job waits, in plain words, with the time it has waited.
export function waitText(job) {
  const q = job.queue;
  if (job.status === 'scheduled') return 'handed to the cluster; waiting for it to start';
  if (job.status !== 'queued') return '';
  const waited = job.created_at ? fmtDuration((Date.now() - Date.parse(job.created_at)) / 1000) : '';
  const why = q ? plainReason(q) : 'waiting for the scheduler';
  return `${why}${q && q.position ? ` · #${q.position} in line` : ''}${waited ? ` · waited ${waited}` : ''}`;
}

// The server's own words for the wait (queue.summary); its scheduler's
// account (detail) from servers that predate them.
const plainReason = (q) => q.summary || q.detail || q.reason || 'waiting for the scheduler';

// How a finished job ended, for its row and its header: {kind, text}.
// kind "error" (failed), "note" (cancelled: not an error), or null.
export function endText(job) {
  if (job.status === 'failed') return {kind: 'error', text: job.error || 'failed'};
  if (job.status === 'cancelled') {
    const e = job.error || '';
    return {kind: 'note', text: !e || /by request/.test(e) ? 'Cancelled by request.' : `Cancelled: ${e}`};
  }
  return {kind: null, text: ''};
}
