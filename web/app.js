// app.js - the dashboard shell: sign-in, hash routes, the live indicator.
import {api, getKey, setKey, clearKey} from './api.js';
import {onMode} from './live.js';
import {h, field} from './util.js';
import {jobsPage} from './jobs.js';
import {jobPage} from './job.js';
import {devicesPage} from './devices.js';
import {datasetsPage, datasetPage} from './datasets.js';
import {newJobPage} from './newjob.js';
import {modelsPage, modelPage} from './models.js';
import {deploymentsPage, deploymentPage} from './deployments.js';
import {usagePage} from './usage.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const signout = document.getElementById('signout');
const liveEl = document.getElementById('live');
let cleanup = null;
let signinMessage = '';

const routes = [
  [/^#\/jobs\/([^/]+)$/, jobPage],
  [/^#\/jobs$/, jobsPage],
  [/^#\/new(?:\?(.*))?$/, newJobPage],
  [/^#\/datasets\/([^/]+)$/, datasetPage],
  [/^#\/datasets$/, datasetsPage],
  [/^#\/models\/([^/]+)$/, modelPage],
  [/^#\/models$/, modelsPage],
  [/^#\/deployments\/([^/]+)$/, deploymentPage],
  [/^#\/deployments$/, deploymentsPage],
  [/^#\/devices$/, devicesPage],
  [/^#\/usage$/, usagePage],
];

onMode((mode, interval = 2000) => {
  liveEl.dataset.mode = mode;
  liveEl.textContent = mode === 'live' ? '● live' : mode === 'polling' ? `○ polling every ${interval / 1000} s` : '… reconnecting';
});

function signinPage(root) {
  const key = h('input', {id: 'key', type: 'password', autocomplete: 'current-password', required: true});
  const err = h('p', {class: 'banner', id: 'signin-error', role: 'alert', text: signinMessage});
  signinMessage = '';
  const button = h('button', {type: 'submit', text: 'Sign in'});
  const form = h('form', {class: 'card', id: 'signin', onsubmit: async (e) => {
    e.preventDefault();
    err.textContent = '';
    button.disabled = true;
    setKey(key.value.trim());
    try {
      await api('/v1/jobs?limit=1', {signin: true});
      location.hash = '#/jobs';
    } catch (x) {
      clearKey();
      err.textContent = x.status === 401 ? 'That key was not accepted; check it and try again.'
                                         : `Could not reach the server: ${x.message}`;
    } finally { button.disabled = false; }
  }},
  h('h1', {text: 'Sign in'}),
  h('p', {class: 'muted', text: 'Paste an API key (the admin key is in the data folder\'s admin.key). It stays in this tab only (sessionStorage).'}),
  err, field('API key', key), button);
  root.append(form);
  key.focus();
}

function render() {
  if (cleanup) { try { cleanup(); } catch { /* ignore */ } cleanup = null; }
  main.replaceChildren();
  const hash = location.hash || '#/jobs';
  const signedIn = !!getKey();
  nav.hidden = signout.hidden = !signedIn;
  if (!signedIn) { liveEl.textContent = ''; signinPage(main); return; }
  for (const a of nav.querySelectorAll('a')) {
    const here = hash === a.getAttribute('href') || hash.startsWith(a.getAttribute('href') + '/');
    if (here) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  navHints();
  for (const [re, page] of routes) {
    const m = hash.match(re);
    if (m) {
      cleanup = page(main, ...m.slice(1).map((x) => (x === undefined ? undefined : decodeURIComponent(x)))) || null;
      return;
    }
  }
  location.replace('#/jobs');
}

// The server's own state (GET /readyz, no key needed): with --executor
// slurm, an unreachable slurmrestd pauses new training jobs; say so on every
// page until it answers again.
const serverStatus = document.getElementById('server-status');
async function checkServer() {
  try {
    const r = await fetch('/readyz', {cache: 'no-store'});
    const body = await r.json().catch(() => ({}));
    if (!r.ok) serverStatus.textContent = `The server is not ready: ${body.detail || r.status}`;
    else if (body.status === 'degraded' && body.executor) {
      serverStatus.textContent = body.executor.detail || 'New training jobs cannot be started now.';
    } else serverStatus.textContent = '';
  } catch { /* the live indicator says when the server is unreachable */ }
}
checkServer();
setInterval(checkServer, 10000);

// On a phone the nav is one line that scrolls sideways: an arrow at an edge
// (.nav-more-left, .nav-more-right) shows while links are hidden past it.
// Tapping an arrow scrolls that way. The arrows are hints for the eye only:
// every link is in the nav and reachable with Tab.
const navWrap = nav.parentElement;
function navHints() {
  const hidden = nav.scrollWidth - nav.clientWidth;
  navWrap.classList.toggle('more-left', !nav.hidden && hidden > 1 && nav.scrollLeft > 1);
  navWrap.classList.toggle('more-right', !nav.hidden && hidden > 1 && nav.scrollLeft < hidden - 1);
}
nav.addEventListener('scroll', navHints, {passive: true});
window.addEventListener('resize', navHints);
for (const [cls, dir] of [['.nav-more-left', -1], ['.nav-more-right', 1]]) {
  navWrap.querySelector(cls).addEventListener('click', () => nav.scrollBy({left: dir * nav.clientWidth * 0.6, behavior: 'smooth'}));
}

signout.addEventListener('click', () => { clearKey(); location.hash = '#/signin'; render(); });
window.addEventListener('ty-signed-out', (e) => { signinMessage = e.detail || ''; render(); });
window.addEventListener('hashchange', () => { render(); main.focus({preventScroll: true}); });
render();
