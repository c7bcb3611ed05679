// datasets.js - the datasets list, the upload form (multipart, with upload
// progress) and a dataset's details.
import {api, upload} from './api.js';
import {h, field, setFieldError, fmtBytes, fmtNum, fmtTime, kv, statusBadge, tokenizerText} from './util.js';

// The file parts of each format, and which extra fields it takes.
const FORMATS = {
  csv: {files: [['file', 'CSV file (header row)']], label: true, task: true, text: true},
  idx: {files: [['images', 'Images (IDX, .gz ok)'], ['labels', 'Labels (IDX, .gz ok)']]},
  npy: {files: [['x', 'Inputs x (.npy)'], ['y', 'Targets y (.npy)']], task: true},
  // Language-model data (the byte tokenizer; token ids made elsewhere).
  text: {files: [['file', 'Text file (UTF-8)']]},
  tokens: {files: [['file', 'Token ids (.npy or llm.c .bin)']], vocab: true},
};

const isText = (d) => d.task === 'language_modeling';
// A text classification CSV: examples of token ids from its text column.
const isTextCsv = (d) => typeof d.text_column === 'string';
// A dataset's size in its own unit: examples, or tokens for text.
const sizeText = (d) => (isText(d) ? `${Number(d.num_tokens).toLocaleString()} tokens` : String(d.num_examples));

export function datasetsPage(root) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const tbody = h('tbody', {id: 'datasets-body'});
  const name = h('input', {id: 'ds-name', name: 'name', required: true, maxlength: 200});
  const format = h('select', {id: 'ds-format', name: 'format'}, Object.keys(FORMATS).map((f) => h('option', {value: f, text: f})));
  const label = h('input', {id: 'ds-label_column', name: 'label_column', placeholder: 'label'});
  const task = h('select', {id: 'ds-task', name: 'task'}, ['', 'classification', 'regression'].map((t) =>
    h('option', {value: t, text: t || '(from the data)'})));
  // csv only: a text column makes a text classification dataset, and then
  // max_length applies.
  const textColumn = h('input', {id: 'ds-text_column', name: 'text_column', placeholder: '(none: a table)'});
  const maxLength = h('input', {id: 'ds-max_length', name: 'max_length', type: 'number', min: 1, max: 8192, step: 1, placeholder: '128'});
  const vocab = h('input', {id: 'ds-vocab_size', name: 'vocab_size', type: 'number', min: 1, step: 1, placeholder: '50257'});
  const files = {};
  for (const f of Object.values(FORMATS)) for (const [part] of f.files)
    files[part] = h('input', {id: `ds-${part}`, name: part, type: 'file'});
  // One control per part; a part several formats share (csv's, text's and
  // tokens' "file") takes the chosen format's label in showFormat.
  const fileFields = Object.fromEntries(Object.entries(FORMATS).flatMap(([, f]) =>
    f.files.map(([part, text]) => [part, field(text, files[part])])));
  const vocabField = field('Vocabulary size', vocab);
  const labelField = field('Label column (csv)', label), taskField = field('Task', task);
  const textColumnField = field('Text column (text classification)', textColumn);
  const maxLengthField = field('Max length (tokens)', maxLength);
  const progress = h('progress', {id: 'upload-progress', max: 1, value: 0, hidden: true, 'aria-label': 'Upload progress'});
  const result = h('p', {id: 'upload-result', role: 'status'});
  const formError = h('p', {class: 'banner', id: 'upload-error', role: 'alert'});
  const submit = h('button', {type: 'submit', text: 'Upload'});
  const controls = {name, format, label_column: label, task, vocab_size: vocab, text_column: textColumn, max_length: maxLength, ...files};

  function showFormat() {
    const f = FORMATS[format.value];
    const parts = new Set(f.files.map(([p]) => p));
    for (const [part, el] of Object.entries(fileFields)) { el.hidden = !parts.has(part); files[part].required = parts.has(part); }
    for (const [part, text] of f.files) fileFields[part].querySelector('label').textContent = text;
    vocabField.hidden = !f.vocab;
    vocab.required = !!f.vocab;
    labelField.hidden = !f.label;
    textColumnField.hidden = !f.text;
    const text = f.text && textColumn.value.trim() !== '';
    maxLengthField.hidden = !text;
    // a text classification dataset is always classification
    taskField.hidden = !f.task || text;
  }
  format.addEventListener('change', showFormat);
  textColumn.addEventListener('input', showFormat);

  const form = h('form', {class: 'card', id: 'upload-form', onsubmit: async (e) => {
    e.preventDefault();
    formError.textContent = result.textContent = '';
    for (const c of Object.values(controls)) setFieldError(c, '');
    const f = FORMATS[format.value];
    const fd = new FormData();
    fd.append('name', name.value);
    fd.append('format', format.value);
    if (f.label && label.value) fd.append('label_column', label.value);
    const text = f.text && textColumn.value.trim() !== '';
    if (text) fd.append('text_column', textColumn.value.trim());
    if (text && maxLength.value) fd.append('max_length', maxLength.value);
    if (f.task && !text && task.value) fd.append('task', task.value);
    if (f.vocab) fd.append('vocab_size', vocab.value);
    for (const [part] of f.files) fd.append(part, files[part].files[0]);
    submit.disabled = true;
    progress.hidden = false;
    progress.value = 0;
    try {
      const doc = await upload('/v1/datasets', fd, (x) => { progress.value = x; });
      progress.value = 1;
      result.replaceChildren('Uploaded ', h('a', {href: `#/datasets/${doc.id}`, text: doc.name}),
        ` (${doc.id}): ${isText(doc) ? sizeText(doc) : `${doc.num_examples} examples`}.`);
      result.dataset.id = doc.id;
      form.reset();
      showFormat();
      load();
    } catch (x) {
      const target = x.field && controls[x.field];
      if (target) setFieldError(target, x.message); else formError.textContent = `Upload failed: ${x.message}`;
    } finally { submit.disabled = false; }
  }},
  h('h2', {text: 'Upload a dataset'}), formError,
  h('div', {class: 'row'}, field('Name', name), field('Format', format), labelField, textColumnField, maxLengthField, taskField, vocabField),
  h('div', {class: 'row'}, Object.values(fileFields)),
  h('div', {class: 'row'}, submit, progress), result);
  showFormat();

  const columns = ['Name', 'Format', 'Task', 'Examples', 'Input shape', 'Size', 'Created'];
  root.append(h('h1', {text: 'Datasets'}), banner,
    h('div', {class: 'table-wrap'}, h('table', {id: 'datasets', class: 'cards'},
      h('thead', {}, h('tr', {}, columns.map((t) => h('th', {scope: 'col', text: t})))), tbody)), form);

  async function load() {
    try {
      const doc = await api('/v1/datasets?limit=200');
      tbody.replaceChildren(...doc.items.map((d) => h('tr', {'data-dataset-id': d.id},
        h('td', {'data-label': columns[0]}, h('a', {href: `#/datasets/${d.id}`, text: d.name})),
        [d.format, d.task, sizeText(d), isText(d) ? '—' : JSON.stringify(d.input_shape), fmtBytes(d.bytes), fmtTime(d.created_at)]
          .map((v, i) => h('td', {'data-label': columns[i + 1], text: v})))));
      if (!doc.items.length) tbody.append(h('tr', {}, h('td', {colspan: 7, class: 'muted', text: 'No datasets yet.'})));
    } catch (e) { if (e.status !== 401) banner.textContent = `Could not load datasets: ${e.message}`; }
  }
  load();
}

// A dataset's page: its facts, the class balance (counts kept in the doc at
// upload), a preview of the first examples, the jobs and models that use it,
// and Delete. Each part fills its own element, so a reply that comes after
// the person has left the page lands nowhere.
export function datasetPage(root, id) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const head = h('div', {class: 'ds-head'});
  const facts = h('div', {id: 'dataset-facts'});
  const balance = h('section', {class: 'card', id: 'class-balance', hidden: true});
  const columns = h('section', {class: 'card', id: 'dataset-columns-card', hidden: true});
  const preview = h('section', {class: 'card', id: 'preview'}, h('h2', {text: 'First examples'}),
    h('p', {class: 'muted', text: 'Loading…'}));
  const usage = h('section', {class: 'card', id: 'dataset-usage'}, h('h2', {text: 'Used by'}),
    h('p', {class: 'muted', text: 'Loading…'}));
  root.append(h('p', {}, h('a', {href: '#/datasets', text: '← Datasets'})), banner, head, facts, columns, balance, preview, usage);

  api(`/v1/datasets/${id}`).then((d) => {
    head.replaceChildren(h('h1', {text: d.name}), deleteControl(d));
    facts.replaceChildren(h('section', {class: 'card', id: 'dataset'}, kv([
      ['Id', d.id], ['Format', d.format], ['Task', d.task],
      ...(isText(d) ? [['Tokens', Number(d.num_tokens).toLocaleString()], ['Vocabulary', Number(d.vocab_size).toLocaleString()],
        ['Tokenizer', tokenizerText(d.tokenizer) || 'none (token ids made elsewhere)']]
        : [['Examples', String(d.num_examples)], ['Input shape', JSON.stringify(d.input_shape)]]),
      d.classes ? ['Classes', d.classes.join(', ')] : null,
      d.num_targets ? ['Targets', String(d.num_targets)] : null,
      d.feature_names ? ['Features', d.feature_names.join(', ')] : null,
      d.label_column ? ['Label column', d.label_column] : null,
      ...(isTextCsv(d) ? [['Text column', d.text_column], ['Tokenizer', tokenizerText(d.tokenizer)],
        ['Vocabulary', Number(d.vocab_size).toLocaleString()], ['Max length', `${d.max_length} tokens`],
        ['Tokens', `${Number(d.num_tokens).toLocaleString()} (${Number(d.truncated_examples).toLocaleString()} example${d.truncated_examples === 1 ? '' : 's'} truncated)`]] : []),
      ['Size', fmtBytes(d.bytes)], ['SHA-256', d.sha256], ['Created', fmtTime(d.created_at)],
    ]), h('p', {}, h('a', {href: `#/new?dataset=${d.id}`, id: 'train-link',
      text: isText(d) ? 'Train a language model on it' : 'Train a model on it'}))));
    if (Array.isArray(d.columns) && d.columns.length) showColumns(columns, d);
    if (d.task === 'classification') showBalance(balance, d);
    showPreview(preview, d).catch((e) => {
      preview.replaceChildren(h('h2', {text: 'First examples'}), h('p', {class: 'error', text: `Could not load examples: ${e.message}`}));
    });
    showUsage(usage, d).catch((e) => {
      usage.replaceChildren(h('h2', {text: 'Used by'}), h('p', {class: 'error', text: `Could not load jobs and models: ${e.message}`}));
    });
  }).catch((e) => {
    if (e.status !== 401) banner.textContent = `Could not load dataset ${id}: ${e.message}`;
    preview.hidden = usage.hidden = true;
  });
}

// Delete, after a confirm; the API's refusal (409 while a job needs the
// dataset) is shown beside the button.
function deleteControl(d) {
  const error = h('p', {class: 'error', id: 'delete-error', role: 'alert'});
  const button = h('button', {type: 'button', class: 'danger', id: 'delete-dataset', text: 'Delete', onclick: async () => {
    error.textContent = '';
    if (!confirm(`Delete dataset ${d.name} (${d.id})? Models trained on it keep working; jobs can no longer use it.`)) return;
    button.disabled = true;
    try {
      await api(`/v1/datasets/${d.id}`, {method: 'DELETE'});
      location.hash = '#/datasets';
    } catch (e) {
      if (e.status !== 401) error.textContent = `Not deleted: ${e.message}`;
    } finally { button.disabled = false; }
  }});
  return h('div', {class: 'ds-delete'}, button, error);
}

// A CSV's typed feature columns (the document's `columns`): name, type,
// the first categories and how many, missing cells.
const FIRST_CATEGORIES = 5;
function showColumns(section, d) {
  section.hidden = false;
  const cols = ['Column', 'Type', 'Categories', 'Missing'];
  const cats = (c) => {
    const all = c.categories || [];
    if (!all.length) return '—';
    const first = all.slice(0, FIRST_CATEGORIES).join(', ');
    return `${first}${all.length > FIRST_CATEGORIES ? ', …' : ''} (${all.length} ${all.length === 1 ? 'category' : 'categories'})`;
  };
  const missing = (c) => (c.missing ? `${c.missing.toLocaleString()} (${(100 * c.missing / d.num_examples).toFixed(1)} %)` : '0');
  section.replaceChildren(h('h2', {text: 'Columns'}),
    h('p', {class: 'muted', text: 'The feature columns, typed by their cells. A model trained on it imputes a missing number or yes/no with the training mean; a missing category is all zeros.'}),
    h('div', {class: 'table-wrap'}, h('table', {class: 'cards', id: 'dataset-columns'},
      h('thead', {}, h('tr', {}, cols.map((t) => h('th', {scope: 'col', text: t})))),
      h('tbody', {}, d.columns.map((c) => h('tr', {'data-column': c.name},
        [c.name, c.type, cats(c), missing(c)].map((v, i) => h('td', {'data-label': cols[i], text: v}))))))));
}

// Count per class as bars, widest = the largest class.
function showBalance(section, d) {
  section.hidden = false;
  const title = h('h2', {text: 'Class balance'});
  const counts = d.class_counts;
  if (!Array.isArray(counts) || counts.length !== (d.classes || []).length) {
    section.replaceChildren(title, h('p', {class: 'muted', text: 'Not recorded: this dataset was uploaded before class counts were kept. Upload it again to see them.'}));
    return;
  }
  const most = Math.max(1, ...counts);
  const rows = d.classes.map((c, i) => {
    const bar = h('span', {class: 'bar-fill'});
    bar.style.width = `${(100 * counts[i] / most).toFixed(1)}%`;
    return h('li', {class: 'balance-row', 'data-class': String(c), 'data-count': counts[i]},
      h('span', {class: 'balance-class', text: String(c)}),
      h('span', {class: 'bar', 'aria-hidden': 'true'}, bar),
      h('span', {class: 'balance-count', text: `${counts[i].toLocaleString()} (${(100 * counts[i] / d.num_examples).toFixed(1)} %)`}));
  });
  section.replaceChildren(title, h('ul', {class: 'balance', 'aria-label': 'Examples per class'}, rows));
}

// The shape of a picture: [h, w], [1, h, w] or [3, h, w] (channels first),
// as {h, w, channels}; null for anything else.
function pictureShape(shape) {
  if (shape.length === 2) return {h: shape[0], w: shape[1], channels: 1};
  if (shape.length === 3 && (shape[0] === 1 || shape[0] === 3) && shape[1] >= 4 && shape[2] >= 4)
    return {h: shape[1], w: shape[2], channels: shape[0]};
  return null;
}

// An example's values drawn into a canvas of the picture's size: bytes as
// they are, float values in [0, 1] scaled to bytes.
function pictureCanvas(values, pic, scale) {
  const c = h('canvas', {width: pic.w, height: pic.h, class: 'thumb'});
  const ctx = c.getContext('2d');
  const img = ctx.createImageData(pic.w, pic.h);
  const plane = pic.w * pic.h;
  for (let i = 0; i < plane; i++) {
    const px = [0, 1, 2].map((k) => values[(pic.channels === 3 ? k : 0) * plane + i] * scale);
    img.data.set([...px.map((v) => Math.max(0, Math.min(255, Math.round(v)))), 255], i * 4);
  }
  ctx.putImageData(img, 0, 0);
  return c;
}

// A stored float32 value with 6 significant digits and no trailing zeros.
const fmtValue = (v) => (v === null ? '—' : typeof v === 'number' ? String(Number(v.toPrecision(6))) : String(v));

const PREVIEW_IMAGES = 12, PREVIEW_ROWS = 8;
async function showPreview(section, d) {
  if (isText(d)) return showWindows(section, d);
  if (isTextCsv(d)) return showTextRows(section, d);
  const limit = d.input_shape.length === 1 ? PREVIEW_ROWS : PREVIEW_IMAGES;
  const doc = await api(`/v1/datasets/${d.id}/examples?limit=${limit}`);
  const title = h('h2', {text: 'First examples'});
  const note = h('p', {class: 'muted', text: `Examples 1–${doc.items.length} of ${doc.total}, as stored (before preprocessing).`});
  const pic = pictureShape(d.input_shape);
  const label = (it) => (Array.isArray(it.label) ? it.label.map((v) => fmtNum(v)).join(', ') : fmtNum(it.label));
  if (pic) {
    const values = doc.items.map((it) => [it.x].flat(Infinity));
    const max = Math.max(0, ...values.map((v) => Math.max(...v)));
    const scale = max <= 1 ? 255 : 1;
    section.replaceChildren(title, note, h('div', {class: 'thumbs preview-images'}, doc.items.map((it, k) =>
      h('figure', {class: 'preview-image', 'data-index': it.index},
        pictureCanvas(values[k], pic, scale), h('figcaption', {class: 'thumb-label', text: label(it)})))));
    return;
  }
  // Typed columns: the examples are raw rows, a cell per column.
  const typed = Array.isArray(d.columns) && d.columns.length;
  if (typed || (d.input_shape.length === 1 && d.input_shape[0] <= 64)) {
    const names = typed ? d.columns.map((c) => c.name)
      : d.feature_names && d.feature_names.length === d.input_shape[0] ? d.feature_names
        : Array.from({length: d.input_shape[0]}, (_, i) => `x${i + 1}`);
    const target = d.label_column || (d.task === 'classification' ? 'label' : 'target');
    const cols = ['#', ...names, target];
    section.replaceChildren(title, note, h('div', {class: 'table-wrap'}, h('table', {class: 'cards preview-table'},
      h('thead', {}, h('tr', {}, cols.map((t) => h('th', {scope: 'col', text: t})))),
      h('tbody', {}, doc.items.map((it) => h('tr', {'data-index': it.index},
        [String(it.index), ...[it.x].flat().map(fmtValue), label(it)].map((v, i) =>
          h('td', {'data-label': cols[i], text: v}))))))));
    return;
  }
  section.replaceChildren(title, note, h('p', {class: 'muted',
    text: `Examples of shape ${JSON.stringify(d.input_shape)} are not drawn here; GET /v1/datasets/${d.id}/examples returns them.`}));
}

// A text dataset's first token windows: decoded text for the byte
// tokenizer, the ids otherwise.
const WINDOWS = 4, WINDOW = 64;
async function showWindows(section, d) {
  const doc = await api(`/v1/datasets/${d.id}/examples?limit=${WINDOWS}&length=${WINDOW}`);
  const title = h('h2', {text: 'First tokens'});
  const note = h('p', {class: 'muted', text: `Windows 1–${doc.items.length} of ${doc.total}, ${WINDOW} tokens each${d.tokenizer ? ', decoded' : ''}.`});
  section.replaceChildren(title, note, ...doc.items.map((it) => h('pre', {class: 'token-window', 'data-index': it.index},
    typeof it.text === 'string' ? it.text : it.ids.join(' '))));
}

// A text classification dataset's first rows: each one's text (its tokens
// decoded, cut at max_length), token count and label.
async function showTextRows(section, d) {
  const doc = await api(`/v1/datasets/${d.id}/examples?limit=${PREVIEW_ROWS}`);
  const cols = ['#', d.text_column, 'Tokens', d.label_column || 'label'];
  section.replaceChildren(h('h2', {text: 'First examples'}),
    h('p', {class: 'muted', text: `Examples 1–${doc.items.length} of ${doc.total}: the text as tokenized (cut at ${d.max_length} tokens).`}),
    h('div', {class: 'table-wrap'}, h('table', {class: 'cards preview-table', id: 'text-rows'},
      h('thead', {}, h('tr', {}, cols.map((t) => h('th', {scope: 'col', text: t})))),
      h('tbody', {}, doc.items.map((it) => h('tr', {'data-index': it.index},
        [String(it.index), it.text, String(it.ids.length), fmtNum(it.label)].map((v, i) =>
          h('td', {'data-label': cols[i], text: v}))))))));
}

// The jobs that train or validate on it and the models trained on it: the
// API has no filter by dataset, so the newest 1000 of each are searched.
const SEARCHED = 1000;
async function showUsage(section, d) {
  const [jobs, models] = await Promise.all([api(`/v1/jobs?limit=${SEARCHED}`), api(`/v1/models?limit=${SEARCHED}`)]);
  const myJobs = jobs.items.filter((j) => j.dataset === d.id || (j.validation && j.validation.dataset === d.id));
  const myModels = models.items.filter((m) => m.dataset === d.id);
  const more = jobs.next_cursor || models.next_cursor ? ` (among the newest ${SEARCHED} jobs and models)` : '';
  const list = (items, empty, row) => (items.length ? h('ul', {class: 'usage'}, items.map(row)) : h('p', {class: 'muted', text: empty}));
  section.replaceChildren(h('h2', {text: 'Used by'}),
    h('h3', {text: `Jobs (${myJobs.length})${more}`}),
    list(myJobs, 'No job uses it.', (j) => h('li', {'data-job-id': j.id},
      h('a', {href: `#/jobs/${j.id}`, text: j.name || j.id}), ' ', statusBadge(j.status), ' ',
      h('span', {class: 'muted', text: j.dataset === d.id ? 'trains on it' : 'validates on it'}))),
    h('h3', {text: `Models (${myModels.length})`}),
    list(myModels, 'No model was trained on it.', (m) => h('li', {'data-model-id': m.id},
      h('a', {href: `#/models/${m.id}`, text: m.name}), ' ',
      h('span', {class: 'muted', text: m.metrics && m.metrics.val_accuracy !== undefined
        ? `val. accuracy ${fmtNum(m.metrics.val_accuracy)}` : m.id}))));
}
