/* The API client: a live page asks the server; an exported page looks answers up in its snapshot
 * by the same key (route + JSON of the sorted [name, value] pairs). */
import { $, fmtNum } from './dom.js';
import { t, hasIn } from './i18n.js';
import { SNAP, state } from './state.js';
import { offsets as localOffsets } from './local.js';

export function snapKey(route, params) {
  const entries = Object.keys(params).sort().map((k) => [k, String(params[k])]);
  return route + '?' + JSON.stringify(entries);
}
export class ApiFailure extends Error {
  constructor(info) { super((info && info.error) || 'error'); this.info = info || {}; }
}
export async function api(route, params, body) {
  params = params || {};
  if (SNAP) {
    if (body) throw new ApiFailure({ error: t('snapshot_readonly'), code: 'snapshot_miss' });
    const hit = SNAP.responses[snapKey(route, params)];
    if (!hit && route === 'offsets') {  // view 1 needs no server: the page computes any sentence itself
      try { return localOffsets(params); } catch (e) { throw new ApiFailure(e.info || { error: String(e) }); }
    }
    if (!hit) throw new ApiFailure({ error: t('snapshot_miss'), code: 'snapshot_miss' });
    if (hit.error) throw new ApiFailure(hit.error);
    return hit.data;
  }
  const qs = new URLSearchParams(Object.keys(params).sort().map((k) => [k, String(params[k])])).toString();
  const url = 'api/' + route + (qs ? '?' + qs : '');
  const init = body ? { method: 'POST', body: body, headers: { 'Content-Type': 'application/json' } } : {};
  const res = await fetch(url, init);
  let data = null;
  try { data = await res.json(); } catch (e) { data = { error: 'HTTP ' + res.status }; }
  if (!res.ok) throw new ApiFailure(data);
  return data;
}

// one in-flight request per view: later answers win, stale ones are dropped
export function latest() {
  let n = 0;
  return async (fn) => {
    const mine = ++n;
    const out = await fn();
    return mine === n ? out : undefined;
  };
}

// The page's text for an API error. English shows the server's message (it names the field and
// the accepted range); other languages build the sentence from the error's code, field, limit
// and value, so no English text appears inside a translated page.
export function errorText(err) {
  const info = (err && err.info) || { error: String(err) };
  const msg = info.error || String(err);
  if (!info.code || info.code === 'snapshot_miss') return msg;  // made by the page: already translated
  const num = (v) => (typeof v === 'number' ? fmtNum(v, 4) : v);
  // a field is named by its label in the page's language (opt.hidden -> "MLP 隐藏层宽度"), never raw
  const label = (f) => {
    if (!f || state.lang === 'en') return f || '';
    for (const key of [f, 'opt.' + f.replace(/^opt\./, ''), 'field.' + f]) if (hasIn(state.lang, key)) return '“' + t(key) + '”';
    return f;
  };
  const vars = {
    msg, field: label(info.field), fields: (info.fields || []).map(label).join(', '), limit: num(info.limit),
    unit: info.unit ? t('unit.' + info.unit) : '', value: num(info.value)
  };
  const withValue = info.value !== null && info.value !== undefined;
  for (const key of ['err.' + info.code + (withValue ? '_v' : ''), 'err.' + info.code]) {
    if (hasIn(state.lang, key)) return t(key, vars);
  }
  if (state.lang !== 'en' && info.field) return t('err.field', vars);
  return msg;
}
export function showError(view, err) {
  const box = $('#' + view + '-error');
  if (!box) return;
  // while a view shows an error its plots are from an earlier answer: fade them so none is read as current
  const vis = box.closest('.visual');
  if (vis) vis.classList.toggle('stale', !!err);
  box._err = err || null;  // kept, so a language switch rewrites the message (relabelErrors)
  if (!err) { box.hidden = true; box.textContent = ''; return; }
  box.textContent = errorText(err);
  box.hidden = false;
}

// after a language switch: every error on the page is rewritten in the new language
export function relabelErrors() {
  document.querySelectorAll('.error').forEach((box) => { if (box._err && !box.hidden) box.textContent = errorText(box._err); });
}
