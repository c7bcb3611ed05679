// api.js - the REST API with the signed-in key (sessionStorage; always sent
// as an Authorization header, never in a URL).
const KEY = 'trainyard.key';

export const getKey = () => sessionStorage.getItem(KEY);
export const setKey = (k) => sessionStorage.setItem(KEY, k);
export function clearKey() { sessionStorage.removeItem(KEY); }

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
    this.field = this.problem.field || null;
  }
}

// A 401 after signing in means the key was revoked: back to the sign-in
// page. The sign-in's own try (signin) is answered by its form instead, so
// a mistyped key is not told to "sign in again".
function unauthorized() {
  clearKey();
  window.dispatchEvent(new CustomEvent('ty-signed-out', {detail: 'The server no longer accepts this key (401); sign in again.'}));
}

async function problemOf(resp) {
  try { return await resp.json(); } catch { return {detail: `${resp.status} ${resp.statusText}`}; }
}

// fetch with the key. json: a body to send as JSON. raw: return the Response.
// signin: a 401 only throws (the sign-in form says the key was not accepted).
export async function api(path, {method = 'GET', json, headers = {}, signal, raw = false, signin = false} = {}) {
  const h = {Authorization: 'Bearer ' + getKey(), ...headers};
  let body;
  if (json !== undefined) { h['Content-Type'] = 'application/json'; body = JSON.stringify(json); }
  const resp = await fetch(path, {method, headers: h, body, signal, cache: 'no-store'});
  if (resp.status === 401) { if (!signin) unauthorized(); throw new ApiError(401, await problemOf(resp)); }
  if (!resp.ok) throw new ApiError(resp.status, await problemOf(resp));
  if (raw) return resp;
  return resp.status === 204 ? null : resp.json();
}

// A multipart upload with progress (fetch has no upload progress events).
export function upload(path, form, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', path);
    xhr.setRequestHeader('Authorization', 'Bearer ' + getKey());
    xhr.upload.addEventListener('progress', (e) => {
      if (e.lengthComputable) onProgress(e.loaded / e.total);
    });
    xhr.addEventListener('load', () => {
      let doc = null;
      try { doc = JSON.parse(xhr.responseText); } catch { doc = {detail: xhr.responseText}; }
      if (xhr.status === 401) unauthorized();
      if (xhr.status >= 200 && xhr.status < 300) resolve(doc);
      else reject(new ApiError(xhr.status, doc));
    });
    xhr.addEventListener('error', () => reject(new ApiError(0, {detail: 'the upload failed: network error'})));
    xhr.send(form);
  });
}
