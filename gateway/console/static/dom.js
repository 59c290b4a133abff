// DOM helpers. Everything shown from the API is untrusted text: it only
// ever becomes a text node or an attribute value from a fixed list, never
// markup. Links are hash routes built here, never an href from data.

const ATTRS = new Set([
  'type', 'name', 'placeholder', 'id', 'for', 'title', 'autocomplete', 'role',
  'aria-live', 'aria-label', 'spellcheck', 'colspan', 'step', 'min', 'max', 'data-test',
]);
const PROPS = new Set(['value', 'checked', 'disabled', 'required', 'hidden', 'selected']);

// h builds an element: h('td', {class: 'num'}, 'text', otherNode).
// String children become text nodes; null and false children are skipped.
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = String(v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'href') {
      const s = String(v);
      if (!s.startsWith('#/') && s !== '#') throw new Error('links must be hash routes');
      el.setAttribute('href', s); // allowed: a hash route, checked above
    } else if (PROPS.has(k)) el[k] = v;
    else if (ATTRS.has(k)) el.setAttribute(k, String(v));
    else throw new Error('attribute not allowed: ' + k);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// text sets el's content to the literal string s.
export function text(el, s) {
  el.textContent = s === null || s === undefined ? '' : String(s);
  return el;
}

// clear removes el's children.
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// route builds a hash route from path parts (each encoded) and an optional
// query object (empty values left out).
export function route(parts, query) {
  let r = '#/' + parts.map((p) => encodeURIComponent(String(p))).join('/');
  if (query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
    const s = q.toString();
    if (s) r += '?' + s;
  }
  return r;
}

// link is an <a> to a hash route with literal text.
export function link(parts, label, query) {
  return h('a', { href: route(parts, query) }, label);
}

const STATES = new Set(['pending', 'delivering', 'succeeded', 'failed', 'cancelled',
  'running', 'completed', 'closed', 'open', 'half-open', 'paused', 'disabled', 'enabled']);

// badge shows a state; its class comes from a fixed list, never from data.
export function badge(state) {
  const s = String(state ?? '');
  return h('span', { class: STATES.has(s) ? 'badge badge-' + s : 'badge' }, s || '—');
}

// fmtTime shows an RFC 3339 time as local time with its UTC form as title.
export function fmtTime(s) {
  if (!s) return h('span', { class: 'muted' }, '—');
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return h('span', null, String(s));
  return h('time', { title: String(s) }, d.toLocaleString());
}

// dash shows "—" for an absent value.
export function dash(v) {
  return v === undefined || v === null || v === '' ? '—' : String(v);
}

// table builds a table from column headings and rows of cells.
export function table(headings, rows, empty) {
  if (!rows.length) return h('p', { class: 'muted' }, empty || 'Nothing here.');
  return h('div', { class: 'table-wrap' }, h('table', null,
    h('thead', null, h('tr', null, headings.map((t) => h('th', null, t)))),
    h('tbody', null, rows.map((cells) => h('tr', null, cells.map((c) => (c instanceof Node && c.tagName === 'TD') ? c : h('td', null, c)))))));
}

// kv builds a definition list from [label, value] pairs.
export function kv(pairs) {
  return h('dl', { class: 'kv' }, pairs.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

// errorBox shows an API error: its problem detail, as text.
export function errorBox(err) {
  const detail = err && err.detail ? err.detail : String(err && err.message ? err.message : err);
  const title = err && err.status === 404 ? 'Not found' : (err && err.title) || 'Error';
  return h('div', { class: 'error', role: 'alert' }, h('strong', null, title + ': '), detail);
}

// datetime-local values (local time, no zone) to RFC 3339 UTC and back.
export function localToRFC3339(v) {
  if (!v) return '';
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? '' : d.toISOString();
}
export function rfc3339ToLocal(v) {
  if (!v) return '';
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}
