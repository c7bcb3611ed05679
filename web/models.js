// models.js - the models list, a model's details, its weights download and
// "try it": a drawing pad for 28x28 images, a form of the raw columns for a
// model trained on a CSV with typed columns, or one of numeric features,
// with class probabilities or the predicted target (in its units) from
// POST /v1/models/{id}/predict; for a language model a prompt, its tokens
// (POST /v1/models/{id}/tokenize) and the next token's most likely values
// with their probabilities, and Generate (generate.js): text streamed from
// a prompt.
import {api} from './api.js';
import {generateTryIt} from './generate.js';
import {h, field, fmtBytes, fmtNum, fmtTime, kv, resourceLink, tokenizerText, tokenText} from './util.js';
import {fmtPpl} from './jobinfo.js';

const isLM = (m) => m.task === 'language_modeling';

export function modelsPage(root) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const tbody = h('tbody', {id: 'models-body'});
  const cols = ['Name', 'Task', 'Job', 'Parameters', 'Validation', 'Created'];
  root.append(h('h1', {text: 'Models'}), banner, h('div', {class: 'table-wrap'}, h('table', {id: 'models', class: 'cards'},
    h('thead', {}, h('tr', {}, cols.map((t) => h('th', {scope: 'col', text: t})))), tbody)));
  api('/v1/models?limit=200').then((doc) => {
    tbody.replaceChildren(...doc.items.map((m) => h('tr', {'data-model-id': m.id},
      h('td', {'data-label': cols[0]}, h('a', {href: `#/models/${m.id}`, text: m.name})),
      h('td', {'data-label': cols[1], text: m.task}),
      h('td', {'data-label': cols[2]}, m.job ? h('a', {href: `#/jobs/${m.job}`, text: m.job}) : 'imported'),
      h('td', {'data-label': cols[3], text: m.param_count.toLocaleString()}),
      h('td', {'data-label': cols[4], text: isLM(m) ? `perplexity ${fmtPpl(m.metrics && m.metrics.val_perplexity)}`
        : fmtNum(m.metrics && m.metrics.val_accuracy)}),
      h('td', {'data-label': cols[5], text: fmtTime(m.created_at)}))));
    if (!doc.items.length) tbody.append(h('tr', {}, h('td', {colspan: 6, class: 'muted', text: 'No models yet: a job that succeeds makes one.'})));
  }).catch((e) => { if (e.status !== 401) banner.textContent = `Could not load models: ${e.message}`; });
}

const isImage = (shape) => {
  const s = shape.filter((d) => d !== 1);
  return s.length === 2 && s[0] === 28 && s[1] === 28;
};

// The pad draws light on dark in canvas bytes 0-255; a byte b is the input
// value b * unit (unit 1 for models that take pixel bytes, 1/255 for models
// trained on values in [0, 1]). A picked test image is sent with its stored
// values exactly, until the pad is drawn on or cleared.
function drawingPad(onDraw = () => {}) {
  const canvas = h('canvas', {class: 'pad', id: 'pad', width: 28, height: 28, tabindex: 0,
    role: 'img', 'aria-label': 'Drawing pad, 28 by 28 pixels: draw with the mouse, a finger or a pen'});
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  let unit = 1, picked = null;
  const hint = h('p', {class: 'muted', id: 'pad-hint'});
  const setHint = () => { hint.textContent = `Draw light on dark (pixel values ${unit === 1 ? '0–255' : '0–1'}).`; };
  setHint();
  const clear = () => { picked = null; onDraw(); ctx.fillStyle = '#000'; ctx.fillRect(0, 0, 28, 28); };
  clear();
  let drawing = false;
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    return [(e.clientX - r.left) * 28 / r.width, (e.clientY - r.top) * 28 / r.height];
  };
  const dot = (e) => {
    if (picked) { picked = null; onDraw(); }
    const [x, y] = at(e);
    ctx.fillStyle = '#fff';
    ctx.beginPath(); ctx.arc(x, y, 1.5, 0, Math.PI * 2); ctx.fill();
  };
  canvas.addEventListener('pointerdown', (e) => { drawing = true; canvas.setPointerCapture(e.pointerId); dot(e); });
  canvas.addEventListener('pointermove', (e) => { if (drawing) dot(e); });
  canvas.addEventListener('pointerup', () => { drawing = false; });
  // From the keyboard: a filled block in the middle (a "shirt"), to try it.
  const sample = () => { clear(); ctx.fillStyle = '#fff'; ctx.fillRect(7, 5, 14, 19); ctx.fillRect(3, 5, 22, 6); };
  const pixels = () => {
    if (picked) return picked.slice();
    const d = ctx.getImageData(0, 0, 28, 28).data;
    const out = [];
    for (let i = 0; i < 28 * 28; i++) out.push(d[i * 4] * unit);
    return out;
  };
  const show = (values) => { paint(ctx, values, unit); picked = values.slice(); };
  const setUnit = (u) => { unit = u; setHint(); };
  return {el: h('div', {class: 'draw'}, canvas, h('div', {}, hint,
    h('p', {}, h('button', {type: 'button', class: 'secondary', text: 'Clear', onclick: clear}), ' ',
      h('button', {type: 'button', class: 'secondary', text: 'Sample shape', onclick: sample})))),
  pixels, show, setUnit, unit: () => unit};
}

// Draws 784 input values (value / unit as a grey byte) into a 28x28 context.
function paint(ctx, values, unit) {
  const img = ctx.createImageData(28, 28);
  for (let i = 0; i < 28 * 28; i++) {
    const b = Math.max(0, Math.min(255, Math.round(values[i] / unit)));
    img.data.set([b, b, b, 255], i * 4);
  }
  ctx.putImageData(img, 0, 0);
}

// Where "Pick a test image" draws from: the job's validation dataset (a
// test set the model did not train on) when it had one, else the training
// set, said plainly. {id, name, test}.
async function exampleSource(m) {
  const train = {id: m.dataset, name: m.dataset, test: false};
  let job = null;
  try { job = m.job ? await api(`/v1/jobs/${m.job}`) : null; } catch { job = null; }
  const vid = job && job.validation && job.validation.dataset;
  if (!vid || vid === m.dataset) return train;
  try {
    const v = await api(`/v1/datasets/${vid}`);
    return {id: vid, name: v.name, test: true};
  } catch { return train; }
}

// "Pick a test image": pages of examples as thumbnail buttons, each marked
// right or wrong by one predict of the whole page; choosing one draws it
// into the pad and predicts. The thumbnail's text is its label; the mark is
// its colour, its ::after (data-predicted) and its accessible name.
const PICK_PAGE = 8;
const same = (a, b) => String(a) === String(b);
function testImages(m, pad, choose) {
  const list = h('div', {class: 'thumbs', id: 'test-images', role: 'group', 'aria-label': 'Test images'});
  const note = h('p', {class: 'muted', id: 'pick-status', role: 'status'});
  const score = h('p', {class: 'muted', id: 'pick-score'});
  let offset = 0, unitSet = false, source = null;
  const load = async () => {
    pick.disabled = true;
    note.textContent = 'Loading test images…';
    try {
      if (!source) source = await exampleSource(m);
      const page = (o) => api(`/v1/datasets/${source.id}/examples?offset=${o}&limit=${PICK_PAGE}`);
      let doc = await page(offset);
      if (!doc.items.length && offset) { offset = 0; doc = await page(0); }
      const items = doc.items.map((it) => ({...it, values: [it.x].flat(Infinity)})).filter((it) => it.values.length === 28 * 28);
      if (!unitSet && items.length) {
        // Models that scale bytes themselves take 0-255; others take the
        // stored values, which for float images are usually 0-1.
        const max = Math.max(...items.map((it) => Math.max(...it.values)));
        pad.setUnit(m.preprocess !== 'scale_255' && max <= 1 ? 1 / 255 : 1);
        unitSet = true;
      }
      offset = doc.offset + doc.items.length;
      if (offset >= doc.total) offset = 0;
      pick.textContent = source.test ? 'Other test images' : 'Other training images';
      const range = `${doc.offset + 1}–${doc.offset + doc.items.length} of ${doc.total}`;
      note.textContent = !items.length ? 'The dataset has no 28x28 examples.'
        : source.test ? `Examples ${range} of the test set ${source.name} (the job's validation set, not trained on). Choose one to predict it.`
          : `No test set: the job validated on a split of its training set, so these are training examples (${range} of dataset ${m.dataset}), which the model may have seen. Choose one to predict it.`;
      list.setAttribute('aria-label', source.test ? `Test images from ${source.name}` : `Training images from ${m.dataset}`);
      const buttons = items.map((it) => {
        const c = h('canvas', {width: 28, height: 28, class: 'thumb', 'aria-hidden': 'true'});
        paint(c.getContext('2d'), it.values, pad.unit());
        return h('button', {type: 'button', class: 'thumb-button', 'data-index': it.index, 'data-label': String(it.label),
          'aria-label': `Image ${it.index}, label ${it.label}`,
          onclick: () => choose(it, source)}, c, h('span', {class: 'thumb-label', text: String(it.label)}));
      });
      list.replaceChildren(...buttons);
      score.textContent = '';
      if (items.length && m.task === 'classification') await mark(items, buttons);
    } catch (e) {
      note.textContent = e.status === 404 ? `The dataset ${source ? source.id : m.dataset} is gone; draw instead.` : `Could not load test images: ${e.message}`;
    } finally { pick.disabled = false; }
  };
  // One predict for the page; each thumbnail right (its label) or wrong.
  const mark = async (items, buttons) => {
    try {
      const r = await api(`/v1/models/${m.id}/predict`, {method: 'POST', json: {inputs: items.map((it) => it.values)}});
      let right = 0;
      r.predictions.forEach((p, k) => {
        const ok = same(p, items[k].label);
        right += ok;
        const b = buttons[k];
        b.dataset.predicted = String(p);
        b.dataset.verdict = ok ? 'right' : 'wrong';
        b.classList.add(ok ? 'thumb-right' : 'thumb-wrong');
        b.title = ok ? `Label ${items[k].label}: predicted right` : `Label ${items[k].label}: predicted ${p} (wrong)`;
        b.setAttribute('aria-label', `Image ${items[k].index}, label ${items[k].label}, ${ok ? 'predicted right' : `predicted ${p}, wrong`}`);
      });
      score.textContent = `${right} of ${items.length} predicted right (✓ right, ✗ wrong with the predicted class).`;
    } catch (e) { score.textContent = `Could not predict these images: ${e.message}`; }
  };
  const pick = h('button', {type: 'button', class: 'secondary', id: 'pick-image', text: 'Pick a test image', onclick: load});
  return h('div', {class: 'pick'}, h('p', {}, pick), note, list, score);
}

// Where each tabular input starts: the feature's mean over the training set
// (kept in the dataset's doc at upload), else over a page of its examples,
// else 0. {values, how}.
async function startValues(d, n) {
  if (d && Array.isArray(d.feature_means) && d.feature_means.length === n)
    return {values: d.feature_means, how: 'Inputs start at each feature\'s mean over the training set.'};
  if (d) {
    try {
      const doc = await api(`/v1/datasets/${d.id}/examples?limit=64`);
      const rows = doc.items.map((it) => [it.x].flat()).filter((x) => x.length === n);
      if (rows.length) {
        return {values: Array.from({length: n}, (_, j) => rows.reduce((a, x) => a + x[j], 0) / rows.length),
          how: `Inputs start at each feature's mean over the first ${rows.length} training examples.`};
      }
    } catch { /* the dataset is gone: zeros */ }
  }
  return {values: new Array(n).fill(0), how: 'Inputs start at 0 (the training set is not available).'};
}
const roundValue = (x) => Number(Number(x).toPrecision(6));
// A predicted target: 312,345.67 for a price, 0.1234 for a small number.
const fmtTarget = (x) => (Math.abs(x) >= 1000 ? x.toLocaleString(undefined, {maximumFractionDigits: 2}) : fmtNum(x));

// The try-it form of a tabular model (preprocess "tabular"): a field per
// raw column of the model document's `columns`: a number field for a
// numeric column, yes/no for a boolean one, the model's categories (and
// "other", a free text: an unseen category is all zeros) for a categorical
// one. Empty is a missing value, imputed by the model. {el, row()}: row()
// is the predict input, an object keyed by column name.
const OTHER = '__other__';
function rawColumnsForm(columns) {
  const missing = h('option', {value: '', text: '— missing'});
  const fields = columns.map((c, i) => {
    const id = `column-${i}`;
    if (c.type === 'numeric') {
      const input = h('input', {id, type: 'number', step: 'any', 'data-column': c.name, placeholder: 'missing'});
      return {c, el: field(c.name, input), value: () => (input.value.trim() === '' ? null : Number(input.value))};
    }
    if (c.type === 'boolean') {
      const sel = h('select', {id, 'data-column': c.name}, missing.cloneNode(true),
        h('option', {value: 'true', text: 'yes (true)'}), h('option', {value: 'false', text: 'no (false)'}));
      return {c, el: field(c.name, sel), value: () => (sel.value === '' ? null : sel.value === 'true')};
    }
    const cats = c.categories || [];
    const other = h('input', {id: `${id}-other`, type: 'text', 'data-column': c.name, hidden: true,
      placeholder: 'a category', 'aria-label': `${c.name}: another category`});
    const sel = h('select', {id, 'data-column': c.name, onchange: () => { other.hidden = sel.value !== OTHER; }},
      missing.cloneNode(true), cats.map((v) => h('option', {value: v, text: v})),
      h('option', {value: OTHER, text: 'other…'}));
    if (cats.length) sel.value = cats[0];
    return {c, el: h('div', {class: 'field'}, h('label', {for: id, text: c.name}), sel, other),
      value: () => (sel.value === OTHER ? other.value.trim() || null : sel.value === '' ? null : sel.value)};
  });
  const el = h('div', {class: 'raw-columns'}, h('div', {class: 'row features'}, fields.map((f) => f.el)),
    h('p', {class: 'muted', id: 'columns-hint', text: 'The columns as the CSV had them. An empty field (— missing) is a ' +
      'missing value, imputed by the model: a number or yes/no with its training mean, a category as all zeros (so is ' +
      'one it did not see in training, typed under other…).'}));
  return {el, row: () => Object.fromEntries(fields.map((f) => [f.c.name, f.value()]))};
}

// Try it on a language model: a prompt; its tokens as the model's
// tokenizer cuts it (counted as you type); "Next token" asks predict for
// the top_k most likely next tokens, each row its text drawn visibly (see
// util.tokenText), id, probability and a bar; "Append" adds a token to the
// prompt and asks again. A model trained on token ids made elsewhere has no
// tokenizer: its prompt is token ids ("12 7 301"), sent as ids. {el}.
const TOKEN_IDS_SHOWN = 48;
function languageTryIt(m) {
  const byIds = !m.tokenizer;
  const vocab = m.vocab_size ?? m.num_outputs;
  const prompt = h('textarea', {id: 'lm-prompt', rows: 4, spellcheck: 'false',
    placeholder: byIds ? `Token ids (0 to ${vocab - 1}), separated by spaces or commas; then Next token (Ctrl+Enter)`
      : 'Type a prompt, then Next token (Ctrl+Enter)'});
  const topK = h('input', {id: 'lm-top-k', type: 'number', min: 1, max: 100, value: 10});
  const count = h('p', {class: 'muted', id: 'prompt-tokens', role: 'status', text: 'No prompt yet.'});
  const error = h('p', {class: 'error', id: 'predict-error', role: 'alert'});
  const out = h('div', {id: 'prediction', 'aria-live': 'polite'});
  const ctx = m.context_length || (m.input_shape && m.input_shape[0]) || 0;

  // Token ids typed as text: {ids} or {error} naming the first bad one.
  function parseIds(text) {
    const ids = [];
    for (const w of text.split(/[\s,]+/).filter(Boolean)) {
      const n = Number(w);
      if (!/^\d+$/.test(w) || n >= vocab) return {error: `"${w.slice(0, 20)}" is not a token id: ids are whole numbers from 0 to ${vocab - 1}.`};
      ids.push(n);
    }
    return {ids};
  }

  function showCount(tokens) {
    const n = tokens.length;
    const cut = ctx && n > ctx ? ` The model reads the last ${ctx.toLocaleString()} (its context length); the first ${(n - ctx).toLocaleString()} are left out.` : '';
    const ids = tokens.slice(0, TOKEN_IDS_SHOWN).join(' ') + (n > TOKEN_IDS_SHOWN ? ` … and ${(n - TOKEN_IDS_SHOWN).toLocaleString()} more` : '');
    count.dataset.count = String(n);
    count.replaceChildren(`${n.toLocaleString()} token${n === 1 ? '' : 's'}: `, h('code', {id: 'prompt-token-ids', text: ids}), cut);
  }

  // The prompt's tokens, counted as it is typed (the latest text wins).
  let seq = 0, timer = null;
  async function tokenize() {
    const text = prompt.value, mine = ++seq;
    delete count.dataset.count;
    if (!text.trim() && (byIds || !text)) { count.textContent = 'No prompt yet.'; return; }
    if (byIds) {
      const r = parseIds(text);
      if (r.error) count.textContent = r.error; else showCount(r.ids);
      return;
    }
    try {
      const r = await api(`/v1/models/${m.id}/tokenize`, {method: 'POST', json: {content: text}});
      if (mine === seq) showCount(r.tokens);
    } catch (e) { if (mine === seq) count.textContent = `Could not tokenize: ${e.message}`; }
  }
  prompt.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(tokenize, 250); });

  const go = h('button', {type: 'button', id: 'predict', text: 'Next token', onclick: predict});
  prompt.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); predict(); } });

  // Appends a token: its text, or (by ids) its id.
  function append(t) {
    prompt.value = byIds ? `${prompt.value.trimEnd()}${prompt.value.trim() ? ' ' : ''}${t.id}` : prompt.value + t.text;
    tokenize();
    predict();
  }

  async function predict() {
    error.textContent = '';
    let input = prompt.value;
    if (byIds) {
      const r = parseIds(input);
      if (r.error) { error.textContent = r.error; prompt.focus(); return; }
      input = r.ids;
    }
    if (!input.length) { error.textContent = 'Type a prompt first: it needs at least one token.'; prompt.focus(); return; }
    go.disabled = true;
    try {
      const k = Math.max(1, Math.min(100, Math.round(Number(topK.value) || 10)));
      const r = await api(`/v1/models/${m.id}/predict`, {method: 'POST', json: {inputs: [input], top_k: k}});
      const p = r.predictions[0];
      out.replaceChildren(...[
        p.truncated ? h('p', {class: 'note', id: 'prompt-truncated', text: `The prompt is longer than the context length: the model read its last ${ctx.toLocaleString()} tokens.`}) : null,
        h('div', {class: 'table-wrap'}, h('table', {class: 'probs next-tokens', id: 'next-tokens'},
          h('caption', {class: 'muted', text: `The ${p.next_tokens.length} most likely next tokens`}),
          // On a phone the id goes (it is the token's tooltip).
          h('thead', {}, h('tr', {}, ['Token', 'Id', 'Probability', '', ''].map((t, i) => h('th', {scope: 'col', class: i === 1 ? 'hide-narrow' : null, text: t})))),
          h('tbody', {}, p.next_tokens.map((t, i) => h('tr', {class: i === 0 ? 'top-class' : null, 'data-token-id': t.id, 'data-probability': t.probability},
            h('td', {class: 'token-cell'}, tokenText(t)),
            h('td', {class: 'num hide-narrow', text: String(t.id)}),
            h('td', {class: 'num', text: `${(t.probability * 100).toFixed(1)} %`}),
            // The bar: the probability, of the whole width (100 %).
            h('td', {class: 'prob-bar'}, h('span', {class: 'bar', role: 'img', 'aria-label': `${(t.probability * 100).toFixed(1)} %`},
              h('span', {class: 'bar-fill', style: `width:${(100 * t.probability).toFixed(2)}%`}))),
            h('td', {}, byIds || typeof t.text === 'string' ? h('button', {type: 'button', class: 'secondary small append-token',
              text: 'Append', 'aria-label': `Append token ${t.id} to the prompt`, onclick: () => append(t)}) : null))))))].filter(Boolean));
    } catch (e) { error.textContent = `Prediction failed: ${e.message}`; } finally { go.disabled = false; }
  }
  const el = h('div', {class: 'lm-try'},
    field(byIds ? 'Prompt (token ids: this model has no tokenizer)' : 'Prompt', prompt),
    count,
    h('div', {class: 'row'}, field('Most likely tokens (top k)', topK), h('div', {class: 'field'}, h('span', {class: 'lbl', text: ' '}), go)),
    error, out);
  return {el};
}

export function modelPage(root, id) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  root.append(h('p', {}, h('a', {href: '#/models', text: '← Models'})), banner);
  let blobUrl = null, gen = null;

  api(`/v1/models/${id}`).then(async (m) => {
    const download = h('p', {id: 'download'});
    const getWeights = h('button', {type: 'button', class: 'secondary', text: 'Download weights (safetensors)', onclick: async () => {
      getWeights.disabled = true;
      try {
        const resp = await api(`/v1/models/${id}/weights`, {raw: true});
        const blob = await resp.blob();
        if (blobUrl) URL.revokeObjectURL(blobUrl);
        blobUrl = URL.createObjectURL(blob);
        const a = h('a', {href: blobUrl, download: `${m.name}.safetensors`, id: 'weights-link',
          text: `Save ${m.name}.safetensors (${fmtBytes(blob.size)})`});
        download.replaceChildren(a);
        a.click();
      } catch (e) { download.textContent = `Download failed: ${e.message}`; } finally { getWeights.disabled = false; }
    }});

    const tryIt = h('section', {class: 'card', id: 'try-it'}, h('h2', {text: 'Try it'}));
    const probs = h('div', {id: 'prediction', role: 'status', 'aria-live': 'polite'});
    const predictError = h('p', {class: 'error', id: 'predict-error', role: 'alert'});
    const chosen = h('p', {class: 'muted', id: 'picked'});
    let inputs, pickedLabel = null, target = 'value';
    if (isLM(m)) tryIt.append(languageTryIt(m).el);
    else if (isImage(m.input_shape)) {
      const pad = drawingPad(() => { chosen.textContent = ''; pickedLabel = null; });
      tryIt.append(pad.el);
      if (m.dataset) {
        tryIt.append(testImages(m, pad, (it, source) => {
          pad.show(it.values);
          pickedLabel = it.label;
          chosen.textContent = `${source.test ? 'Test' : 'Training'} image ${it.index} (label ${it.label}) is in the pad.`;
          predict.click();
        }));
      }
      inputs = () => pad.pixels();
    } else if (Array.isArray(m.columns) && m.columns.length) {
      // A model trained on a CSV with typed columns takes raw rows: ask for
      // its columns, not its one-hot features.
      if (m.dataset) {
        try { target = (await api(`/v1/datasets/${m.dataset}`)).label_column || target; } catch { /* gone */ }
      }
      const form = rawColumnsForm(m.columns);
      tryIt.append(form.el);
      inputs = form.row;
    } else {
      const n = m.input_shape.reduce((a, b) => a * b, 1);
      let d = null;
      if (m.dataset) {
        try { d = await api(`/v1/datasets/${m.dataset}`); } catch { d = null; }
      }
      if (d && d.label_column) target = d.label_column;
      let names = d && d.feature_names;
      if (!names || names.length !== n) names = Array.from({length: n}, (_, i) => `feature ${i + 1}`);
      const start = await startValues(d, n);
      const boxes = names.slice(0, 256).map((f, i) => h('input', {id: `feature-${i}`, type: 'number', step: 'any',
        value: roundValue(start.values[i]), 'data-feature': f}));
      const reset = () => boxes.forEach((b, i) => { b.value = roundValue(start.values[i]); });
      tryIt.append(h('div', {class: 'row features'}, boxes.map((b, i) => field(names[i], b))),
        h('p', {class: 'muted', id: 'start-values'}, start.how, ' ',
          h('button', {type: 'button', class: 'secondary', id: 'reset-inputs', text: 'Reset to these', onclick: reset})));
      inputs = () => boxes.map((b) => Number(b.value || 0));
    }
    const predict = h('button', {type: 'button', id: 'predict', text: 'Predict', onclick: async () => {
      predictError.textContent = '';
      predict.disabled = true;
      try {
        const r = await api(`/v1/models/${id}/predict`, {method: 'POST', json: {inputs: [inputs()]}});
        const out = r.outputs[0];
        if (m.task !== 'classification') {
          // In the target's units (the server turns scaled outputs back).
          probs.replaceChildren(h('p', {}, `Predicted ${target}: `,
            h('strong', {id: 'predicted-value', 'data-value': out.map(String).join(','), text: out.map(fmtTarget).join(', ')})));
          return;
        }
        const classes = m.classes || out.map((_, i) => i);
        const best = out.indexOf(Math.max(...out));
        const truth = pickedLabel === null ? null : same(r.predictions[0], pickedLabel)
          ? h('span', {class: 'verdict right', id: 'verdict', text: ` ✓ right (label ${pickedLabel})`})
          : h('span', {class: 'verdict wrong', id: 'verdict', text: ` ✗ wrong (label ${pickedLabel})`});
        probs.replaceChildren(h('p', {}, 'Predicted class: ', h('strong', {id: 'predicted', text: String(r.predictions[0])}), truth),
          h('table', {class: 'probs', id: 'probabilities'},
            h('thead', {}, h('tr', {}, ['Class', 'Probability', ''].map((t) => h('th', {scope: 'col', text: t})))),
            h('tbody', {}, out.map((p, i) => h('tr', {class: i === best ? 'top-class' : null, 'data-class': classes[i]},
              h('td', {text: String(classes[i])}), h('td', {text: (p * 100).toFixed(1) + ' %'}),
              h('td', {class: 'bar'}, h('meter', {min: 0, max: 1, value: p, 'aria-label': `class ${classes[i]}`})))))));
      } catch (e) { predictError.textContent = `Prediction failed: ${e.message}`; } finally { predict.disabled = false; }
    }});
    if (!isLM(m)) tryIt.append(chosen, h('p', {}, predict), predictError, probs);

    const met = m.metrics || {};
    root.append(h('h1', {text: m.name}), h('div', {class: 'grid'},
      h('section', {class: 'card', id: 'model'}, kv([
        ['Id', m.id], ['Task', m.task],
        ['Job', m.job ? h('a', {href: `#/jobs/${m.job}`, text: m.job}) : 'imported'],
        ['Dataset', m.dataset ? resourceLink(api, 'datasets', m.dataset, {id: 'model-dataset-link'}) : '—'],
        ...(isLM(m) ? [['Tokenizer', tokenizerText(m.tokenizer) || '—'],
          ['Context length', `${Number(m.context_length ?? m.input_shape[0]).toLocaleString()} tokens`],
          ['Vocabulary size', Number(m.vocab_size ?? m.num_outputs).toLocaleString()]]
          : [['Input shape', JSON.stringify(m.input_shape)], ['Outputs', String(m.num_outputs)]]),
        m.classes ? ['Classes', m.classes.join(', ')] : null,
        ['Parameters', m.param_count.toLocaleString()],
        isLM(m) ? ['Val. perplexity', fmtPpl(met.val_perplexity)]
          : m.task === 'regression' ? ['RMSE', fmtNum(met.rmse)] : ['Val. accuracy', fmtNum(met.val_accuracy)],
        m.task === 'regression' ? ['R²', fmtNum(met.r2)] : null,
        [isLM(m) ? 'Val. loss (nats)' : 'Val. loss', fmtNum(met.val_loss)],
        ['Trained on', m.trained_on || '—'], ['Size', fmtBytes(m.bytes)], ['Created', fmtTime(m.created_at)],
      ]), h('p', {}, getWeights), download),
      tryIt),
      ...[generationCard(m, (g) => { gen = g; })].filter(Boolean),
      h('section', {class: 'card'}, h('h2', {text: 'Model spec'}), h('pre', {class: 'spec', text: JSON.stringify(m.spec, null, 2)})));
  }).catch((e) => { if (e.status !== 401) banner.textContent = `Could not load model ${id}: ${e.message}`; });
  return () => { if (blobUrl) URL.revokeObjectURL(blobUrl); if (gen) gen.stop(); };
}

// A language model with a tokenizer generates text (one of token ids made
// elsewhere cannot: generation takes and gives text). Its own card under
// the next-token Try it; null for other models. keep(g) is handed the form.
function generationCard(m, keep) {
  if (!isLM(m) || !m.tokenizer) return null;
  const ctx = m.context_length || (m.input_shape && m.input_shape[0]) || 0;
  const g = generateTryIt(m.id, {idPrefix: 'gen', maxTokens: ctx ? Math.max(1, Math.min(32, Math.floor(ctx / 2))) : 32,
    maxContext: ctx, note: 'Continues the prompt token by token, in this server\'s engine (POST /v2/models/{id}/generate_stream); ' +
      'the text appears as it is written. The prompt and max tokens must fit the context' + (ctx ? ` (${ctx.toLocaleString()} tokens).` : '.')});
  keep(g);
  return h('section', {class: 'card', id: 'generate'}, h('h2', {text: 'Try it: generate text'}), g.el);
}
