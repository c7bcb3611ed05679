// util.js - DOM building and formatting shared by the pages.

// h('div', {class: 'x', onclick: fn, text: 'hi'}, child, ...): an element.
// Attributes with null/undefined/false values are left out; children may be
// strings, nodes, arrays of them, or null.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// A labelled control: <div class=field><label for=id>text</label>control<p error></div>.
export function field(label, control, extra = null) {
  const id = control.id || (control.id = 'f-' + Math.random().toString(36).slice(2, 9));
  const err = h('p', {class: 'field-error', id: id + '-error', role: 'alert'});
  control.setAttribute('aria-describedby', err.id);
  return h('div', {class: 'field'}, h('label', {for: id, text: label}), control, extra, err);
}

export function setFieldError(control, message) {
  const err = document.getElementById(control.id + '-error');
  if (err) err.textContent = message || '';
  if (message) control.setAttribute('aria-invalid', 'true');
  else control.removeAttribute('aria-invalid');
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + units[i];
}

export function fmtDuration(sec) {
  if (sec === null || sec === undefined || !isFinite(sec)) return '—';
  sec = Math.max(0, Math.round(sec));
  const m = Math.floor(sec / 60), s = sec % 60;
  if (m >= 60) return `${Math.floor(m / 60)} h ${m % 60} min`;
  return m ? `${m} min ${s} s` : `${s} s`;
}

export function fmtNum(x, digits = 4) {
  if (x === null || x === undefined) return '—';
  if (typeof x !== 'number') return String(x);
  if (Number.isInteger(x)) return String(x);
  // A figure in a target's units (an RMSE of 19,645 on prices): grouped,
  // one decimal; four decimals there are noise.
  if (Math.abs(x) >= 1000) return x.toLocaleString('en-US', {minimumFractionDigits: 1, maximumFractionDigits: 1});
  return x.toFixed(digits);
}

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString();
}

// Seconds a job has run (or ran): started_at to finished_at or now.
export function jobSeconds(job) {
  if (!job.started_at) return null;
  const end = job.finished_at ? Date.parse(job.finished_at) : Date.now();
  return (end - Date.parse(job.started_at)) / 1000;
}

export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

export function statusBadge(status) {
  return h('span', {class: 'status status-' + status, text: status});
}

// A stable colour per job id, so a job keeps its colour on every page.
export function jobColour(id) {
  let x = 0;
  for (const ch of String(id)) x = (x * 31 + ch.charCodeAt(0)) >>> 0;
  return `hsl(${x % 360} 60% 38%)`;
}

// Names each cell of a row by its column (data-label), which a table of
// class "cards" shows beside the value on a phone. Returns the row.
export function labelCells(tr, labels) {
  [...tr.children].forEach((td, i) => { if (labels[i]) td.dataset.label = labels[i]; });
  return tr;
}

export function kv(pairs) {
  return h('dl', {class: 'kv'}, pairs.filter(Boolean).map(([k, v]) => [h('dt', {text: k}), h('dd', {}, v)]));
}

export function placementText(job) {
  const p = job.placement;
  if (!p) return job.status === 'queued' ? '—' : (job.device || '—');
  if (p.slurm && job.status === 'scheduled') {
    // Submitted to Slurm, not started by it yet: its state and reason.
    const s = p.slurm;
    const why = s.reason && s.reason !== 'None' ? ` (${s.reason})` : '';
    return `Slurm ${s.job_id ? `job ${s.job_id} ` : ''}${(s.state || 'submitting').toLowerCase()}${why}`;
  }
  if (p.slurm && p.slurm.node) {
    const what = p.gpu === null || p.gpu === undefined ? 'cpu' : (p.profile || 'whole GPU');
    return `Slurm job ${p.slurm.job_id} on ${p.slurm.node} · ${what}`;
  }
  // A data-parallel job (resources.workers): its ranks, started together.
  const ranks = Array.isArray(p.ranks) && p.ranks.length > 1
    ? ` · ${p.ranks.length} workers${p.launcher ? ` (${p.launcher})` : ''}` : '';
  if (p.gpu === null || p.gpu === undefined) return (p.device || 'cpu') + ranks;
  const what = p.profile ? p.profile : 'whole GPU';
  return `GPU ${p.gpu} · ${what} · slot ${p.slot}${ranks}`;
}

// Makes parent's element children equal to `fresh` (new nodes) while
// keeping the existing nodes that already are: a page redrawn every second
// does not replace a link under the pointer (a click would be lost) or the
// focused control. Down to `depth` levels, an element of the same tag (and
// the same data-key) whose children are all elements is updated in place
// (attributes copied, children synced) rather than replaced.
export function syncChildren(parent, fresh, depth = 1) {
  const onlyElements = (n) => [...n.childNodes].every((c) => c.nodeType === 1);
  fresh.forEach((n, i) => {
    const old = parent.children[i];
    if (!old) { parent.append(n); return; }
    if (old.isEqualNode(n)) return;
    if (depth > 0 && old.tagName === n.tagName && old.dataset.key === n.dataset.key &&
        onlyElements(old) && onlyElements(n)) {
      for (const a of [...old.attributes]) if (!n.hasAttribute(a.name)) old.removeAttribute(a.name);
      for (const a of [...n.attributes]) if (old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
      syncChildren(old, [...n.children], depth - 1);
      return;
    }
    parent.replaceChild(n, old);
  });
  while (parent.children.length > fresh.length) parent.lastElementChild.remove();
}

// "ds_ab12": an id's prefix and its first four characters, enough to tell
// apart two resources of one name in a picker.
export function shortId(id) {
  const s = String(id || ''), u = s.indexOf('_');
  return s.slice(0, u + 5);
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

// "5 Dec 04:10" (local time), or '' without a time.
export function fmtShortTime(iso) {
  const d = iso ? new Date(iso) : null;
  if (!d || isNaN(d)) return '';
  const two = (n) => String(n).padStart(2, '0');
  return `${d.getDate()} ${MONTHS[d.getMonth()]} ${two(d.getHours())}:${two(d.getMinutes())}`;
}

// A picker's label for a dataset or model: "fashion-train · 5 Dec 04:10 ·
// ds_ab12", so two of one name can be told apart; extra (if any) after.
export function pickLabel(r, extra = '') {
  return [r.name, fmtShortTime(r.created_at), shortId(r.id)].filter(Boolean).join(' · ') + (extra ? ` ${extra}` : '');
}

// Names of datasets and models by id, from the lists (GET /v1/datasets,
// /v1/models: no 404 for one that is gone), fetched at most once every
// 10 s and shared by a page's links. resolveName gives a promise of the
// name, or null when the resource is gone or cannot be read.
const lists = new Map();   // kind -> {at, names: Promise<Map>}
export function resolveName(api, kind, id) {
  if (!id) return Promise.resolve(null);
  let l = lists.get(kind);
  if (!l || Date.now() - l.at > 10000) {
    l = {at: Date.now(), names: api(`/v1/${kind}?limit=200`)
      .then((doc) => new Map((doc.items || []).map((r) => [r.id, r.name])))
      .catch(() => new Map())};
    lists.set(kind, l);
  }
  return l.names.then((m) => m.get(id) || null);
}

// A link to a dataset or model by its name, the id after it in muted text
// and as its tooltip; the id alone until the name is known, and when the
// resource is gone (data-gone).
export function resourceLink(api, kind, id, attrs = {}) {
  const link = h('a', {href: `#/${kind}/${encodeURIComponent(id)}`, title: id, text: id, ...attrs});
  const el = h('span', {class: 'resource', 'data-id': id}, link);
  resolveName(api, kind, id).then((name) => {
    if (!name) { el.dataset.gone = 'true'; link.title = `${id} (no longer stored)`; return; }
    link.textContent = name;
    el.append(' ', h('span', {class: 'muted id', text: id}));
  });
  return el;
}

// A tokenizer description (a dataset's `tokenizer`, a model's): the string
// "byte", or an object ({"type": "bpe", "vocab_size": N, ...}) told by its
// type and size; '' for none.
export function tokenizerText(t) {
  if (typeof t === 'string') return t;
  if (!t || typeof t !== 'object') return '';
  const size = t.vocab_size ?? t.vocabulary_size;
  return [t.type || 'custom', typeof size === 'number' ? `vocabulary ${size.toLocaleString()}` : null].filter(Boolean).join(', ');
}

// A token's text as a person can read it, as DOM nodes (never HTML): a
// space, newline, tab or carriage return as a marked sign (␣ ↵ → ␍), any
// other control or invisible character as its code point (U+200B); a token
// with no text of its own (a piece of a UTF-8 character) as its id in
// brackets. The exact text is the element's title, as JSON.
const VISIBLE = {' ': '␣', '\n': '↵', '\t': '→', '\r': '␍'};
export function tokenText(t) {
  const el = h('code', {class: 'token'});
  if (typeof t.text !== 'string') {
    el.append(h('span', {class: 'token-id', text: `⟨${t.id}⟩`}));
    el.title = `token ${t.id}: no text of its own (part of a character)`;
    return el;
  }
  if (t.text === '') el.append(h('span', {class: 'ws', text: '∅'}));
  for (const ch of t.text) {
    if (VISIBLE[ch]) el.append(h('span', {class: 'ws', text: VISIBLE[ch]}));
    else if (/[\p{C}\p{Z}]/u.test(ch) && ch !== ' ') {
      el.append(h('span', {class: 'ws', text: `U+${ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`}));
    } else el.append(ch);
  }
  el.title = `token ${t.id}: ${JSON.stringify(t.text)}`;
  return el;
}
