// datasets.js - the datasets list, the upload form (multipart, with upload
// progress) and a dataset's details.
import {api, upload} from './api.js';
import {h, field, setFieldError, fmtBytes, fmtTime, kv} from './util.js';

// The file parts of each format, and which extra fields it takes.
const FORMATS = {
  csv: {files: [['file', 'CSV file (header row)']], label: true, task: true},
  idx: {files: [['images', 'Images (IDX, .gz ok)'], ['labels', 'Labels (IDX, .gz ok)']]},
  npy: {files: [['x', 'Inputs x (.npy)'], ['y', 'Targets y (.npy)']], task: true},
};

export function datasetsPage(root) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const tbody = h('tbody', {id: 'datasets-body'});
  const name = h('input', {id: 'ds-name', name: 'name', required: true, maxlength: 200});
  const format = h('select', {id: 'ds-format', name: 'format'}, Object.keys(FORMATS).map((f) => h('option', {value: f, text: f})));
  const label = h('input', {id: 'ds-label_column', name: 'label_column', placeholder: 'label'});
  const task = h('select', {id: 'ds-task', name: 'task'}, ['', 'classification', 'regression'].map((t) =>
    h('option', {value: t, text: t || '(from the data)'})));
  const files = {};
  for (const f of Object.values(FORMATS)) for (const [part] of f.files)
    files[part] = h('input', {id: `ds-${part}`, name: part, type: 'file'});
  const fileFields = Object.fromEntries(Object.entries(FORMATS).flatMap(([, f]) =>
    f.files.map(([part, text]) => [part, field(text, files[part])])));
  const labelField = field('Label column (csv)', label), taskField = field('Task', task);
  const progress = h('progress', {id: 'upload-progress', max: 1, value: 0, hidden: true, 'aria-label': 'Upload progress'});
  const result = h('p', {id: 'upload-result', role: 'status'});
  const formError = h('p', {class: 'banner', id: 'upload-error', role: 'alert'});
  const submit = h('button', {type: 'submit', text: 'Upload'});
  const controls = {name, format, label_column: label, task, ...files};

  function showFormat() {
    const f = FORMATS[format.value];
    const parts = new Set(f.files.map(([p]) => p));
    for (const [part, el] of Object.entries(fileFields)) { el.hidden = !parts.has(part); files[part].required = parts.has(part); }
    labelField.hidden = !f.label;
    taskField.hidden = !f.task;
  }
  format.addEventListener('change', showFormat);

  const form = h('form', {class: 'card', id: 'upload-form', onsubmit: async (e) => {
    e.preventDefault();
    formError.textContent = result.textContent = '';
    for (const c of Object.values(controls)) setFieldError(c, '');
    const f = FORMATS[format.value];
    const fd = new FormData();
    fd.append('name', name.value);
    fd.append('format', format.value);
    if (f.label && label.value) fd.append('label_column', label.value);
    if (f.task && task.value) fd.append('task', task.value);
    for (const [part] of f.files) fd.append(part, files[part].files[0]);
    submit.disabled = true;
    progress.hidden = false;
    progress.value = 0;
    try {
      const doc = await upload('/v1/datasets', fd, (x) => { progress.value = x; });
      progress.value = 1;
      result.replaceChildren('Uploaded ', h('a', {href: `#/datasets/${doc.id}`, text: doc.name}),
        ` (${doc.id}): ${doc.num_examples} examples.`);
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
  h('div', {class: 'row'}, field('Name', name), field('Format', format), labelField, taskField),
  h('div', {class: 'row'}, Object.values(fileFields)),
  h('div', {class: 'row'}, submit, progress), result);
  showFormat();

  root.append(h('h1', {text: 'Datasets'}), banner,
    h('div', {class: 'table-wrap'}, h('table', {id: 'datasets'},
      h('thead', {}, h('tr', {}, ['Name', 'Format', 'Task', 'Examples', 'Input shape', 'Size', 'Created']
        .map((t) => h('th', {scope: 'col', text: t})))), tbody)), form);

  async function load() {
    try {
      const doc = await api('/v1/datasets?limit=200');
      tbody.replaceChildren(...doc.items.map((d) => h('tr', {'data-dataset-id': d.id},
        h('td', {}, h('a', {href: `#/datasets/${d.id}`, text: d.name})),
        [d.format, d.task, d.num_examples, JSON.stringify(d.input_shape), fmtBytes(d.bytes), fmtTime(d.created_at)]
          .map((v) => h('td', {text: v})))));
      if (!doc.items.length) tbody.append(h('tr', {}, h('td', {colspan: 7, class: 'muted', text: 'No datasets yet.'})));
    } catch (e) { if (e.status !== 401) banner.textContent = `Could not load datasets: ${e.message}`; }
  }
  load();
}

export function datasetPage(root, id) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  root.append(h('p', {}, h('a', {href: '#/datasets', text: '← Datasets'})), banner);
  api(`/v1/datasets/${id}`).then((d) => {
    root.append(h('h1', {text: d.name}), h('section', {class: 'card', id: 'dataset'}, kv([
      ['Id', d.id], ['Format', d.format], ['Task', d.task], ['Examples', String(d.num_examples)],
      ['Input shape', JSON.stringify(d.input_shape)],
      d.classes ? ['Classes', d.classes.join(', ')] : null,
      d.num_targets ? ['Targets', String(d.num_targets)] : null,
      d.feature_names ? ['Features', d.feature_names.join(', ')] : null,
      d.label_column ? ['Label column', d.label_column] : null,
      ['Size', fmtBytes(d.bytes)], ['SHA-256', d.sha256], ['Created', fmtTime(d.created_at)],
    ]), h('p', {}, h('a', {href: `#/new?dataset=${d.id}`, text: 'Train a model on it'}))));
  }).catch((e) => { if (e.status !== 401) banner.textContent = `Could not load dataset ${id}: ${e.message}`; });
}
