/* View 1: relative distance between the tokens of a sentence, with clipping.
 * create() wires the view to its DOM and returns { show, relabel, redraw }. */
import { $, el, svg, fmtInt, fmtNum, debounce, clampInt, MINUS } from '../dom.js';
import { t, has } from '../i18n.js';
import { state, SNAP } from '../state.js';
import { api, ApiFailure, latest, showError } from '../api.js';
import { Heatmap } from '../heatmap.js';
import { lineChart, marker } from '../linechart.js';
import { OKABE, DASHES, MARKERS, scaleFor, colourOf, rgbCss } from '../colours.js';

export function create() {
  const run = latest();
  let data = null, sel = null, loaded = false;
  const text = $('#v1-text'), flip = $('#v1-flip'), clip = $('#v1-clip'), clipOut = $('#v1-clip-out');

  async function load() {
    const params = { text: text.value, convention: flip.checked ? 'i-j' : 'j-i', clip: clip.value };
    try {
      const d = await run(() => api('offsets', params));
      if (d === undefined) return;
      showError('v1', null);
      data = d;
      const maxK = Math.max(1, d.n - 1);
      if (Number(clip.max) !== maxK) {
        clip.max = String(maxK);
        if (Number(clip.value) > maxK) { clip.value = String(maxK); clipOut.value = clip.value; return load(); }
      }
      if (sel === null || sel >= d.n) sel = Math.min(d.n - 1, Math.floor((d.n - 1) / 2));
      render();
    } catch (err) {
      // no stale tokens next to the error: what is shown must be what the message is about
      data = null;
      $('#v1-tokens').replaceChildren(); $('#v1-table').replaceChildren(); $('#v1-matrix').replaceChildren();
      $('#v1-readout').textContent = '';
      showError('v1', err);
    }
  }
  const loadSoon = debounce(load, 150);

  function render() {
    relabelConv();
    if (!data) return;
    const box = $('#v1-tokens');
    const i = sel, n = data.n, k = data.clip;
    const focusIdx = box.contains(document.activeElement) ? Number(document.activeElement.dataset.j) : null;
    box.replaceChildren();
    let nsat = 0, lo = Infinity, hi = -Infinity;
    for (let j = 0; j < n; j++) {
      const d = data.offsets[i][j];
      const c = data.clipped ? data.clipped[i][j] : d;
      const sat = c !== d;
      if (sat) nsat++;
      lo = Math.min(lo, d); hi = Math.max(hi, d);
      const side = j < i ? 'left' : j > i ? 'right' : 'self';
      const b = el('button', {
        type: 'button', class: 'tok ' + side + (sat ? ' saturated' : ''), 'data-j': String(j),
        'aria-pressed': String(j === i),
        'aria-label': t('v1.tok_aria', { tok: data.tokens[j], j: j, d: fmtInt(d), clip: sat ? t('v1.clipped_to', { v: fmtInt(c) }) : '', side: t('v1.side_' + side) })
      },
      el('span', { class: 'tok-side', 'aria-hidden': 'true', text: side === 'left' ? '◀' : side === 'right' ? '▶' : '●' }),
      el('span', { class: 'tok-text', text: data.tokens[j] }),
      el('span', { class: 'tok-off', text: 'd = ' + fmtInt(d) }),
      el('span', { class: 'tok-clip', text: sat ? '→ ' + fmtInt(c) : '\u00a0' }));
      b.addEventListener('click', () => { sel = j; render(); });
      box.append(b);
    }
    if (focusIdx !== null) { const f = box.querySelector(`[data-j="${focusIdx}"]`); if (f) f.focus(); }
    // counted words agree with their numbers ("1 row", "one of them saturates")
    const nrows = k === null ? null : 2 * k + 1;
    $('#v1-readout').textContent = t('v1.readout', {
      i: i, tok: data.tokens[i], lo: fmtInt(lo), hi: fmtInt(hi), k: k === null ? '∞' : k, nsat: nsat,
      sat: t(nsat === 0 ? 'v1.sat_0' : nsat === 1 ? 'v1.sat_1' : 'v1.sat_n', { n: nsat }),
      rows: nrows === null ? '—' : t(nrows === 1 ? 'v1.rows_1' : 'v1.rows_n', { r: nrows })
    });
    // a compact table: j, d, clipped, table row -- cut into blocks of columns that fit the width
    const rows = [['v1.row_j', (j) => String(j)], ['v1.row_d', (j) => fmtInt(data.offsets[i][j])]];
    if (data.clipped) {
      rows.push(['v1.row_clip', (j) => fmtInt(data.clipped[i][j])]);
      rows.push(['v1.row_index', (j) => String(data.clipped[i][j] + k)]);
    }
    const host = $('#v1-table');
    const per = Math.max(4, Math.floor(((host.clientWidth || 600) - 130) / 40));
    const blocks = [];
    for (let j0 = 0; j0 < n; j0 += per) {
      const tbl = el('table', { class: 'mini' });
      for (const [key, f] of rows) {
        const tr = el('tr', {}, el('th', { scope: 'row', text: t(key) }));
        for (let j = j0; j < Math.min(n, j0 + per); j++) {
          const side = j < i ? 'left' : j > i ? 'right' : 'self';
          tr.append(el('td', { class: side, text: f(j) }));
        }
        tbl.append(tr);
      }
      blocks.push(tbl);
    }
    host.replaceChildren(...blocks);
    renderMatrix();
  }
  // the whole N x N matrix of offsets, with the clipped value where it differs
  function renderMatrix() {
    const box = $('#v1-matrix');
    if (!data) { box.replaceChildren(); return; }
    const n = data.n;
    const tbl = el('table', { class: 'mini matrix', id: 'v1-matrix-table' });
    tbl.append(el('caption', {}, t('v1.matrix_cap', { n })));
    const head = el('tr', {}, el('th', { scope: 'col', text: 'i \\ j' }));
    for (let j = 0; j < n; j++) head.append(el('th', { scope: 'col', text: String(j) }));
    tbl.append(head);
    for (let i = 0; i < n; i++) {
      const tr = el('tr', { class: i === sel ? 'sel' : null }, el('th', { scope: 'row', text: i + ' ' + data.tokens[i] }));
      for (let j = 0; j < n; j++) {
        const d = data.offsets[i][j], c = data.clipped ? data.clipped[i][j] : d;
        tr.append(el('td', { class: c !== d ? 'saturated' : null, title: c !== d ? t('v1.clipped_to', { v: fmtInt(c) }) : null,
          text: fmtInt(d) + (c !== d ? '→' + fmtInt(c) : '') }));
      }
      tbl.append(tr);
    }
    box.replaceChildren(el('div', { class: 'scroll' }, tbl));
  }
  function relabelConv() {
    $('#v1-conv').textContent = t(flip.checked ? 'v1.conv_ij' : 'v1.conv_ji');
  }

  text.addEventListener('input', loadSoon);
  flip.addEventListener('change', load);
  clip.addEventListener('input', () => { clipOut.value = clip.value; loadSoon(); });
  $('#v1-form').addEventListener('submit', (ev) => ev.preventDefault());
  // an exported page computes view 1 itself (static/local.js): the sentence stays editable offline
  return {
    show() { if (!loaded) { loaded = true; load(); } },
    relabel() { render(); },
    redraw() {}
  };
}
