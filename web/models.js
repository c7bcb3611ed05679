// models.js - the models list, a model's details, its weights download and
// "try it": a drawing pad for 28x28 images or a form for tabular features,
// with class probabilities from POST /v1/models/{id}/predict.
import {api} from './api.js';
import {h, field, fmtBytes, fmtNum, fmtTime, kv} from './util.js';

export function modelsPage(root) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  const tbody = h('tbody', {id: 'models-body'});
  root.append(h('h1', {text: 'Models'}), banner, h('div', {class: 'table-wrap'}, h('table', {id: 'models'},
    h('thead', {}, h('tr', {}, ['Name', 'Task', 'Job', 'Parameters', 'Val. accuracy', 'Created']
      .map((t) => h('th', {scope: 'col', text: t})))), tbody)));
  api('/v1/models?limit=200').then((doc) => {
    tbody.replaceChildren(...doc.items.map((m) => h('tr', {'data-model-id': m.id},
      h('td', {}, h('a', {href: `#/models/${m.id}`, text: m.name})),
      h('td', {text: m.task}),
      h('td', {}, m.job ? h('a', {href: `#/jobs/${m.job}`, text: m.job}) : 'imported'),
      h('td', {text: m.param_count.toLocaleString()}),
      h('td', {text: fmtNum(m.metrics && m.metrics.val_accuracy)}),
      h('td', {text: fmtTime(m.created_at)}))));
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

// "Pick a test image": pages of the model's dataset as thumbnail buttons;
// choosing one draws it into the pad and predicts.
const PICK_PAGE = 8;
function testImages(m, pad, choose) {
  const list = h('div', {class: 'thumbs', id: 'test-images', role: 'group', 'aria-label': `Test images from dataset ${m.dataset}`});
  const note = h('p', {class: 'muted', id: 'pick-status', role: 'status'});
  let offset = 0, unitSet = false;
  const load = async () => {
    pick.disabled = true;
    note.textContent = 'Loading test images…';
    try {
      let doc = await api(`/v1/datasets/${m.dataset}/examples?offset=${offset}&limit=${PICK_PAGE}`);
      if (!doc.items.length && offset) { offset = 0; doc = await api(`/v1/datasets/${m.dataset}/examples?limit=${PICK_PAGE}`); }
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
      pick.textContent = 'Other test images';
      note.textContent = items.length ? `Examples ${doc.offset + 1}–${doc.offset + doc.items.length} of ${doc.total} from the model's dataset. Choose one to predict it.` : 'The dataset has no 28x28 examples.';
      list.replaceChildren(...items.map((it) => {
        const c = h('canvas', {width: 28, height: 28, class: 'thumb', 'aria-hidden': 'true'});
        paint(c.getContext('2d'), it.values, pad.unit());
        return h('button', {type: 'button', class: 'thumb-button', 'data-index': it.index,
          'aria-label': `Test image ${it.index}, label ${it.label}`,
          onclick: () => choose(it)}, c, h('span', {class: 'thumb-label', text: String(it.label)}));
      }));
    } catch (e) {
      note.textContent = e.status === 404 ? `The dataset ${m.dataset} is gone; draw instead.` : `Could not load test images: ${e.message}`;
    } finally { pick.disabled = false; }
  };
  const pick = h('button', {type: 'button', class: 'secondary', id: 'pick-image', text: 'Pick a test image', onclick: load});
  return h('div', {class: 'pick'}, h('p', {}, pick), note, list);
}

export function modelPage(root, id) {
  const banner = h('p', {class: 'banner', role: 'alert'});
  root.append(h('p', {}, h('a', {href: '#/models', text: '← Models'})), banner);
  let blobUrl = null;

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
    let inputs;
    if (isImage(m.input_shape)) {
      const pad = drawingPad(() => { chosen.textContent = ''; });
      tryIt.append(pad.el);
      if (m.dataset) {
        tryIt.append(testImages(m, pad, (it) => {
          pad.show(it.values);
          chosen.textContent = `Test image ${it.index} (label ${it.label}) is in the pad.`;
          predict.click();
        }));
      }
      inputs = () => pad.pixels();
    } else {
      const n = m.input_shape.reduce((a, b) => a * b, 1);
      let names = null;
      if (m.dataset) {
        try { names = (await api(`/v1/datasets/${m.dataset}`)).feature_names || null; } catch { names = null; }
      }
      if (!names || names.length !== n) names = Array.from({length: n}, (_, i) => `feature ${i + 1}`);
      const boxes = names.slice(0, 256).map((f, i) => h('input', {id: `feature-${i}`, type: 'number', step: 'any', value: 0, 'data-feature': f}));
      tryIt.append(h('div', {class: 'row'}, boxes.map((b, i) => field(names[i], b))));
      inputs = () => boxes.map((b) => Number(b.value || 0));
    }
    const predict = h('button', {type: 'button', id: 'predict', text: 'Predict', onclick: async () => {
      predictError.textContent = '';
      predict.disabled = true;
      try {
        const r = await api(`/v1/models/${id}/predict`, {method: 'POST', json: {inputs: [inputs()]}});
        const out = r.outputs[0];
        if (m.task !== 'classification') {
          probs.replaceChildren(h('p', {text: `Predicted: ${out.map((x) => fmtNum(x)).join(', ')}`}));
          return;
        }
        const classes = m.classes || out.map((_, i) => i);
        const best = out.indexOf(Math.max(...out));
        probs.replaceChildren(h('p', {}, 'Predicted class: ', h('strong', {id: 'predicted', text: String(r.predictions[0])})),
          h('table', {class: 'probs', id: 'probabilities'},
            h('thead', {}, h('tr', {}, ['Class', 'Probability', ''].map((t) => h('th', {scope: 'col', text: t})))),
            h('tbody', {}, out.map((p, i) => h('tr', {class: i === best ? 'top-class' : null, 'data-class': classes[i]},
              h('td', {text: String(classes[i])}), h('td', {text: (p * 100).toFixed(1) + ' %'}),
              h('td', {class: 'bar'}, h('meter', {min: 0, max: 1, value: p, 'aria-label': `class ${classes[i]}`})))))));
      } catch (e) { predictError.textContent = `Prediction failed: ${e.message}`; } finally { predict.disabled = false; }
    }});
    tryIt.append(chosen, h('p', {}, predict), predictError, probs);

    const met = m.metrics || {};
    root.append(h('h1', {text: m.name}), h('div', {class: 'grid'},
      h('section', {class: 'card', id: 'model'}, kv([
        ['Id', m.id], ['Task', m.task],
        ['Job', m.job ? h('a', {href: `#/jobs/${m.job}`, text: m.job}) : 'imported'],
        ['Dataset', m.dataset ? h('a', {href: `#/datasets/${m.dataset}`, text: m.dataset}) : '—'],
        ['Input shape', JSON.stringify(m.input_shape)], ['Outputs', String(m.num_outputs)],
        m.classes ? ['Classes', m.classes.join(', ')] : null,
        ['Parameters', m.param_count.toLocaleString()],
        ['Val. accuracy', fmtNum(met.val_accuracy)], ['Val. loss', fmtNum(met.val_loss)],
        ['Trained on', m.trained_on || '—'], ['Size', fmtBytes(m.bytes)], ['Created', fmtTime(m.created_at)],
      ]), h('p', {}, getWeights), download),
      tryIt),
      h('section', {class: 'card'}, h('h2', {text: 'Model spec'}), h('pre', {text: JSON.stringify(m.spec, null, 2)})));
  }).catch((e) => { if (e.status !== 401) banner.textContent = `Could not load model ${id}: ${e.message}`; });
  return () => { if (blobUrl) URL.revokeObjectURL(blobUrl); };
}
