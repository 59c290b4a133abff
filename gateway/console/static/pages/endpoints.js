// Endpoints: GET /api/v1/endpoints, each with GET /endpoints/{id}/stats;
// disable, enable (PATCH) and rotate secret (POST, shown once).
import { api } from '../api.js';
import { h, table, errorBox, badge, dash, clear } from '../dom.js';

async function allEndpoints() {
  const out = [];
  let cursor = '';
  for (let i = 0; i < 20; i++) {
    const page = (await api('GET', '/endpoints', { query: { limit: 1000, cursor } })).data;
    out.push(...(page && Array.isArray(page.data) ? page.data : []));
    if (!page || !page.next_cursor) break;
    cursor = page.next_cursor;
  }
  return out;
}

function pct(v) {
  return typeof v === 'number' && Number.isFinite(v) ? (v * 100).toFixed(1) + ' %' : '—';
}

export default async function endpoints(view) {
  view.appendChild(h('h1', null, 'Endpoints'));
  const secretBox = h('div', { id: 'secret-box' });
  const status = h('div', { class: 'status', role: 'status', 'aria-live': 'polite' });
  const out = h('div', { id: 'endpoints' }, h('p', { class: 'muted' }, 'Loading…'));
  view.append(secretBox, status, out);
  await load();

  async function load() {
    let list;
    try {
      list = await allEndpoints();
    } catch (e) {
      out.replaceChildren(errorBox(e));
      return;
    }
    const rows = list.map((ep) => {
      const stats = {
        circuit: h('td', null, '…'), rate: h('td', { class: 'num' }, '…'), latency: h('td', { class: 'num' }, '…'), backlog: h('td', { class: 'num' }, '…'),
      };
      loadStats(ep.id, stats);
      const state = ep.disabled
        ? h('td', null, badge('disabled'), ep.disabled_reason ? h('div', { class: 'muted small' }, String(ep.disabled_reason)) : null)
        : h('td', null, badge('enabled'));
      const actions = h('td', { class: 'actions' },
        ep.disabled
          ? h('button', { type: 'button', onclick: () => setDisabled(ep.id, false) }, 'Enable')
          : h('button', { type: 'button', onclick: () => setDisabled(ep.id, true) }, 'Disable'),
        h('button', { type: 'button', onclick: () => rotate(ep.id) }, 'Rotate secret'));
      return [h('td', { class: 'mono nowrap' }, dash(ep.id)), h('td', { class: 'mono wrap' }, dash(ep.url)), dash(ep.tenant), state,
        stats.circuit, stats.rate, stats.latency, stats.backlog, actions];
    });
    out.replaceChildren(table(['ID', 'URL', 'Tenant', 'State', 'Circuit', 'Success (1 h)', 'Latency p50 / p95', 'Pending / due', ''], rows, 'No endpoints.'));
  }

  async function loadStats(id, cells) {
    let s = null;
    try {
      s = (await api('GET', '/endpoints/' + encodeURIComponent(id) + '/stats')).data;
    } catch (e) {
      if (e.status !== 404 && e.status !== 405) cells.circuit.title = e.detail || e.message;
    }
    if (!s) {
      for (const c of Object.values(cells)) c.textContent = '—';
      return;
    }
    clear(cells.circuit).appendChild(badge(s.circuit));
    if (s.paused_until) cells.circuit.appendChild(h('div', { class: 'muted small' }, 'until ' + new Date(s.paused_until).toLocaleTimeString()));
    cells.rate.textContent = pct(s.success_rate) + (typeof s.attempts === 'number' ? ` of ${s.attempts}` : '');
    cells.latency.textContent = `${dash(s.latency_ms_p50)} / ${dash(s.latency_ms_p95)} ms`;
    cells.backlog.textContent = `${dash(s.pending)} / ${dash(s.due)}`;
  }

  async function setDisabled(id, disabled) {
    status.replaceChildren();
    try {
      await api('PATCH', '/endpoints/' + encodeURIComponent(id), { body: { disabled } });
      status.replaceChildren(h('p', { class: 'ok' }, `${id} ${disabled ? 'disabled' : 'enabled'}.`));
      await load();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  }

  async function rotate(id) {
    status.replaceChildren();
    try {
      const ep = (await api('POST', '/endpoints/' + encodeURIComponent(id) + '/rotate-secret', { body: {}, idempotent: true })).data;
      // Shown once, never stored: gone when hidden or the page changes.
      const code = h('code', { class: 'secret', id: 'new-secret' }, String(ep && ep.secret || ''));
      const box = h('div', { class: 'card secret-box', role: 'alert' },
        h('p', null, h('strong', null, `New secret of ${id}`), ' — shown once. The old one keeps signing during its grace period.'),
        code,
        h('div', { class: 'actions' },
          navigator.clipboard ? h('button', { type: 'button', onclick: () => navigator.clipboard.writeText(code.textContent) }, 'Copy') : null,
          h('button', { type: 'button', class: 'primary', onclick: () => secretBox.replaceChildren() }, 'Copied it, hide')));
      secretBox.replaceChildren(box);
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  }
}
