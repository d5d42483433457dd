/* View 3: the same content at shifted positions, absolute against relative.
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
  const abs = $('#v3-abs'), rel = $('#v3-rel'), c = $('#v3-c'), cNum = $('#v3-c-num'), nIn = $('#v3-n'), head = $('#v3-head'), seed = $('#v3-seed');
  const maps = {};

  function fillOptions() {
    const av = state.info.schemes.filter((s) => s.available);
    const keep = [abs.value, rel.value];
    // each option says what the scheme is under a shift, from its capabilities (the server's `kind`):
    // absolute (position vectors on the tokens), mixed (not purely relative: FIRE's normaliser uses i,
    // dynamic RoPE the length), relative (only j - i), none (NoPE: no position at all)
    for (const [sel, kinds] of [[abs, ['absolute', 'mixed']], [rel, ['relative', 'none']]]) {
      sel.replaceChildren();
      for (const s of av.filter((x) => kinds.includes(x.kind))) {
        sel.append(el('option', { value: s.name }, s.name + ' · ' + t('v3.kind_' + s.kind)));
      }
    }
    if (keep[0]) abs.value = keep[0];
    if (keep[1]) rel.value = keep[1];
  }
  function init() {
    fillOptions();
    abs.value = state.info.shift_defaults.absolute;
    rel.value = state.info.shift_defaults.relative;
    head.replaceChildren(el('option', { value: '0' }, '1'), el('option', { value: '1' }, '2'));
    cNum.max = String(state.info.limits.max_shift);
    c.max = String(state.info.limits.max_shift);  // the slider reaches every shift the box accepts
    nIn.max = String(state.info.limits.max_shift_len);
    [abs, rel, head].forEach((x) => x.addEventListener('change', load));
    c.addEventListener('input', () => { cNum.value = c.value; loadSoon(); });
    cNum.addEventListener('input', () => { clampC(false); loadSoon(); });
    cNum.addEventListener('change', () => { clampC(true); loadSoon(); });
    [nIn, seed].forEach((x) => x.addEventListener('input', loadSoon));
    $('#v3-form').addEventListener('submit', (ev) => ev.preventDefault());
  }
  // a typed shift moves the slider; one outside 0 … max is clamped visibly (the box is rewritten and
  // a note says so) when the field is left, so the page never computes a value other than the one shown
  function clampC(rewrite) {
    const max = Number(cNum.max), raw = Number(cNum.value);
    const note = $('#v3-c-note');
    if (cNum.value === '' || !Number.isFinite(raw)) return;
    const v = Math.min(max, Math.max(0, Math.round(raw)));
    c.value = String(v);
    if (v !== raw) {
      note.hidden = false;
      note.textContent = t('v3.clamped', { v: fmtCount(raw), max: fmtCount(max) });
      if (rewrite) cNum.value = String(v);
    } else { note.hidden = true; note.textContent = ''; }
  }
  function params() {
    return { absolute: abs.value, relative: rel.value, n: nIn.value, c: c.value, seed: seed.value, head: head.value };
  }
  async function load() {
    try {
      const d = await run(() => api('shift', params()));
      if (d === undefined) return;
      showError('v3', null);
      data = d;
      render();
    } catch (err) { showError('v3', err); }
  }
  const loadSoon = debounce(load, 200);

  function render() {
    if (!data) return;
    const host = $('#v3-rows');
    const keep = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
    host.replaceChildren();
    // one colour scale for both difference maps, so "unchanged" looks white next to "changed"
    // one colour scale for both difference maps, floored at the rounding tolerance: a difference
    // within float32 rounding draws white, so noise never shows as full red or blue
    const tolOf = (r) => r.tolerance_f32 || r.tolerance || 0;
    const quiet = (r) => (r.unchanged && data.c !== 0 ? r.diff.map((row) => row.map((v) => (v !== null && Math.abs(v) <= tolOf(r) ? 0 : v))) : r.diff);
    const shown = { absolute: quiet(data.absolute), relative: quiet(data.relative) };
    const dsc = scaleFor([].concat(...shown.absolute, ...shown.relative), 'diverging');
    dsc.m = Math.max(dsc.m, 10 * Math.max(tolOf(data.absolute), tolOf(data.relative)));
    for (const slot of ['absolute', 'relative']) {
      const r = data[slot];
      const row = el('div', { class: 'shift-row', 'data-slot': slot });
      const isSame = r.unchanged === true, noShift = data.c === 0;
      const kind = r.kind || (r.relative ? 'relative' : 'absolute');
      row.append(el('h3', {}, r.scheme + ' · ' + t('v3.kind_' + kind)));
      // the verdict is the float64 reference's: float32 rounding shows in the maps but decides nothing
      const vals = { v: fmtNum(r.max_abs_diff_ref, 3), f: fmtNum(r.max_abs_diff, 3), tol: fmtNum(r.tolerance, 2) };
      const verdict = noShift
        ? el('p', { class: 'verdict', id: 'v3-verdict-' + slot }, t('v3.no_shift'))
        : el('p', { class: 'verdict ' + (isSame ? 'same' : 'changed'), id: 'v3-verdict-' + slot },
          (isSame ? '= ' : '≠ ') + t(isSame ? 'v3.same' : 'v3.changed', vals));
      row.append(verdict);
      // say why a scheme that is not purely relative may still come out unchanged, and why NoPE cannot move
      let note = '';
      if (kind === 'none') note = t('v3.note_none');
      else if (kind !== 'relative' && !noShift) note = has('v3.note.' + r.scheme) ? t('v3.note.' + r.scheme) : (isSame ? t('v3.note_same') : '');
      if (note) row.append(el('p', { class: 'hint', id: 'v3-note-' + slot }, note));
      const grid = el('div', { class: 'triple' });
      const flat = [].concat(...r.base, ...r.shifted);
      const sc = scaleFor(flat, 'diverging');
      const readout = el('p', { class: 'readout', 'aria-live': 'polite', id: 'v3-readout-' + slot });
      const e = data.n - 1;
      const panels = [
        ['base', t('v3.base', { e: e }), r.base, sc],
        ['shifted', t('v3.shifted', { c: data.c, e: data.c + e }), r.shifted, sc],
        ['diff', t('v3.diff'), shown[slot], dsc]
      ];
      const hms = [];
      for (const [key, cap, mat, scale] of panels) {
        const fig = el('figure', { class: 'fig small' }, el('figcaption', {}, cap));
        const box = el('div', { class: 'hm-host' });
        fig.append(box); grid.append(fig);
        const h = Heatmap(box, {
          maxSize: 300, onCell: (i, j) => {
            readout.textContent = t('v3.cell', { i, j, a: fmtNum(r.base[i][j], 5), b: fmtNum(r.shifted[i][j], 5), d: fmtNum(r.diff[i][j], 3) });
          }
        });
        h.canvas.dataset.key = slot + '-' + key;
        hms.push([h, mat, scale, cap]);
      }
      row.append(grid, readout);
      host.append(row);
      hms.forEach(([h, mat, scale, cap], k) => h.draw({ matrix: mat, scale: scale, unit: 'logit', aria: r.scheme + ': ' + cap, tickOffset: k === 1 ? data.c : 0 }));
      maps[slot] = hms.map((x) => x[0]);
    }
    if (keep) { const f = host.querySelector(`[data-key="${keep}"]`); if (f) f.focus(); }
  }
  return {
    show() { if (!loaded) { loaded = true; init(); load(); } else if (data) render(); },
    relabel() { if (loaded) { fillOptions(); render(); } },
    redraw() { if (loaded && data) render(); }
  };
}
