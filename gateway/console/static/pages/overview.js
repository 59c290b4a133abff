// Overview: the last hour from GET /api/v1/stats, one bucket a minute.
import uPlot from '../vendor/uplot/uPlot.esm.js';
import { api } from '../api.js';
import { h, errorBox, text } from '../dom.js';

const SERIES = [
  ['received', 'Received', '#2563eb', { width: 1, fill: 'rgba(37, 99, 235, 0.25)', paths: uPlot.paths.bars({ size: [0.7, 40] }) }],
  ['delivered', 'Delivered', '#16a34a', { width: 2 }],
  ['failed', 'Failed', '#dc2626', { width: 2 }],
  ['outbox_pending', 'Outbox pending', '#d97706', { width: 1.5 }],
];

// nonZero is a uPlot points filter: the indices of the series' non-zero values.
function nonZero(u, si) {
  const idx = [];
  u.data[si].forEach((v, i) => { if (v) idx.push(i); });
  return idx.length ? idx : null;
}

const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);

export default async function overview(view) {
  view.appendChild(h('h1', null, 'Overview'));
  view.appendChild(h('p', { class: 'muted' }, 'The last hour on this gateway, per minute.'));
  let stats;
  try {
    stats = (await api('GET', '/stats')).data;
  } catch (e) {
    if (e.status === 404 || e.status === 405) {
      view.appendChild(h('p', { class: 'empty', id: 'no-stats' }, 'No statistics from this gateway.'));
      return;
    }
    view.appendChild(errorBox(e));
    return;
  }
  const totalsBox = h('div', { class: 'stats' });
  const chart = h('div', { class: 'card chart', id: 'chart' });
  const updated = h('p', { class: 'muted small', id: 'updated' });
  view.append(totalsBox, chart, updated);
  const width = () => Math.max(320, chart.clientWidth - 32);
  let plot = null;

  // draw shows one answer of /stats: the totals, and the chart (made on
  // the first answer, given new data after).
  const draw = (stats) => {
    const buckets = Array.isArray(stats && stats.buckets) ? stats.buckets : [];
    totalsBox.replaceChildren(...SERIES.map(([k, label]) => {
      const v = k === 'outbox_pending'
        ? num(buckets.length ? buckets[buckets.length - 1][k] : 0)
        : buckets.reduce((s, b) => s + num(b[k]), 0);
      return h('div', { class: 'stat stat-' + k }, h('div', { class: 'stat-value' }, v.toLocaleString()),
        h('div', { class: 'stat-label' }, k === 'outbox_pending' ? label + ' now' : label + ' (hour)'));
    }));
    const xs = buckets.map((b) => Math.floor(new Date(b.at).getTime() / 1000));
    const data = [xs, ...SERIES.map(([k]) => buckets.map((b) => num(b[k])))];
    text(updated, 'Updated ' + new Date().toLocaleTimeString() + '; refreshed every 30 s.');
    if (plot) {
      plot.setData(data);
      return;
    }
    plot = new uPlot({
      width: width(),
      height: 320,
      series: [{}, ...SERIES.map(([, label, color, style], n) => ({
        label, stroke: color, ...style,
        // A dot on each minute that counted any, so a lone busy minute reads as one.
        points: n === 0 ? { show: false } : { show: false, size: 6, fill: color, filter: nonZero },
      }))],
      axes: [{}, { label: 'per minute' }],
      scales: {
        x: { time: true, range: (u, min, max) => [min - 30, max + 30] }, // room for the edge buckets' bars
        y: { range: (u, min, max) => [0, Math.max(5, Math.ceil(max * 1.1))] },
      },
      legend: { live: true },
    }, data, chart);
  };
  draw(stats);

  const onResize = () => {
    if (!chart.isConnected) {
      window.removeEventListener('resize', onResize);
      return;
    }
    plot.setSize({ width: width(), height: 320 });
  };
  window.addEventListener('resize', onResize);
  const refresh = async () => {
    if (!view.isConnected) return;
    try {
      draw((await api('GET', '/stats')).data);
    } catch (e) {
      if (view.isConnected) text(updated, 'Could not refresh: ' + (e.detail || e.message));
    }
    if (view.isConnected) setTimeout(refresh, 30000);
  };
  setTimeout(refresh, 30000);
}
