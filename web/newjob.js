// newjob.js - the new-job form: templates, spec JSON, hyperparameters (with
// the learning-rate schedule and weight decay), the validation set and the
// GPU (from what is free now); an estimate of the parameters and memory
// before submitting (POST /v1/jobs?dry_run=true); "clone and edit" of an
// existing job (#/new?from=<id>), whose failure's field gets the focus. A
// 422's problem "field" is shown beside the matching control, in a line
// kept for it so nothing moves. A text or tokens dataset (task
// language_modeling) gets the language-model template and fields (context
// length, max steps, evaluation every N steps); other datasets get the image
// and tabular ones.
import {api} from './api.js';
import {h, field, setFieldError, fmtBytes, pickLabel} from './util.js';

// The Fashion-MNIST networks of tests/acceptance/fashion.py, and a small
// MLP for tabular data: the last dense layer is sized to the dataset. The
// GPT is nanoGPT's character model (4 layers, 4 heads, 128 channels; the
// vocabulary is the dataset's), with its hyperparameters (hp), for
// language-model datasets only (lm).
const GPT_BLOCK = {type: 'transformer_block', heads: 4};
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
  'gpt-char': {label: 'GPT (character)', lm: true, layers: [
    {type: 'embedding', dim: 128}, {type: 'positional_embedding'},
    GPT_BLOCK, GPT_BLOCK, GPT_BLOCK, GPT_BLOCK,
    {type: 'layernorm'}, {type: 'lm_head'}],
  hp: {context_length: 64, batch_size: 16, optimizer: 'adamw', learning_rate: 0.001, max_steps: 2000, eval_every_steps: 200}},
};
// What the form starts with, and goes back to when a template without hp
// follows one with.
const HP_DEFAULTS = {batch_size: 64, optimizer: 'adam', learning_rate: 0.001};
const isLM = (d) => !!d && d.task === 'language_modeling';


const HP_FIELDS = ['epochs', 'batch_size', 'optimizer', 'learning_rate', 'weight_decay', 'seed'];
// Language models only: shown (and sent) for a language-model dataset.
const LM_FIELDS = ['context_length', 'max_steps', 'eval_every_steps'];
// A dataset's size in its picker: examples, or tokens for text.
const sizeOf = (d) => (isLM(d) ? `${Number(d.num_tokens).toLocaleString()} tokens` : d.num_examples);

// The dataset a new job most likely wants: the one the tenant's latest job
// trained on, else the newest upload.
function sensibleDataset(datasets, jobs) {
  for (const j of jobs) if (datasets.has(j.dataset)) return j.dataset;
  return datasets.size ? [...datasets.keys()][0] : '';
}

// GPU choices from the device map: each profile with how many are free.
function gpuChoices(devices) {
  const slots = ((devices && devices.gpus) || []).flatMap((g) => g.slices || []);
  const by = new Map();
  for (const s of slots) {
    const what = s.profile || (s.kind === 'gpu' ? 'gpu' : null);
    if (!what) continue;
    const c = by.get(what) || {free: 0, all: 0};
    c.all++;
    if (s.state === 'free') c.free++;
    by.set(what, c);
  }
  const freeAll = [...by.values()].reduce((n, c) => n + c.free, 0);
  const out = [['', 'Server default'], ['none', 'none: CPU only']];
  if (by.size) out.push(['any', `any free GPU or slice (${freeAll} free now)`]);
  for (const [what, c] of by) out.push([what === 'gpu' ? 'any' : what, `${what === 'gpu' ? 'a whole GPU' : what}: ${c.free} of ${c.all} free`]);
  return out;
}

export function newJobPage(root, query) {
  const params = new URLSearchParams(query || '');
  const top = h('p', {class: 'banner', id: 'job-form-error', role: 'alert'});
  const c = {
    name: h('input', {id: 'job-name', maxlength: 200, placeholder: 'my-model'}),
    dataset: h('select', {id: 'job-dataset', required: true}),
    template: h('select', {id: 'job-template'}),
    spec: h('textarea', {id: 'job-spec', rows: 14, spellcheck: 'false'}),
    epochs: h('input', {id: 'hp-epochs', type: 'number', min: 1, value: 10}),
    batch_size: h('input', {id: 'hp-batch_size', type: 'number', min: 1, value: 64}),
    optimizer: h('select', {id: 'hp-optimizer'}, ['adam', 'adamw', 'sgd'].map((o) => h('option', {value: o, text: o}))),
    learning_rate: h('input', {id: 'hp-learning_rate', type: 'number', step: 'any', min: 0, value: 0.001}),
    weight_decay: h('input', {id: 'hp-weight_decay', type: 'number', step: 'any', min: 0, placeholder: 'optimizer default'}),
    seed: h('input', {id: 'hp-seed', type: 'number', placeholder: 'random'}),
    context_length: h('input', {id: 'hp-context_length', type: 'number', min: 1, max: 65536, value: 64}),
    max_steps: h('input', {id: 'hp-max_steps', type: 'number', min: 1, placeholder: 'none (epochs)'}),
    eval_every_steps: h('input', {id: 'hp-eval_every_steps', type: 'number', min: 1, placeholder: 'each epoch only'}),
    schedule: h('select', {id: 'hp-lr_schedule'}, [['constant', 'constant'], ['cosine', 'cosine to min_lr'], ['step', 'step: × gamma every N epochs']]
      .map(([v, t]) => h('option', {value: v, text: t}))),
    step_epochs: h('input', {id: 'hp-step_epochs', type: 'number', min: 1, value: 5}),
    gamma: h('input', {id: 'hp-gamma', type: 'number', step: 'any', min: 0, max: 1, value: 0.1}),
    min_lr: h('input', {id: 'hp-min_lr', type: 'number', step: 'any', min: 0, value: 0}),
    valsource: h('select', {id: 'job-validation-source'}, h('option', {value: '', text: 'a split of the training set'})),
    split: h('input', {id: 'job-validation', type: 'number', step: 'any', min: 0, max: 0.9, value: 0.1}),
    gpu: h('select', {id: 'job-gpu'}, h('option', {value: '', text: 'Server default'})),
    priority: h('input', {id: 'job-priority', type: 'number', value: 0}),
  };
  const datasets = new Map();
  let jobs = [];
  let extraHp = {};   // a cloned job's hyperparameters this form has no control for
  const submit = h('button', {type: 'submit', text: 'Submit job'});
  const estimate = h('p', {class: 'muted', id: 'job-estimate', 'aria-live': 'polite', text: 'Estimate: —'});
  const checkBtn = h('button', {type: 'button', class: 'secondary', id: 'job-check', text: 'Check and estimate'});
  const lmHint = h('p', {class: 'muted', id: 'lm-hint', hidden: true, text: 'A language model: each example is a window of ' +
    'context-length tokens predicting the next token at every position; the run stops after max steps or the epochs, ' +
    'whichever comes first; loss in nats, perplexity = exp(loss). The vocabulary is the dataset\'s.'});

  // The templates a dataset can use: the language-model one for a text or
  // tokens dataset, the others for the rest; Custom always. The LM fields
  // show for a language-model dataset only.
  let lmForm = null;
  function offerTemplates() {
    const lm = isLM(datasets.get(c.dataset.value));
    if (lm === lmForm) return;
    lmForm = lm;
    const was = c.template.value;
    c.template.replaceChildren(...Object.entries(TEMPLATES).filter(([, t]) => !!t.lm === lm)
      .map(([k, t]) => h('option', {value: k, text: t.label})), h('option', {value: 'custom', text: 'Custom (the spec below)'}));
    c.template.value = was === 'custom' || TEMPLATES[was]?.lm === lm ? was : c.template.options[0].value;
    for (const k of LM_FIELDS) c[k].closest('.field').hidden = !lm;
    lmHint.hidden = !lm;
    showValidationSets();
  }
  // A validation dataset of the training set's kind (text for a language
  // model, not text for the rest).
  function showValidationSets() {
    for (const o of c.valsource.options) if (o.value) o.hidden = isLM(datasets.get(o.value)) !== !!lmForm;
    if (c.valsource.selectedOptions[0]?.hidden) {
      c.valsource.value = '';
      c.split.closest('.field').hidden = false;
    }
  }
  let hpFrom = null;   // the template whose hp the controls hold
  function applyTemplate() {
    if (c.template.value === 'custom') return;
    const t = TEMPLATES[c.template.value];
    const layers = structuredClone(t.layers);
    const d = datasets.get(c.dataset.value);
    const out = d && (d.num_classes || d.num_targets);
    if (out && !t.lm) layers[layers.length - 1].units = out;
    c.spec.value = JSON.stringify({layers}, null, 2);
    // A template's hyperparameters once, when it is chosen (not again on
    // a change of dataset, which would undo the person's edits).
    const hp = hpFrom === c.template.value ? null : t.hp || (hpFrom ? HP_DEFAULTS : null);
    if (hp) for (const [k, v] of Object.entries(hp)) c[k].value = String(v);
    hpFrom = t.hp ? c.template.value : null;
    estimateSoon();
  }
  c.template.addEventListener('change', applyTemplate);
  c.dataset.addEventListener('change', () => {
    const d = datasets.get(c.dataset.value);
    offerTemplates();
    if (c.template.value !== 'custom' && !isLM(d)) {
      if (d && d.format === 'csv' && c.template.value !== 'tabular-mlp') c.template.value = 'tabular-mlp';
      if (d && d.format !== 'csv' && c.template.value === 'tabular-mlp') c.template.value = 'fashion-mlp';
    }
    applyTemplate();
  });
  const scheduleFields = {step: [c.step_epochs, c.gamma], cosine: [c.min_lr]};
  function showSchedule() {
    for (const el of [c.step_epochs, c.gamma, c.min_lr]) el.closest('.field').hidden = true;
    for (const el of scheduleFields[c.schedule.value] || []) el.closest('.field').hidden = false;
  }
  c.schedule.addEventListener('change', showSchedule);
  c.valsource.addEventListener('change', () => { c.split.closest('.field').hidden = c.valsource.value !== ''; });
  c.spec.addEventListener('input', () => { c.template.value = 'custom'; });

  // Problem "field" -> the control it names; anything else goes on top.
  function controlFor(f) {
    if (!f) return null;
    if (f === 'name' || f === 'dataset' || f === 'priority') return c[f];
    if (f === 'model' || f.startsWith('model.') || f.startsWith('model[')) return c.spec;
    if (f.startsWith('validation')) return c.valsource.value ? c.valsource : c.split;
    if (f.startsWith('resources')) return c.gpu;
    if (f.startsWith('hyperparameters.lr_schedule')) {
      const k = f.split('.')[2];
      return c[k] || c.schedule;
    }
    const m = f.match(/^hyperparameters\.(\w+)/);
    if (m && (HP_FIELDS.includes(m[1]) || (lmForm && LM_FIELDS.includes(m[1])))) return c[m[1]];
    return null;
  }

  // A failed job's error names what to change: the first hyperparameter
  // (or "memory": the batch size) it mentions.
  function controlForError(text) {
    const m = String(text || '').match(/hyperparameters\.(\w+)|\b(learning_rate|batch_size|weight_decay|epochs|context_length)\b/);
    if (m) return c[m[1] || m[2]] || null;
    if (/memory/i.test(text)) return c.batch_size;
    return null;
  }

  function body() {
    let model;
    try { model = JSON.parse(c.spec.value); } catch (x) { return {error: `Not valid JSON: ${x.message}`}; }
    const num = (el) => (el.value === '' ? undefined : Number(el.value));
    const hp = {...extraHp, epochs: num(c.epochs), batch_size: num(c.batch_size), optimizer: c.optimizer.value,
      learning_rate: num(c.learning_rate), weight_decay: num(c.weight_decay), seed: num(c.seed)};
    for (const k of LM_FIELDS) {
      if (lmForm) hp[k] = num(c[k]);
      else delete hp[k];
    }
    const sched = c.schedule.value;
    if (sched === 'step') hp.lr_schedule = {type: 'step', step_epochs: num(c.step_epochs), gamma: num(c.gamma)};
    else if (sched === 'cosine') hp.lr_schedule = {type: 'cosine', min_lr: num(c.min_lr) ?? 0};
    else delete hp.lr_schedule;
    const b = {
      dataset: c.dataset.value, model, hyperparameters: hp,
      validation: c.valsource.value ? {dataset: c.valsource.value} : {split: num(c.split) ?? 0.1},
      priority: num(c.priority) ?? 0,
    };
    if (c.name.value.trim()) b.name = c.name.value.trim();
    if (c.gpu.value) b.resources = {gpu: c.gpu.value};
    return {body: b};
  }

  function clearErrors() {
    top.textContent = '';
    for (const el of Object.values(c)) setFieldError(el, '');
  }
  // Beside its field (a line kept for it; the whole text in its title), or
  // on top when no control matches.
  function showError(x) {
    const el = controlFor(x.field);
    if (el) {
      setFieldError(el, x.message);
      document.getElementById(el.id + '-error').title = x.message;
      el.focus();
    } else top.textContent = (x.field ? `${x.field}: ` : '') + x.message;
  }

  // The dry run: the server's own checks, the parameter count and the
  // memory training will take, before anything is queued.
  let estimateTimer = null, estimateSeq = 0;
  async function check(showErrors) {
    const b = body();
    if (b.error) { if (showErrors) { setFieldError(c.spec, b.error); c.spec.focus(); } estimate.textContent = 'Estimate: the spec is not valid JSON'; return false; }
    if (!b.body.dataset) return false;
    const seq = ++estimateSeq;
    try {
      const r = await api('/v1/jobs?dry_run=true', {method: 'POST', json: b.body});
      if (seq !== estimateSeq) return true;
      estimate.dataset.parameters = String(r.parameters);
      estimate.dataset.memory = String(r.estimated_memory_bytes);
      estimate.textContent = `Estimate: ${r.parameters.toLocaleString()} parameters · about ${fmtBytes(r.estimated_memory_bytes)} to train · checks pass`;
      return true;
    } catch (x) {
      if (seq !== estimateSeq) return false;
      estimate.textContent = `Estimate: not available: ${x.message}`;
      estimate.title = x.message;
      delete estimate.dataset.parameters;
      if (showErrors) showError(x);
      return false;
    }
  }
  function estimateSoon() {
    clearTimeout(estimateTimer);
    estimateTimer = setTimeout(() => check(false), 400);
  }
  checkBtn.addEventListener('click', () => { clearErrors(); check(true); });

  const form = h('form', {class: 'card', id: 'job-form', novalidate: true, oninput: estimateSoon, onchange: estimateSoon, onsubmit: async (e) => {
    e.preventDefault();
    clearErrors();
    const b = body();
    if (b.error) { setFieldError(c.spec, b.error); c.spec.focus(); return; }
    submit.disabled = true;
    try {
      const job = await api('/v1/jobs', {method: 'POST', json: b.body});
      location.hash = `#/jobs/${job.id}`;
    } catch (x) { showError(x); } finally { submit.disabled = false; }
  }},
  top,
  h('div', {class: 'row'}, field('Name', c.name), field('Dataset', c.dataset), field('Template', c.template)),
  field('Model spec (JSON)', c.spec),
  h('fieldset', {}, h('legend', {text: 'Hyperparameters'}),
    h('div', {class: 'row'}, field('Epochs', c.epochs), field('Batch size', c.batch_size), field('Optimizer', c.optimizer),
      field('Learning rate', c.learning_rate), field('Weight decay', c.weight_decay), field('Seed', c.seed)),
    h('div', {class: 'row'}, field('Context length (tokens)', c.context_length), field('Max steps', c.max_steps),
      field('Validate every N steps', c.eval_every_steps)),
    lmHint,
    h('div', {class: 'row'}, field('Learning-rate schedule', c.schedule), field('Every N epochs', c.step_epochs),
      field('Gamma', c.gamma), field('Minimum rate', c.min_lr))),
  h('fieldset', {}, h('legend', {text: 'Validation and resources'}),
    h('div', {class: 'row'}, field('Validation set', c.valsource), field('Validation split', c.split),
      field('GPU', c.gpu), field('Priority', c.priority))),
  h('div', {class: 'row submit-row'}, submit, checkBtn, estimate));

  const title = h('h1', {text: 'New job'});
  root.append(title, form);
  showSchedule();
  offerTemplates();

  // A clone: every field from the job; its failure's field focused.
  async function cloneFrom(id) {
    const j = await api(`/v1/jobs/${encodeURIComponent(id)}`);
    title.textContent = `New job: a copy of ${j.name}`;
    c.name.value = `${j.name}-2`.slice(0, 200);
    if (datasets.has(j.dataset)) c.dataset.value = j.dataset;
    offerTemplates();
    c.template.value = 'custom';
    hpFrom = null;
    c.spec.value = JSON.stringify(j.spec, null, 2);
    const hp = {...(j.hyperparameters || {})};
    for (const k of [...HP_FIELDS, ...LM_FIELDS]) {
      if (hp[k] === undefined || hp[k] === null) continue;
      c[k].value = String(hp[k]);
      delete hp[k];
    }
    const ls = hp.lr_schedule;
    delete hp.lr_schedule;
    if (ls && ls.type) {
      c.schedule.value = ls.type;
      if (ls.step_epochs) c.step_epochs.value = ls.step_epochs;
      if (ls.gamma !== undefined) c.gamma.value = ls.gamma;
      if (ls.min_lr !== undefined) c.min_lr.value = ls.min_lr;
    }
    // Left as they were (max_attempts, the loss, augmentation...).
    delete hp.max_attempts;
    extraHp = hp;
    const v = j.validation || {};
    if (v.dataset) c.valsource.value = v.dataset;
    else if (typeof v.split === 'number') { c.valsource.value = ''; c.split.value = v.split; }
    c.split.closest('.field').hidden = !!v.dataset;
    const gpu = j.resources && j.resources.gpu;
    if (gpu && ![...c.gpu.options].some((o) => o.value === gpu)) c.gpu.append(h('option', {value: gpu, text: gpu}));
    if (gpu) c.gpu.value = gpu;
    c.priority.value = j.priority ?? 0;
    showSchedule();
    if (j.status === 'failed') {
      const el = controlForError(j.error);
      top.textContent = `${j.name} failed: ${j.error || 'no reason given'}`;
      if (el) { setFieldError(el, 'The failed run says to change this.'); el.focus(); }
    }
    check(false);
  }

  Promise.all([api('/v1/datasets?limit=200'), api('/v1/jobs?limit=50').catch(() => ({items: []})),
    api('/v1/devices').catch(() => null)]).then(async ([doc, jdoc, devices]) => {
    jobs = jdoc.items;
    for (const d of doc.items) datasets.set(d.id, d);
    c.dataset.replaceChildren(...doc.items.map((d) => h('option', {value: d.id, text: pickLabel(d, `(${d.format}, ${sizeOf(d)})`)})));
    c.valsource.append(...doc.items.map((d) => h('option', {value: d.id, text: `dataset ${pickLabel(d, `(${sizeOf(d)})`)}`})));
    showValidationSets();
    c.gpu.replaceChildren(...gpuChoices(devices).map(([v, t]) => h('option', {value: v, text: t})));
    if (!doc.items.length) top.replaceChildren('No datasets yet: ', h('a', {href: '#/datasets', text: 'upload one'}), ' first.');
    const want = params.get('dataset');
    c.dataset.value = want && datasets.has(want) ? want : sensibleDataset(datasets, jobs);
    c.dataset.dispatchEvent(new Event('change'));
    if (params.get('from')) {
      try { await cloneFrom(params.get('from')); } catch (x) { top.textContent = `Could not load the job to clone: ${x.message}`; }
    }
  }).catch((e) => { if (e.status !== 401) top.textContent = `Could not load datasets: ${e.message}`; });
  applyTemplate();
}
