// newjob.js - the new-job form: templates, spec JSON, hyperparameters and
// resources; a 422's problem "field" is shown beside the matching control.
import {api} from './api.js';
import {h, field, setFieldError} from './util.js';

// The Fashion-MNIST networks of tests/acceptance/fashion.py, and a small
// MLP for tabular data. The last dense layer is sized to the dataset.
const TEMPLATES = {
  'fashion-mlp': {label: 'Fashion-MNIST MLP', layers: [
    {type: 'flatten'},
    {type: 'dense', units: 256}, {type: 'relu'},
    {type: 'dense', units: 128}, {type: 'relu'},
    {type: 'dense', units: 10}]},
  'fashion-cnn': {label: 'Fashion-MNIST CNN', layers: [
    {type: 'conv2d', filters: 32, kernel_size: 5, padding: 'same'}, {type: 'relu'},
    {type: 'maxpool2d', pool_size: 2},
    {type: 'conv2d', filters: 64, kernel_size: 5, padding: 'same'}, {type: 'relu'},
    {type: 'maxpool2d', pool_size: 2},
    {type: 'flatten'},
    {type: 'dense', units: 1024}, {type: 'relu'},
    {type: 'dropout', rate: 0.4},
    {type: 'dense', units: 10}]},
  'tabular-mlp': {label: 'Small MLP (tabular)', layers: [
    {type: 'dense', units: 64}, {type: 'relu'},
    {type: 'dense', units: 64}, {type: 'relu'},
    {type: 'dense', units: 2}]},
};

export function newJobPage(root, query) {
  const params = new URLSearchParams(query || '');
  const top = h('p', {class: 'banner', id: 'job-form-error', role: 'alert'});
  const c = {
    name: h('input', {id: 'job-name', maxlength: 200, placeholder: 'my-model'}),
    dataset: h('select', {id: 'job-dataset', required: true}),
    template: h('select', {id: 'job-template'}, Object.entries(TEMPLATES).map(([k, t]) => h('option', {value: k, text: t.label}))),
    spec: h('textarea', {id: 'job-spec', rows: 14, spellcheck: 'false'}),
    epochs: h('input', {id: 'hp-epochs', type: 'number', min: 1, value: 10}),
    batch_size: h('input', {id: 'hp-batch_size', type: 'number', min: 1, value: 64}),
    optimizer: h('select', {id: 'hp-optimizer'}, ['adam', 'adamw', 'sgd'].map((o) => h('option', {value: o, text: o}))),
    learning_rate: h('input', {id: 'hp-learning_rate', type: 'number', step: 'any', min: 0, value: 0.001}),
    seed: h('input', {id: 'hp-seed', type: 'number', placeholder: 'random'}),
    split: h('input', {id: 'job-validation', type: 'number', step: 'any', min: 0, max: 0.9, value: 0.1}),
    gpu: h('input', {id: 'job-gpu', list: 'gpu-choices', placeholder: 'server default'}),
    priority: h('input', {id: 'job-priority', type: 'number', value: 0}),
  };
  const datasets = new Map();
  const submit = h('button', {type: 'submit', text: 'Submit job'});

  function applyTemplate() {
    const t = TEMPLATES[c.template.value];
    const layers = structuredClone(t.layers);
    const d = datasets.get(c.dataset.value);
    const out = d && (d.num_classes || d.num_targets);
    if (out) layers[layers.length - 1].units = out;
    c.spec.value = JSON.stringify({layers}, null, 2);
  }
  c.template.addEventListener('change', applyTemplate);
  c.dataset.addEventListener('change', () => {
    const d = datasets.get(c.dataset.value);
    if (d && d.format === 'csv' && c.template.value !== 'tabular-mlp') c.template.value = 'tabular-mlp';
    if (d && d.format !== 'csv' && c.template.value === 'tabular-mlp') c.template.value = 'fashion-mlp';
    applyTemplate();
  });

  // Problem "field" -> the control it names; anything else goes on top.
  function controlFor(f) {
    if (!f) return null;
    if (f === 'name' || f === 'dataset' || f === 'priority') return c[f];
    if (f === 'model' || f.startsWith('model.') || f.startsWith('model[')) return c.spec;
    if (f.startsWith('validation')) return c.split;
    if (f.startsWith('resources')) return c.gpu;
    const m = f.match(/^hyperparameters\.(\w+)/);
    if (m && c[m[1]] && ['epochs', 'batch_size', 'optimizer', 'learning_rate', 'seed'].includes(m[1])) return c[m[1]];
    return null;
  }

  const form = h('form', {class: 'card', id: 'job-form', novalidate: true, onsubmit: async (e) => {
    e.preventDefault();
    top.textContent = '';
    for (const el of Object.values(c)) setFieldError(el, '');
    let model;
    try { model = JSON.parse(c.spec.value); } catch (x) { setFieldError(c.spec, `Not valid JSON: ${x.message}`); c.spec.focus(); return; }
    const num = (el) => (el.value === '' ? undefined : Number(el.value));
    const body = {
      dataset: c.dataset.value,
      model,
      hyperparameters: {epochs: num(c.epochs), batch_size: num(c.batch_size), optimizer: c.optimizer.value,
        learning_rate: num(c.learning_rate), seed: num(c.seed)},
      validation: {split: num(c.split) ?? 0.1},
      priority: num(c.priority) ?? 0,
    };
    if (c.name.value.trim()) body.name = c.name.value.trim();
    const gpu = c.gpu.value.trim();
    if (gpu) body.resources = {gpu};
    submit.disabled = true;
    try {
      const job = await api('/v1/jobs', {method: 'POST', json: body});
      location.hash = `#/jobs/${job.id}`;
    } catch (x) {
      const el = controlFor(x.field);
      if (el) { setFieldError(el, x.message); el.focus(); }
      else top.textContent = (x.field ? `${x.field}: ` : '') + x.message;
    } finally { submit.disabled = false; }
  }},
  top,
  h('div', {class: 'row'}, field('Name', c.name), field('Dataset', c.dataset), field('Template', c.template)),
  field('Model spec (JSON)', c.spec),
  h('fieldset', {}, h('legend', {text: 'Hyperparameters'}),
    h('div', {class: 'row'}, field('Epochs', c.epochs), field('Batch size', c.batch_size), field('Optimizer', c.optimizer),
      field('Learning rate', c.learning_rate), field('Seed', c.seed))),
  h('fieldset', {}, h('legend', {text: 'Validation and resources'}),
    h('div', {class: 'row'}, field('Validation split', c.split),
      field('GPU (none, any, a MIG profile)', c.gpu,
        h('datalist', {id: 'gpu-choices'}, ['none', 'any', '1g.18gb', '2g.35gb', '3g.71gb', '4g.71gb', '7g.141gb', '1g.10gb', '3g.40gb']
          .map((v) => h('option', {value: v})))),
      field('Priority', c.priority))),
  submit);

  root.append(h('h1', {text: 'New job'}), form);
  api('/v1/datasets?limit=200').then((doc) => {
    for (const d of doc.items) datasets.set(d.id, d);
    c.dataset.replaceChildren(...doc.items.map((d) => h('option', {value: d.id, text: `${d.name} (${d.format}, ${d.num_examples})`})));
    if (!doc.items.length) top.replaceChildren('No datasets yet: ', h('a', {href: '#/datasets', text: 'upload one'}), ' first.');
    const want = params.get('dataset');
    if (want && datasets.has(want)) c.dataset.value = want;
    c.dataset.dispatchEvent(new Event('change'));
  }).catch((e) => { if (e.status !== 401) top.textContent = `Could not load datasets: ${e.message}`; });
  applyTemplate();
}
