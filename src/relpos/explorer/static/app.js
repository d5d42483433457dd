/* relpos explorer: the page. Every number shown comes from the relpos JSON API
 * (or from the snapshot an export embeds); the modules only lay them out. No build step:
 * the browser loads these ES modules as they are; relpos explore --export bundles them. */
import { $, el, debounce } from './dom.js';
import { t, I18N } from './i18n.js';
import { state, SNAP } from './state.js';
import { api, errorText, relabelErrors } from './api.js';
import * as compose from './views/compose.js';
import * as offsets from './views/offsets.js';
import * as bias from './views/bias.js';
import * as shift from './views/shift.js';
import * as extrapolation from './views/extrapolation.js';
import * as attention from './views/attention.js';

function applyLang() {
  document.documentElement.lang = state.lang === 'zh' ? 'zh-CN' : 'en';
  document.querySelectorAll('[data-i18n]').forEach((e) => { e.textContent = t(e.getAttribute('data-i18n')); });
  document.querySelectorAll('[data-i18n-html]').forEach((e) => { e.innerHTML = t(e.getAttribute('data-i18n-html')); });
  document.querySelectorAll('.lang button').forEach((b) => b.setAttribute('aria-pressed', String(b.dataset.lang === state.lang)));
  document.title = t('title');
  if (SNAP) {
    const b = $('#snapshot-banner');
    b.textContent = t('snapshot', { date: SNAP.created || '' });
    b.hidden = false;
  }
  // the example sentence follows the language, unless the user typed their own
  for (const [key, ids] of [['default_sentence', ['v1-text', 'v2-text']], ['compose_sentence', ['v0-text']]]) {
    const defaults = Object.values(I18N).map((d) => d[key]);
    for (const id of ids) {
      const inp = $('#' + id);
      if (inp && defaults.includes(inp.value) && inp.value !== t(key)) {
        inp.value = t(key);
        inp.dispatchEvent(new Event('input'));
      }
    }
  }
  for (const v of Object.values(VIEWS)) if (v.relabel) v.relabel();
  relabelErrors();
}

// ---------------------------------------------------------------- tabs

const VIEW_IDS = ['compose', 'offsets', 'bias', 'shift', 'extrap', 'attn'];
function showView(name, focus) {
  if (!VIEW_IDS.includes(name)) name = 'compose';
  state.view = name;
  document.querySelectorAll('[role=tab]').forEach((b) => {
    const on = b.dataset.view === name;
    b.setAttribute('aria-selected', String(on));
    b.tabIndex = on ? 0 : -1;
    if (on && focus) b.focus();
  });
  document.querySelectorAll('.view').forEach((s) => { s.hidden = s.id !== 'view-' + name; });
  if (location.hash !== '#' + name) history.replaceState(null, '', '#' + name);
  VIEWS[name].show();
}
function initTabs() {
  const tabs = Array.from(document.querySelectorAll('[role=tab]'));
  tabs.forEach((b, k) => {
    b.addEventListener('click', () => showView(b.dataset.view));
    b.addEventListener('keydown', (ev) => {
      let to = null;
      if (ev.key === 'ArrowRight') to = tabs[(k + 1) % tabs.length];
      else if (ev.key === 'ArrowLeft') to = tabs[(k - 1 + tabs.length) % tabs.length];
      else if (ev.key === 'Home') to = tabs[0];
      else if (ev.key === 'End') to = tabs[tabs.length - 1];
      if (to) { ev.preventDefault(); showView(to.dataset.view, true); }
    });
  });
}

// one module per view; the keys are the tab ids (index.html: #view-<id>)
const VIEWS = {
  compose: compose.create(), offsets: offsets.create(), bias: bias.create(), shift: shift.create(),
  extrap: extrapolation.create(), attn: attention.create()
};

// ------------------------------------------------------------------ boot

async function boot() {
  let saved = null;
  try { saved = window.localStorage.getItem('relpos-lang'); } catch (e) { saved = null; }
  const fromUrl = new URLSearchParams(location.search).get('lang');
  state.lang = fromUrl === 'zh' || fromUrl === 'en' ? fromUrl : (saved || ((navigator.language || '').startsWith('zh') ? 'zh' : 'en'));
  document.querySelectorAll('.lang button').forEach((b) => b.addEventListener('click', () => {
    state.lang = b.dataset.lang;
    try { window.localStorage.setItem('relpos-lang', state.lang); } catch (e) { /* storage may be off */ }
    applyLang();
  }));
  initTabs();
  try {
    state.info = await api('info', {});
  } catch (err) {
    const box = el('p', { class: 'error', role: 'alert' }, errorText(err));
    $('#main').prepend(box);
    return;
  }
  applyLang();
  showView((location.hash || '#compose').slice(1));
  window.addEventListener('hashchange', () => showView((location.hash || '#compose').slice(1)));
  window.addEventListener('resize', debounce(() => { const v = VIEWS[state.view]; if (v.redraw) v.redraw(); }, 150));
  document.body.dataset.ready = 'true';
}
boot();
