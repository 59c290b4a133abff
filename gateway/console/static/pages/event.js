// One event: GET /api/v1/events/{id}: metadata, headers, body, deliveries;
// Replay posts /events/{id}/replay with an Idempotency-Key.
import { api } from '../api.js';
import { h, link, table, fmtTime, errorBox, kv, badge, dash } from '../dom.js';

// prettyBody shows a JSON body indented, any other body as it is.
export function prettyBody(body) {
  try {
    return JSON.stringify(JSON.parse(body), null, 2);
  } catch {
    return body;
  }
}

export function deliveryRows(list) {
  return list.map((d) => [
    h('td', { class: 'mono' }, link(['deliveries', d.id], dash(d.id))),
    h('td', { class: 'mono' }, dash(d.endpoint)),
    badge(d.state),
    h('td', { class: 'num' }, dash(d.attempt_count)),
    h('td', { class: 'num' }, d.last_status ? String(d.last_status) : '—'),
    fmtTime(d.next_attempt_at),
  ]);
}
export const DELIVERY_HEADINGS = ['Delivery', 'Endpoint', 'State', 'Attempts', 'Last status', 'Next attempt'];

export default async function eventPage(view, { id }) {
  view.appendChild(h('p', { class: 'crumbs' }, link(['events'], '← Events')));
  const title = h('h1', { class: 'mono' }, 'Event ' + id);
  view.appendChild(title);
  let ev;
  try {
    ev = (await api('GET', '/events/' + encodeURIComponent(id))).data;
  } catch (e) {
    view.appendChild(errorBox(e));
    return;
  }
  view.appendChild(h('div', { class: 'card' }, kv([
    ['ID', h('span', { class: 'mono' }, dash(ev.id))],
    ['Tenant', dash(ev.tenant)],
    ['Source', dash(ev.source)],
    ['Type', h('span', { class: 'mono', id: 'event-type' }, dash(ev.type))],
    ['Provider event ID', h('span', { class: 'mono' }, dash(ev.event_id))],
    ['Received', fmtTime(ev.received_at)],
    ['Content type', h('span', { class: 'mono' }, dash(ev.content_type))],
  ])));

  const headers = ev.headers && typeof ev.headers === 'object' ? Object.entries(ev.headers) : [];
  headers.sort((a, b) => a[0].localeCompare(b[0]));
  view.appendChild(h('h2', null, 'Headers'));
  view.appendChild(h('div', { id: 'headers' }, table(['Name', 'Value'],
    headers.map(([k, v]) => [h('td', { class: 'mono' }, k), h('td', { class: 'mono wrap' }, String(v))]), 'No headers.')));

  view.appendChild(h('h2', null, 'Body'));
  if (typeof ev.body === 'string') {
    view.appendChild(h('pre', { class: 'body', id: 'body' }, prettyBody(ev.body)));
  } else if (typeof ev.body_base64 === 'string') {
    view.appendChild(h('p', { class: 'muted' }, 'Not UTF-8 text; base64:'));
    view.appendChild(h('pre', { class: 'body', id: 'body' }, ev.body_base64));
  } else {
    view.appendChild(h('p', { class: 'muted' }, 'Empty.'));
  }

  const deliveries = Array.isArray(ev.deliveries) ? ev.deliveries : [];
  const status = h('div', { class: 'status', role: 'status', 'aria-live': 'polite', id: 'replay-result' });
  const button = h('button', { type: 'button', class: 'primary', id: 'replay', onclick: replay }, 'Replay');
  view.appendChild(h('div', { class: 'heading-row' }, h('h2', null, 'Deliveries'), button));
  view.appendChild(status);
  view.appendChild(h('div', { id: 'deliveries' }, table(DELIVERY_HEADINGS, deliveryRows(deliveries), 'No deliveries: no endpoint matched.')));
  if (ev.deliveries_next_cursor) view.appendChild(h('p', { class: 'muted' }, 'More deliveries than shown (GET /deliveries?event=…).'));

  async function replay() {
    button.disabled = true;
    status.replaceChildren(h('p', { class: 'muted' }, 'Replaying…'));
    try {
      const { data } = await api('POST', '/events/' + encodeURIComponent(id) + '/replay', { body: {}, idempotent: true });
      const list = data && Array.isArray(data.data) ? data.data : [];
      status.replaceChildren(
        h('p', { class: 'ok' }, list.length ? `Replayed: ${list.length} new ${list.length === 1 ? 'delivery' : 'deliveries'}.` : 'Replayed: no endpoint matches now.'),
        list.length ? table(DELIVERY_HEADINGS, deliveryRows(list)) : null);
    } catch (e) {
      status.replaceChildren(errorBox(e));
    } finally {
      button.disabled = false;
    }
  }
}
