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

function drawingPad(onReady) {
  const canvas = h('canvas', {class: 'pad', id: 'pad', width: 28, height: 28, tabindex: 0,
    role: 'img', 'aria-label': 'Drawing pad, 28 by 28 pixels: draw with the mouse, a finger or a pen'});
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const clear = () => { ctx.fillStyle = '#000'; ctx.fillRect(0, 0, 28, 28); };
  clear();
  let drawing = false;
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    return [(e.clientX - r.left) * 28 / r.width, (e.clientY - r.top) * 28 / r.height];
  };
  const dot = (e) => {
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
    const d = ctx.getImageData(0, 0, 28, 28).data;
    const out = [];
    for (let i = 0; i < 28 * 28; i++) out.push(d[i * 4]);
    return out;
  };
  return {el: h('div', {class: 'draw'}, canvas, h('div', {},
    h('p', {class: 'muted', text: 'Draw light on dark (pixel values 0–255).'}),
    h('p', {}, h('button', {type: 'button', class: 'secondary', text: 'Clear', onclick: clear}), ' ',
      h('button', {type: 'button', class: 'secondary', text: 'Sample shape', onclick: sample})))), pixels};
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
    let inputs;
    if (isImage(m.input_shape)) {
      const pad = drawingPad();
      tryIt.append(pad.el);
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
    tryIt.append(h('p', {}, predict), predictError, probs);

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
