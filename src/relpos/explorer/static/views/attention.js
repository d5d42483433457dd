/* View 5: attention maps of a loaded checkpoint.
 * The view follows view 0: the model view 0 shows (when it shows a trained one) and the sentence typed
 * there, until the learner picks a model or types a text here (a button gives view 0's sentence back).
 * create() wires the view to its DOM and returns { show, relabel, redraw }. */
import { $, el, svg, fmtInt, fmtCount, fmtNum, debounce, clampInt, MINUS } from '../dom.js';
import { t, has } from '../i18n.js';
import { state, SNAP } from '../state.js';
import { api, ApiFailure, latest, showError } from '../api.js';
import { Heatmap } from '../heatmap.js';
import { lineChart, marker } from '../linechart.js';
import { OKABE, DASHES, MARKERS, scaleFor, colourOf, rgbCss } from '../colours.js';

export function create() {
  const run = latest();
  let data = null, loaded = false;
  const ckpt = $('#v5-ckpt'), text = $('#v5-text'), layer = $('#v5-layer'), head = $('#v5-head');
  const hm = Heatmap($('#v5-heatmap'), { onCell: cell, maxSize: 460 });
  const v0text = $('#v0-text'), v0model = $('#v0-model'), syncBtn = $('#v5-text-sync');
  // the learner's own choices here; until then the view reads view 0's sentence and model
  let ownText = false, ownModel = false;

  function init() {
    ckpt.replaceChildren();
    fillCkpts();
    if (!state.info.checkpoints.length) ckpt.append(el('option', { value: '', disabled: true }, '—'));
    ckpt.disabled = !state.info.checkpoints.length;
    ckpt.addEventListener('change', () => { ownModel = true; fillLayers(); load(); });
    layer.addEventListener('change', load);
    head.addEventListener('change', render);
    text.addEventListener('input', () => { ownText = text.value !== v0text.value; noteText(); loadSoon(); });
    syncBtn.addEventListener('click', () => { ownText = false; sync(); load(); });
    text.maxLength = state.info.limits.max_text_chars;
    if (SNAP) { text.readOnly = true; text.title = t('snapshot_readonly'); }
    $('#v5-form').addEventListener('submit', (ev) => ev.preventDefault());
    fillLayers();
  }
  function ckptLabel(c) {
    return c.scheme + ' · ' + t(c.shipped ? 'v0.model.shipped' : 'v0.model.yours', { label: c.label }) +
      ' · ' + t(c.fitted === true ? 'v0.fitted_yes' : c.fitted === false ? 'v0.fitted_no' : 'v0.fitted_unknown');
  }
  function fillCkpts() {
    const keep = ckpt.value;
    ckpt.replaceChildren();
    for (const c of state.info.checkpoints) ckpt.append(el('option', { value: String(c.index) }, ckptLabel(c)));
    if (keep) ckpt.value = keep;
  }
  function info(c) {
    const fit = t(c.fitted === true ? 'v0.fitted_words_yes' : c.fitted === false ? 'v0.fitted_words_no' : 'v0.fitted_words_unknown');
    const on = c.trained_on_parts ? t('v0.trained_builtin', Object.assign({}, c.trained_on_parts, { bytes: fmtCount(c.trained_on_parts.bytes) }))
      : c.trained_on ? t('v0.trained_on', { what: c.trained_on }) : t('v0.trained_on_unknown');
    $('#v5-ckpt-info').textContent = t('v5.ckpt_info', { scheme: c.scheme, layers: c.n_layers, heads: c.n_heads, max: c.max_len }) + ' ' + on + ' ' + t('v5.fit', { fit });
  }
  function current() { return state.info.checkpoints[Number(ckpt.value)] || null; }
  // the model view 0 shows: its menu's trained model, or (view 0 not opened yet) the page's default
  function modelOfView0() {
    const v = v0model.value;
    if (v === '') return state.info.default_model === null || state.info.default_model === undefined ? null : String(state.info.default_model);
    return state.info.checkpoints.some((c) => String(c.index) === v) ? v : null;
  }
  function noteText() {
    $('#v5-text-note').textContent = t(ownText ? 'v5.text_own' : 'v5.text_follows');
    syncBtn.hidden = !ownText || SNAP !== null;
  }
  // take view 0's model and sentence unless the learner chose their own here; true when one changed
  function sync() {
    let changed = false;
    const want = ownModel ? null : modelOfView0();
    if (want !== null && ckpt.value !== want) { ckpt.value = want; fillLayers(); changed = true; }
    if (!ownText && text.value !== v0text.value) { text.value = v0text.value; changed = true; }
    noteText();
    return changed;
  }
  function fillLayers() {
    const c = current();
    layer.replaceChildren(); head.replaceChildren();
    if (!c) return;
    for (let l = 0; l < c.n_layers; l++) layer.append(el('option', { value: String(l) }, t('layer_n', { l: l + 1 })));
    for (let h = 0; h < c.n_heads; h++) head.append(el('option', { value: String(h) }, t('v2.head_n', { h: h + 1 })));
    info(c);
  }
  async function load() {
    const c = current();
    if (!c) { showError('v5', new ApiFailure({ error: t('v5.none') })); return; }
    try {
      const d = await run(() => api('attention', { checkpoint: ckpt.value, text: text.value, layer: layer.value || '0' }));
      if (d === undefined) return;
      showError('v5', null);
      data = d;
      render();
    } catch (err) { showError('v5', err); }
  }
  const loadSoon = debounce(load, 250);
  // top of the colour scale: the largest probability outside the first row
  // (in a causal model query 0 can only attend to itself, so its p is always 1)
  function topOf(mat) {
    let top = 0;
    mat.forEach((r, i) => r.forEach((v, j) => {
      if ((data.causal && (j > i || i === 0)) || v === null) return;
      if (v > top) top = v;
    }));
    return top || 1;
  }
  function cell(i, j) {
    if (!data) return;
    const p = data.maps[Number(head.value) || 0][i][j];
    $('#v5-readout').textContent = t('v5.cell', { i, j, a: data.tokens[i], b: data.tokens[j], p: data.causal && j > i ? t('v5.masked') : fmtNum(p, 4) });
  }
  function render() {
    if (!data) return;
    const h = Number(head.value) || 0;
    $('#v5-cap').textContent = t('v5.cap', { l: data.layer + 1, h: h + 1, n: data.tokens.length });
    const top = topOf(data.maps[h]);
    let peak = 0;
    data.maps[h].forEach((r, i) => r.forEach((v, j) => { if (!(data.causal && j > i) && v !== null && v > peak) peak = v; }));
    hm.draw({ matrix: data.maps[h], labels: data.tokens, scale: { kind: 'sequential', lo: 0, hi: top || 1 }, clippedAbove: peak > (top || 1) + 1e-9, masked: data.causal ? (i, j) => j > i : null, aria: $('#v5-cap').textContent });
    if (hm.cursor) cell(hm.cursor[0], hm.cursor[1]);
    const thumbs = $('#v5-thumbs');
    thumbs.replaceChildren();
    data.maps.forEach((m, k) => {
      const b = el('button', { type: 'button', class: 'thumb', 'aria-pressed': String(k === h), 'data-head': String(k) });
      const cv = el('canvas', { 'aria-hidden': 'true' });
      const mx = topOf(m);
      const n = m.length, px = Math.max(1, Math.floor(96 / n)), S = px * n;
      cv.width = S; cv.height = S; cv.style.width = S + 'px'; cv.style.height = S + 'px';
      const ctx = cv.getContext('2d');
      for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {
        ctx.fillStyle = data.causal && j > i ? '#d4d4d4' : rgbCss(colourOf(m[i][j], { kind: 'sequential', lo: 0, hi: mx || 1 }));
        ctx.fillRect(j * px, i * px, px, px);
      }
      b.append(cv, el('span', {}, t('v5.thumb', { h: k + 1 })));
      b.addEventListener('click', () => { head.value = String(k); render(); });
      thumbs.append(b);
    });
  }
  return {
    show() {
      if (!loaded) {
        loaded = true; init(); sync();
        if (state.info.checkpoints.length) load(); else showError('v5', new ApiFailure({ error: t('v5.none') }));
      } else if (sync() && state.info.checkpoints.length) load();
      else render();
    },
    relabel() {
      if (!loaded) return;
      noteText();
      // the example sentence follows the language in view 0; this view follows view 0
      if (sync() && state.info.checkpoints.length) loadSoon();
      if (!state.info.checkpoints.length) showError('v5', new ApiFailure({ error: t('v5.none') }));
      const c = current();
      if (c) {
        layer.querySelectorAll('option').forEach((o) => { o.textContent = t('layer_n', { l: Number(o.value) + 1 }); });
        head.querySelectorAll('option').forEach((o) => { o.textContent = t('v2.head_n', { h: Number(o.value) + 1 }); });
        fillCkpts();
        info(c);
      }
      render();
    },
    redraw() { if (loaded) render(); }
  };
}
