// Events: GET /api/v1/events with filters, 50 a page, newest first.
import { api } from '../api.js';
import { h, link, route, table, fmtTime, errorBox, localToRFC3339, rfc3339ToLocal, dash } from '../dom.js';

const FILTERS = ['source', 'type', 'since', 'until', 'event_id'];

export default async function events(view, { query }) {
  const f = Object.fromEntries(FILTERS.map((k) => [k, query.get(k) || '']));
  const cursor = query.get('cursor') || '';
  view.appendChild(h('h1', null, 'Events'));

  const field = (name, label, type, value, placeholder) => h('div', { class: 'field' },
    h('label', { for: 'f-' + name }, label),
    h('input', { id: 'f-' + name, name, type, value, placeholder, autocomplete: 'off', spellcheck: 'false' }));
  const form = h('form', { class: 'filters card', onsubmit: submit },
    field('source', 'Source', 'text', f.source, 'stripe'),
    field('type', 'Type (glob)', 'text', f.type, 'invoice.*'),
    field('since', 'Since', 'datetime-local', rfc3339ToLocal(f.since)),
    field('until', 'Until', 'datetime-local', rfc3339ToLocal(f.until)),
    field('event_id', 'Provider event ID', 'text', f.event_id, 'evt_1N…'),
    h('div', { class: 'field actions' },
      h('button', { type: 'submit', class: 'primary' }, 'Filter'),
      h('a', { href: '#/events', class: 'button' }, 'Clear')));
  view.appendChild(form);

  function submit(ev) {
    ev.preventDefault();
    const v = (n) => form.elements[n].value.trim();
    location.hash = route(['events'], {
      source: v('source'), type: v('type'), since: localToRFC3339(v('since')), until: localToRFC3339(v('until')), event_id: v('event_id'),
    });
  }

  const out = h('div', { id: 'events-result' }, h('p', { class: 'muted loading' }, 'Loading…'));
  view.appendChild(out);
  let page;
  try {
    page = (await api('GET', '/events', { query: { ...f, limit: 50, cursor } })).data;
  } catch (e) {
    out.replaceChildren(errorBox(e));
    return;
  }
  const rows = (page && Array.isArray(page.data) ? page.data : []).map((e) => [
    fmtTime(e.received_at),
    h('td', { class: 'mono' }, link(['events', e.id], dash(e.id))),
    dash(e.tenant),
    dash(e.source),
    h('td', { class: 'mono' }, dash(e.type)),
    h('td', { class: 'mono' }, dash(e.event_id)),
  ]);
  const pager = h('div', { class: 'pager' });
  if (cursor) pager.appendChild(h('a', { href: route(['events'], f), class: 'button' }, 'First page'));
  if (page && page.next_cursor) pager.appendChild(h('a', { href: route(['events'], { ...f, cursor: page.next_cursor }), class: 'button', id: 'next-page' }, 'Next page'));
  out.replaceChildren(
    table(['Received', 'ID', 'Tenant', 'Source', 'Type', 'Provider event ID'], rows, 'No events match.'),
    pager);
}
