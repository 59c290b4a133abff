// Sign-in: an admin token, checked with one API call, kept in
// sessionStorage only.
import { api, signIn, signOut, takeNotice } from '../api.js';
import { h, text } from '../dom.js';

export default function signin(view) {
  const msg = h('p', { class: 'notice', role: 'status', 'aria-live': 'polite', id: 'signin-message' });
  const n = takeNotice();
  if (n) text(msg, n);
  else msg.hidden = true;
  const input = h('input', { type: 'password', name: 'token', id: 'token', autocomplete: 'off', spellcheck: 'false', required: true });
  const button = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h('form', { class: 'card signin', onsubmit: submit },
    h('h1', null, 'Sign in'),
    h('p', { class: 'muted' }, 'An admin token from the gateway\'s config.yaml (admin.tokens). It is kept in this tab only, until you sign out or close it.'),
    msg,
    h('label', { for: 'token' }, 'Admin token'),
    input,
    button);
  view.appendChild(form);
  input.focus();

  async function submit(ev) {
    ev.preventDefault();
    const t = input.value.trim();
    if (!t) return;
    button.disabled = true;
    signIn(t);
    try {
      await api('GET', '/events', { query: { limit: 1 }, quiet401: true });
      location.hash = '#/';
    } catch (e) {
      if (e.status === 401) {
        signOut('That token was not accepted.');
      } else {
        msg.hidden = false;
        text(msg, 'Could not check the token: ' + (e.detail || e.message));
        sessionStorage.clear();
      }
    } finally {
      button.disabled = false;
    }
  }
}
