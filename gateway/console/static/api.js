// The admin API client: every call sends the signed-in token; a 401 signs
// out with a message; a problem+json answer becomes an ApiError whose
// detail is shown as text.

const TOKEN = 'hookgate.token';
let notice = '';

export function token() {
  return sessionStorage.getItem(TOKEN) || '';
}

export function signIn(t) {
  sessionStorage.clear(); // nothing from a previous sign-in is kept
  sessionStorage.setItem(TOKEN, t);
}

// signOut forgets the token and everything this session stored, and goes
// to the sign-in page, showing message there.
export function signOut(message) {
  sessionStorage.clear();
  notice = message || '';
  if (location.hash !== '#/signin') location.hash = '#/signin';
  else window.dispatchEvent(new HashChangeEvent('hashchange'));
}

// takeNotice returns the sign-in page's message once.
export function takeNotice() {
  const n = notice;
  notice = '';
  return n;
}

export class ApiError extends Error {
  constructor(status, title, detail) {
    super(detail || title || 'HTTP ' + status);
    this.status = status;
    this.title = title;
    this.detail = detail;
  }
}

// uuid is an Idempotency-Key: crypto.randomUUID where the page is a secure
// context (https, or loopback), else the same from getRandomValues.
export function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = Array.from(b, (v) => v.toString(16).padStart(2, '0')).join('');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

// api calls the admin API. opts: query (object; empty values left out),
// body (sent as JSON), idempotent (sends a fresh Idempotency-Key), quiet401
// (throw on 401 without signing out). Returns {status, data}.
export async function api(method, path, opts = {}) {
  const t = token();
  if (!t) {
    signOut('');
    throw new ApiError(401, 'Unauthorized', 'not signed in');
  }
  let url = '/api/v1' + path;
  if (opts.query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.query)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
    const s = q.toString();
    if (s) url += '?' + s;
  }
  const headers = { Authorization: 'Bearer ' + t, Accept: 'application/json, application/problem+json' };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.idempotent) headers['Idempotency-Key'] = uuid();
  let res;
  try {
    res = await fetch(url, {
      method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error', referrerPolicy: 'no-referrer',
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    });
  } catch (e) {
    throw new ApiError(0, 'Network error', 'the gateway did not answer: ' + e.message);
  }
  const raw = await res.text();
  let data = null;
  try { data = raw ? JSON.parse(raw) : null; } catch { data = null; }
  if (res.status === 401) {
    if (!opts.quiet401) signOut('That token was not accepted.');
    throw new ApiError(401, 'Unauthorized', 'That token was not accepted.');
  }
  if (!res.ok) {
    const title = data && typeof data.title === 'string' ? data.title : res.statusText || 'HTTP ' + res.status;
    const detail = data && typeof data.detail === 'string' ? data.detail : raw.slice(0, 300) || title;
    throw new ApiError(res.status, title, detail);
  }
  return { status: res.status, data };
}
