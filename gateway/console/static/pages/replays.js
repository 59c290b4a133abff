// Bulk replays: start one (POST /api/v1/replays), follow the jobs started
// in this tab (their ids in sessionStorage) and, when the gateway has it,
// GET /api/v1/replays.
import { api } from '../api.js';
import { h, table, errorBox, badge, dash, fmtTime, localToRFC3339 } from '../dom.js';

const KEY = 'hookgate.replays';

function started() {
  try {
    const v = JSON.parse(sessionStorage.getItem(KEY) || '[]');
    return Array.isArray(v) ? v.filter((x) => typeof x === 'string') : [];
  } catch {
    return [];
  }
}

function remember(id) {
  const ids = started().filter((x) => x !== id);
  ids.unshift(id);
  sessionStorage.setItem(KEY, JSON.stringify(ids.slice(0, 50)));
}

function jobRows(jobs) {
  return jobs.map((j) => [
    h('td', { class: 'mono' }, dash(j.id)),
    badge(j.state),
    h('td', { class: 'num' }, dash(j.matched)),
    h('td', { class: 'num' }, dash(j.enqueued)),
    h('td', { class: 'small' }, ['source', 'endpoint', 'status', 'since', 'until'].filter((k) => j[k]).map((k) => `${k}=${j[k]}`).join(' ') || 'all'),
    fmtTime(j.created_at),
    dash(j.error),
  ]);
}
const HEADINGS = ['Job', 'State', 'Matched', 'Enqueued', 'Filters', 'Started', 'Error'];

export default async function replays(view) {
  view.appendChild(h('h1', null, 'Bulk replays'));
  const field = (name, label, input) => h('div', { class: 'field' }, h('label', { for: 'r-' + name }, label), input);
  const text = (name, placeholder) => h('input', { id: 'r-' + name, name, type: 'text', placeholder, autocomplete: 'off', spellcheck: 'false' });
  const statusSel = h('select', { id: 'r-status', name: 'status' },
    ['', 'pending', 'delivering', 'succeeded', 'failed', 'cancelled'].map((s) => h('option', { value: s }, s || 'any')));
  const form = h('form', { class: 'filters card', onsubmit: submit },
    field('source', 'Source', text('source', 'any')),
    field('endpoint', 'Endpoint', text('endpoint', 'any')),
    field('status', 'Delivery status', statusSel),
    field('since', 'Since', h('input', { id: 'r-since', name: 'since', type: 'datetime-local' })),
    field('until', 'Until', h('input', { id: 'r-until', name: 'until', type: 'datetime-local' })),
    h('div', { class: 'field actions' }, h('button', { type: 'submit', class: 'primary' }, 'Start replay')));
  const result = h('div', { class: 'status', role: 'status', 'aria-live': 'polite' });
  const mine = h('div', { id: 'my-replays' });
  const all = h('div', { id: 'all-replays' });
  view.append(form, result, h('h2', null, 'Started in this tab'), mine, all);

  async function submit(ev) {
    ev.preventDefault();
    const v = (n) => form.elements[n].value.trim();
    const body = {};
    for (const k of ['source', 'endpoint', 'status']) if (v(k)) body[k] = v(k);
    for (const k of ['since', 'until']) if (v(k)) body[k] = localToRFC3339(v(k));
    try {
      const job = (await api('POST', '/replays', { body, idempotent: true })).data;
      if (job && typeof job.id === 'string') remember(job.id);
      result.replaceChildren(h('p', { class: 'ok' }, `Started ${job && job.id}.`));
      refresh();
    } catch (e) {
      result.replaceChildren(errorBox(e));
    }
  }

  let timer = 0;
  async function refresh() {
    clearTimeout(timer);
    if (!view.isConnected) return;
    const ids = started();
    const jobs = await Promise.all(ids.map((id) => api('GET', '/replays/' + encodeURIComponent(id)).then((r) => r.data, (e) => ({ id, state: '', error: e.detail || e.message }))));
    mine.replaceChildren(table(HEADINGS, jobRows(jobs), 'None yet.'));
    try {
      const page = (await api('GET', '/replays', { query: { limit: 50 } })).data;
      if (page && Array.isArray(page.data)) all.replaceChildren(h('h2', null, 'Recent jobs'), table(HEADINGS, jobRows(page.data), 'None.'));
    } catch (e) {
      if (e.status !== 404 && e.status !== 405) all.replaceChildren(errorBox(e));
    }
    if (jobs.some((j) => j.state === 'running') && view.isConnected) timer = setTimeout(refresh, 1000);
  }
  await refresh();
}
