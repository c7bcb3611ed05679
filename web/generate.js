// generate.js - "Generate" for a language model: a prompt, max_tokens,
// temperature and seed, and the text as it streams from
// POST /v2/models/{name}/generate_stream (name: the model's id, or a
// deployment's name, which generates on its replicas). An EventSource
// cannot POST, so the reply is read with fetch() and its body as a stream
// (the key in the Authorization header, as every call: api.js). Stop aborts
// the fetch; the server stops the generation within a token.
//
// The model's text is untrusted: it only ever goes into the page as text
// nodes (textContent), never as HTML. A 4xx before the stream is a
// problem+json, shown beside the input its `field` names; an error after
// the first piece is `data: {"error"}`, shown under the text kept so far.
import {api} from './api.js';
import {h, field, setFieldError} from './util.js';

// The SSE events of a response body, one parsed `data:` object each (a
// comment or a block without data is skipped; a data line that is not
// JSON is an error). onChunk is told of each network read.
export async function* sseData(body, onChunk = () => {}) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      onChunk();
      buf = (buf + decoder.decode(value, {stream: true})).replace(/\r\n?/g, '\n');
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = block.split('\n').filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).replace(/^ /, ''));
        if (!data.length) continue;
        let doc;
        try { doc = JSON.parse(data.join('\n')); } catch { throw new Error(`the server sent an event that is not JSON: ${data.join(' ').slice(0, 80)}`); }
        yield doc;
      }
    }
  } finally { reader.releaseLock(); }
}

const FINISH = {length: 'length (max_tokens reached)', stop: 'stop (a stop string or the end-of-text token)'};

// The generation form for `target` (what goes in the URL: a model id or a
// deployment's name). idPrefix keeps two on one page apart. Returns
// {el, stop()}: stop() aborts a generation in progress (the page's cleanup).
export function generateTryIt(target, {idPrefix = 'gen', maxTokens = 32, maxContext = 0, note = ''} = {}) {
  const id = (s) => `${idPrefix}-${s}`;
  const prompt = h('textarea', {id: id('prompt'), rows: 3, spellcheck: 'false',
    placeholder: 'Type a prompt, then Generate (Ctrl+Enter)'});
  const max = h('input', {id: id('max-tokens'), type: 'number', min: 1, max: maxContext || 4096, value: maxTokens});
  const temp = h('input', {id: id('temperature'), type: 'number', min: 0, max: 10, step: 'any', value: 0.8});
  const seed = h('input', {id: id('seed'), type: 'number', min: 0, step: 1, placeholder: 'random'});
  const go = h('button', {type: 'submit', id: id('start'), text: 'Generate'});
  const stopBtn = h('button', {type: 'button', class: 'secondary', id: id('stop'), text: 'Stop', disabled: true});
  const error = h('p', {class: 'error', id: id('error'), role: 'alert'});
  const shownPrompt = h('span', {class: 'gen-prompt', id: id('shown-prompt')});
  const text = h('span', {class: 'gen-text', id: id('text')});
  const caret = h('span', {class: 'gen-caret', 'aria-hidden': 'true', hidden: true, text: '▍'});
  const output = h('div', {class: 'gen-output', id: id('output'), 'aria-live': 'polite', 'data-state': 'idle',
    'data-pieces': '0', 'data-chunks': '0'}, shownPrompt, text, caret);
  const status = h('p', {class: 'muted', id: id('status'), role: 'status', text: 'Nothing generated yet.'});
  const controlOf = {text_input: prompt, 'parameters.max_tokens': max, 'parameters.temperature': temp, 'parameters.seed': seed};
  let ctrl = null;

  const setState = (s) => {
    output.dataset.state = s;
    const busy = s === 'streaming';
    go.disabled = busy;
    stopBtn.disabled = !busy;
    caret.hidden = !busy;
  };

  function body() {
    const n = (el) => (el.value.trim() === '' ? undefined : Number(el.value));
    const parameters = {max_tokens: n(max), temperature: n(temp), seed: n(seed)};
    for (const k of Object.keys(parameters)) if (parameters[k] === undefined) delete parameters[k];
    return {text_input: prompt.value, parameters};
  }

  async function generate() {
    if (ctrl) return;
    error.textContent = '';
    for (const c of Object.values(controlOf)) setFieldError(c, '');
    if (!prompt.value) { setFieldError(prompt, 'Type a prompt first.'); prompt.focus(); return; }
    const req = body();
    shownPrompt.textContent = req.text_input;
    text.replaceChildren();
    delete output.dataset.finishReason;
    delete output.dataset.completionTokens;
    output.dataset.pieces = '0';
    output.dataset.chunks = '0';
    status.textContent = 'Waiting for the first token…';
    setState('streaming');
    ctrl = new AbortController();
    const mine = ctrl;
    let pieces = 0, chunks = 0, last = null;
    const t0 = performance.now();
    try {
      const resp = await api(`/v2/models/${encodeURIComponent(target)}/generate_stream`,
        {method: 'POST', json: req, signal: mine.signal, raw: true, headers: {Accept: 'text/event-stream'}});
      if (!resp.body) throw new Error('the browser gave no stream to read');
      for await (const ev of sseData(resp.body, () => { output.dataset.chunks = String(++chunks); })) {
        if (typeof ev.error === 'string') throw Object.assign(new Error(ev.error), {afterStart: true});
        if (typeof ev.text_output === 'string' && ev.text_output !== '') {
          // One text node per piece: never parsed as HTML.
          text.append(document.createTextNode(ev.text_output));
          output.dataset.pieces = String(++pieces);
          status.textContent = `Generating… ${pieces} piece${pieces === 1 ? '' : 's'} so far.`;
        }
        if (ev.finish_reason) last = ev;
      }
      if (!last) throw Object.assign(new Error('the stream ended before its last event (the connection dropped?)'), {afterStart: true});
      output.dataset.finishReason = last.finish_reason;
      output.dataset.completionTokens = String(last.completion_tokens ?? '');
      const secs = (performance.now() - t0) / 1000;
      status.textContent = `Done: finish reason ${FINISH[last.finish_reason] || last.finish_reason}; ` +
        `${last.prompt_tokens ?? '?'} prompt tokens, ${last.completion_tokens ?? '?'} generated ` +
        `in ${pieces} piece${pieces === 1 ? '' : 's'}, ${secs.toFixed(2)} s.`;
      setState('done');
    } catch (e) {
      if (mine.signal.aborted) {
        status.textContent = `Stopped after ${pieces} piece${pieces === 1 ? '' : 's'}: the server stops generating.`;
        setState('stopped');
      } else {
        const el = e.field && controlOf[e.field];
        if (el) setFieldError(el, e.message);
        const what = e.status ? `Refused (${e.status})` : e.afterStart || pieces ? `Failed after ${pieces} piece${pieces === 1 ? '' : 's'}` : 'Failed';
        error.textContent = `${what}: ${e.field && !el ? `${e.field}: ` : ''}${e.message}`;
        status.textContent = pieces ? 'The text above is what came before the error.' : '';
        setState('error');
      }
    } finally { if (ctrl === mine) ctrl = null; }
  }

  stopBtn.addEventListener('click', () => { if (ctrl) ctrl.abort(); });
  prompt.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); generate(); } });
  const form = h('form', {class: 'gen-try', id: id('form'), novalidate: true, onsubmit: (e) => { e.preventDefault(); generate(); }},
    note ? h('p', {class: 'muted', text: note}) : null,
    field('Prompt', prompt),
    h('div', {class: 'row gen-params'}, field('Max tokens', max), field('Temperature (0: greedy)', temp),
      field('Seed (empty: random)', seed)),
    h('p', {class: 'row gen-buttons'}, go, stopBtn),
    error, output, status);
  return {el: form, stop() { if (ctrl) ctrl.abort(); }};
}
