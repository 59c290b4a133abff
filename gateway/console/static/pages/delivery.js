// One delivery: GET /api/v1/deliveries/{id} with every attempt; Retry posts
// /deliveries/{id}/retry and polls until the new attempt shows.
import { api } from '../api.js';
import { h, link, table, fmtTime, errorBox, kv, badge, dash } from '../dom.js';

function attemptRows(attempts) {
  return attempts.map((a) => [
    h('td', { class: 'num' }, dash(a.n)),
    fmtTime(a.at),
    h('td', { class: 'num' }, a.status_code ? String(a.status_code) : '—'),
    h('td', { class: 'num' }, a.latency_ms === undefined ? '—' : a.latency_ms + ' ms'),
    h('td', { class: 'wrap' }, dash(a.error)),
    h('td', null, a.response ? h('pre', { class: 'excerpt' }, String(a.response)) : '—'),
  ]);
}

export default async function delivery(view, { id }) {
  const crumbs = h('p', { class: 'crumbs' }, link(['events'], '← Events'));
  view.appendChild(crumbs);
  view.appendChild(h('h1', { class: 'mono' }, 'Delivery ' + id));
  const meta = h('div', { class: 'card' });
  const status = h('div', { class: 'status', role: 'status', 'aria-live': 'polite', id: 'retry-result' });
  const button = h('button', { type: 'button', class: 'primary', id: 'retry', onclick: retry }, 'Retry now');
  const attempts = h('div', { id: 'attempts' });
  let d;
  try {
    d = (await api('GET', '/deliveries/' + encodeURIComponent(id))).data;
  } catch (e) {
    view.appendChild(errorBox(e));
    return;
  }
  if (d.event) crumbs.appendChild(h('span', null, ' · ', link(['events', d.event], 'its event')));
  view.append(meta, h('div', { class: 'heading-row' }, h('h2', null, 'Attempts'), button), status, attempts);
  show(d);

  function show(d) {
    meta.replaceChildren(kv([
      ['ID', h('span', { class: 'mono' }, dash(d.id))],
      ['Event', d.event ? h('span', { class: 'mono' }, link(['events', d.event], String(d.event))) : '—'],
      ['Endpoint', h('span', { class: 'mono' }, dash(d.endpoint))],
      ['State', badge(d.state)],
      ['Attempts', dash(d.attempt_count)],
      ['Next attempt', fmtTime(d.next_attempt_at)],
      ['Idempotency-Key', h('span', { class: 'mono' }, dash(d.idempotency_key))],
    ]));
    const list = Array.isArray(d.attempts) ? d.attempts : [];
    attempts.replaceChildren(table(['#', 'At', 'Status', 'Latency', 'Error', 'Response (first 1 KiB)'], attemptRows(list), 'No attempts yet.'));
  }

  async function retry() {
    button.disabled = true;
    const before = Array.isArray(d.attempts) ? d.attempts.length : 0;
    status.replaceChildren(h('p', { class: 'muted' }, 'Retrying…'));
    try {
      await api('POST', '/deliveries/' + encodeURIComponent(id) + '/retry', { body: {}, idempotent: true });
      status.replaceChildren(h('p', { class: 'muted' }, 'Queued; waiting for the attempt…'));
      const deadline = Date.now() + 15000;
      while (Date.now() < deadline && view.isConnected) {
        await new Promise((r) => setTimeout(r, 500));
        d = (await api('GET', '/deliveries/' + encodeURIComponent(id))).data;
        const list = Array.isArray(d.attempts) ? d.attempts : [];
        if (list.length > before) {
          show(d);
          const a = list[list.length - 1];
          status.replaceChildren(h('p', { class: 'ok', id: 'new-attempt' },
            `New attempt #${a.n}: ${a.status_code ? 'HTTP ' + a.status_code : a.error || 'no answer'}.`));
          return;
        }
      }
      show(d);
      status.replaceChildren(h('p', { class: 'muted' }, 'Queued; no new attempt within 15 s (the endpoint may be paused or its circuit open).'));
    } catch (e) {
      status.replaceChildren(errorBox(e));
    } finally {
      button.disabled = false;
    }
  }
}
