// live.js - server-sent events read with fetch() and a ReadableStream (an
// EventSource cannot send the Authorization header, and the key never goes
// into a URL). Reconnects with Last-Event-ID; when the server has no events
// endpoint (404) it falls back to polling every `interval` ms. poll() is
// plain polling for what has no event stream (deployments), paused while
// the tab is hidden.
import {getKey} from './api.js';

let modeListener = () => {};
export function onMode(fn) { modeListener = fn; }

// live(path, {onEvent(type, data, id), onReset(), onPoll(), final, interval})
// onPoll is called on every tick in polling mode; onReset when the server
// says the stream lost events (the page refetches). final: an event type
// after which the server closes the stream for good. onOpen: each time a
// stream opens (the page refetches what it may have missed before it).
// Returns {stop()}.
export function live(path, {onEvent = () => {}, onReset = () => {}, onPoll = () => {}, onOpen = () => {}, final = null, interval = 2000} = {}) {
  let stopped = false, lastId = null, timer = null, backoff = 1000, done = false;
  const ctrl = new AbortController();

  function poll() {
    modeListener('polling', interval);
    const tick = async () => {
      if (stopped) return;
      try { await onPoll(); } catch { /* the page shows its own errors */ }
      if (!stopped) timer = setTimeout(tick, interval);
    };
    timer = setTimeout(tick, interval);
  }

  function dispatch(block) {
    let type = 'message', data = [], id = null;
    for (const line of block.split('\n')) {
      if (!line || line.startsWith(':')) continue;   // a comment (keepalive)
      const i = line.indexOf(':');
      const name = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? '' : line.slice(i + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (name === 'event') type = value;
      else if (name === 'data') data.push(value);
      else if (name === 'id') id = value;
    }
    if (id !== null) lastId = id;
    if (!data.length && type === 'message') return;
    if (type === 'reset') { onReset(); return; }
    let doc = null;
    try { doc = data.length ? JSON.parse(data.join('\n')) : null; } catch { return; }
    onEvent(type, doc, id);
    if (final && type === final) done = true;
  }

  async function connect() {
    if (stopped) return;
    try {
      const headers = {Authorization: 'Bearer ' + getKey(), Accept: 'text/event-stream'};
      if (lastId !== null) headers['Last-Event-ID'] = lastId;
      const resp = await fetch(path, {headers, signal: ctrl.signal, cache: 'no-store'});
      const type = resp.headers.get('Content-Type') || '';
      if (resp.status === 404 && !type.includes('event-stream')) { poll(); return; }
      if (resp.status === 401) { window.dispatchEvent(new CustomEvent('ty-signed-out')); return; }
      if (!resp.ok || !resp.body || !type.includes('text/event-stream')) throw new Error('no stream');
      modeListener('live');
      backoff = 1000;
      onOpen();
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const {value, done: end} = await reader.read();
        if (end) break;
        buf = (buf + decoder.decode(value, {stream: true})).replace(/\r\n/g, '\n');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          dispatch(block);
        }
      }
    } catch {
      if (stopped) return;
    }
    if (stopped || done) return;
    modeListener('reconnecting');
    timer = setTimeout(connect, backoff);
    backoff = Math.min(backoff * 2, 15000);
  }

  connect();
  return {stop() { stopped = true; clearTimeout(timer); ctrl.abort(); }};
}

// poll(fn, {interval, mode}): calls fn now and then `interval` ms after each
// call ends (calls never overlap), while the page is visible: a hidden tab
// stops polling and a visible one resumes at once. mode: whether the live
// indicator says "polling" (false for a page that also has a stream).
// Returns {stop(), now()}; now() polls at once (after an action); stop()
// returns a promise of the end of a call in progress (before a DELETE, say,
// so that no poll can race it).
export function poll(fn, {interval = 1000, mode = true} = {}) {
  let stopped = false, timer = null, running = null, again = false;
  async function tick() {
    timer = null;
    if (stopped || document.hidden) return;
    running = (async () => { try { await fn(); } catch { /* the page shows its own errors */ } })();
    await running;
    running = null;
    if (stopped || document.hidden) return;
    if (again) { again = false; tick(); return; }
    timer = setTimeout(tick, interval);
  }
  const onVisible = () => { if (!document.hidden && !timer && !running && !stopped) tick(); };
  document.addEventListener('visibilitychange', onVisible);
  if (mode) modeListener('polling', interval);
  tick();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisible);
      return running || Promise.resolve();
    },
    now() {
      if (stopped) return;
      if (running) { again = true; return; }
      clearTimeout(timer);
      tick();
    },
  };
}
