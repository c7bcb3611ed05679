// jobinfo.js - what a job's row and a job's header say at a glance: where it
// is (epoch, within the epoch, ETA), how it does (best and latest metrics),
// why it waits, why it ended, and whether it learned anything.
import {h, fmtDuration, fmtNum} from './util.js';

// Where a run is: the epoch it trains (1-based), of how many, and how far
// into that epoch (0..1). progress.epoch is the epoch in training when the
// line was written; an epoch record written since (metrics.epoch) moves it
// on, so the two never disagree.
export function position(job) {
  const p = job.progress || {}, m = job.metrics || {};
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
  const label = !pos.epochs ? '' : running
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
  return b && typeof b.value === 'number' ? `${fmtNum(b.value)} ${metricName(b.metric)} (epoch ${b.epoch})` : '';
}

// The latest epoch's headline numbers: "val. acc. 0.91 · loss 0.31".
export function latestText(job) {
  const m = job.metrics || {};
  const parts = [];
  if (typeof m.val_accuracy === 'number') parts.push(`val. acc. ${fmtNum(m.val_accuracy)}`);
  else if (typeof m.train_accuracy === 'number') parts.push(`acc. ${fmtNum(m.train_accuracy)}`);
  if (typeof m.rmse === 'number') parts.push(`RMSE ${fmtNum(m.rmse)}`);
  if (typeof m.r2 === 'number') parts.push(`R² ${fmtNum(m.r2)}`);
  if (typeof m.val_loss === 'number') parts.push(`val. loss ${fmtNum(m.val_loss)}`);
  if (typeof m.train_loss === 'number') parts.push(`loss ${fmtNum(m.train_loss)}`);
  return parts.join(' · ');
}

export function throughputText(job) {
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
