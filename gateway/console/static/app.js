// The console's router: hash routes (#/events, #/events/{id}, ...), each
// rendered by one page module into a fresh container.
import { token, signOut } from './api.js';
import { clear, h } from './dom.js';
import signin from './pages/signin.js';
import overview from './pages/overview.js';
import events from './pages/events.js';
import eventPage from './pages/event.js';
import delivery from './pages/delivery.js';
import endpoints from './pages/endpoints.js';
import sources from './pages/sources.js';
import replays from './pages/replays.js';

// parse splits the hash into decoded path parts and query parameters.
function parse() {
  const raw = location.hash.replace(/^#\/?/, '');
  const qi = raw.indexOf('?');
  const path = qi < 0 ? raw : raw.slice(0, qi);
  const query = new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1));
  const parts = path.split('/').filter((p) => p !== '').map((p) => {
    try { return decodeURIComponent(p); } catch { return p; }
  });
  return { parts, query };
}

function pick(parts) {
  const [a, b, ...rest] = parts;
  if (rest.length) return null;
  switch (a) {
    case undefined: return ['overview', overview];
    case 'signin': return b === undefined ? ['signin', signin] : null;
    case 'events': return b === undefined ? ['events', events] : ['events', eventPage];
    case 'deliveries': return b === undefined ? null : ['events', delivery];
    case 'endpoints': return b === undefined ? ['endpoints', endpoints] : null;
    case 'sources': return b === undefined ? ['sources', sources] : null;
    case 'replays': return b === undefined ? ['replays', replays] : null;
    default: return null;
  }
}

function render() {
  const main = document.getElementById('app');
  const nav = document.getElementById('nav');
  const { parts, query } = parse();
  if (!token() && parts[0] !== 'signin') {
    location.replace('#/signin');
    return;
  }
  if (token() && parts[0] === 'signin') {
    location.replace('#/');
    return;
  }
  nav.hidden = !token();
  const found = pick(parts);
  const section = found ? found[0] : '';
  for (const a of nav.querySelectorAll('a[data-route]')) {
    if (a.dataset.route === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const view = h('section', { class: 'page' });
  clear(main).appendChild(view);
  if (!found) {
    view.appendChild(h('h1', null, 'Not found'));
    view.appendChild(h('p', null, 'This console has no such page.'));
    return;
  }
  document.title = 'hookgate · ' + (section || 'console');
  Promise.resolve(found[1](view, { id: parts[1], query })).catch((e) => {
    if (view.isConnected) view.appendChild(h('div', { class: 'error', role: 'alert' }, String(e && e.message || e)));
  });
}

window.addEventListener('hashchange', render);
document.getElementById('signout').addEventListener('click', () => signOut('Signed out.'));
render();
