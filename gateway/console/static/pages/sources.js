// Sources: GET /api/v1/sources (never their secrets).
import { api } from '../api.js';
import { h, table, errorBox, dash } from '../dom.js';

export default async function sources(view) {
  view.appendChild(h('h1', null, 'Sources'));
  const out = h('div', { id: 'sources' }, h('p', { class: 'muted' }, 'Loading…'));
  view.appendChild(out);
  const list = [];
  try {
    let cursor = '';
    for (let i = 0; i < 20; i++) {
      const page = (await api('GET', '/sources', { query: { limit: 1000, cursor } })).data;
      list.push(...(page && Array.isArray(page.data) ? page.data : []));
      if (!page || !page.next_cursor) break;
      cursor = page.next_cursor;
    }
  } catch (e) {
    out.replaceChildren(errorBox(e));
    return;
  }
  const rows = list.map((s) => [
    h('td', { class: 'mono' }, dash(s.id)),
    dash(s.tenant),
    dash(s.verify && s.verify.scheme),
    h('td', { class: 'mono' }, dash(s.event_id)),
    h('td', { class: 'mono' }, dash(s.event_type)),
    s.from_config ? 'config.yaml' : 'API',
    h('td', { class: 'mono' }, `POST /ingest/${s.id}`),
  ]);
  out.replaceChildren(table(['ID', 'Tenant', 'Verify', 'Event ID', 'Event type', 'Defined in', 'Ingest'], rows, 'No sources.'));
}
