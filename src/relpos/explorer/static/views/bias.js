/* View 2: bias matrices, curves against d = j - i, buckets; content-dependent terms on a typed text.
 * create() wires the view to its DOM and returns { show, relabel, redraw }. */
import { create as ropeSection } from './rope.js';
import { $, el, svg, fmtInt, fmtCount, fmtNum, debounce, clampInt, MINUS } from '../dom.js';
import { t, has } from '../i18n.js';
import { state, SNAP } from '../state.js';
import { api, ApiFailure, latest, showError } from '../api.js';
import { Heatmap } from '../heatmap.js';
import { lineChart, marker } from '../linechart.js';
import { OKABE, DASHES, MARKERS, scaleFor, colourOf, rgbCss, signedScale } from '../colours.js';

// the display name of a bias-view entry: the translated name, else the registry name
function schemeLabel(e) {
  return has('scheme.' + e.key) ? t('scheme.' + e.key) : e.key;
}

export function create() {
  const run = latest();
  let data = null, loaded = false, entry = null;
  const scheme = $('#v2-scheme'), nIn = $('#v2-n'), causal = $('#v2-causal'), heads = $('#v2-heads');
  const head = $('#v2-head'), headDim = $('#v2-headdim'), seed = $('#v2-seed'), show = $('#v2-show');
  const optList = $('#v2-option-list'), textIn = $('#v2-text');
  const hm = Heatmap($('#v2-heatmap'), { onCell: cell, maxSize: 400 });
  const aux = Heatmap($('#v2-aux'), { onCell: auxCell, maxSize: 400 });  // CoPE p_ij, DeBERTa's table rows
  let userCausal = false;  // the switch's state before a causal-only scheme forced it on
  const isContent = () => !!entry && entry.kind === 'content';

  function fillSchemes() {
    scheme.replaceChildren();
    for (const e of state.info.bias_schemes) {
      const o = el('option', { value: e.key, disabled: !e.available },
        schemeLabel(e) + (e.available ? '' : ' ' + t('v2.unavailable')));
      scheme.append(o);
    }
    const first = state.info.bias_schemes.find((e) => e.available);
    scheme.value = first ? first.key : '';
  }
  function fillHeads() {
    const H = clampInt(heads.value, 1, state.info.limits.max_heads, 4);
    const cur = clampInt(head.value, 0, H - 1, 0);
    head.replaceChildren();
    for (let h = 0; h < H; h++) head.append(el('option', { value: String(h) }, t('v2.head_n', { h: h + 1 })));
    head.value = String(Math.min(cur, H - 1));
  }
  function buildOptions() {
    entry = state.info.bias_schemes.find((e) => e.key === scheme.value) || null;
    optList.replaceChildren();
    if (!entry) return;
    $('#v2-head-controls').hidden = !entry.per_head;
    $('#v2-headdim-wrap').hidden = !entry.head_dim;
    $('#v2-seed-wrap').hidden = !entry.learned && entry.kind !== 'content';  // nothing random to seed
    $('#v2-values-wrap').hidden = !entry.trained;  // trained values ship only for some schemes
    $('#v2-show-wrap').hidden = entry.kind !== 'bucketed';
    // content-dependent schemes read a typed text instead of a length
    $('#v2-n-wrap').hidden = isContent();
    $('#v2-text-wrap').hidden = !isContent();
    syncCausal();
    for (const o of entry.options || []) {
      const id = 'v2-opt-' + o.name;
      const label = el('label', { for: id, 'data-key': 'opt.' + o.name }, has('opt.' + o.name) ? t('opt.' + o.name) : o.name);
      let input;
      if (o.type === 'bool') {
        input = el('input', { id, type: 'checkbox', 'data-opt': o.name, 'data-type': 'bool' });
        input.checked = !!o.default;
        optList.append(el('div', { class: 'switch-row' }, input, label));
      } else {
        input = el('input', { id, type: 'number', step: o.type === 'int' ? '1' : 'any', 'data-opt': o.name, 'data-type': o.type, value: String(o.default), inputmode: o.type === 'int' ? 'numeric' : 'decimal' });
        optList.append(label, input);
      }
      if (o.library_default !== undefined) {
        optList.append(el('p', { class: 'hint', 'data-lib': String(o.library_default), 'data-start': String(o.default) },
          t('v2.lib_default', { v: o.library_default, w: o.default })));
      }
      input.dataset.default = String(o.default);
      input.addEventListener(o.type === 'bool' ? 'change' : 'input', loadSoon);
    }
    for (const o of entry.overrides || []) {
      const id = 'v2-set-' + o.name;
      const label = el('label', { for: id, 'data-key': 'set.' + o.name }, t('set.' + o.name));
      const input = el('input', { id, type: 'number', step: 'any', min: String(o.min), max: String(o.max), 'data-set': o.name, placeholder: '—', inputmode: 'decimal' });
      input.addEventListener('input', loadSoon);
      optList.append(label, input);
    }
    $('#v2-options').hidden = !optList.childElementCount;
  }
  // causal-only schemes, and values trained in a causal LM, force the switch on (and restore it after)
  function syncCausal() {
    const forced = entry && (entry.causal_only || (entry.trained && entry.trained_causal && $('#v2-values').value === 'trained'));
    if (forced) {
      if (!causal.disabled) userCausal = causal.checked;
      causal.checked = true; causal.disabled = true;
    } else if (causal.disabled) {
      causal.disabled = false; causal.checked = userCausal;
    }
  }
  function params() {
    const p = { scheme: scheme.value, causal: causal.checked ? 'true' : 'false' };
    if (isContent()) p.text = textIn.value; else p.n = nIn.value;
    if (!entry) return p;
    // trained values bring their own options, H and D: the (locked) controls are not sent
    const trainedVals = entry.trained && $('#v2-values').value === 'trained';
    if (entry.per_head) {
      p.n_heads = heads.value; p.head = head.value; p.seed = seed.value;
      if (entry.head_dim && !trainedVals) p.head_dim = headDim.value;
    }
    if (entry.kind === 'bucketed') p.show = show.value;
    if (entry.trained) p.values = $('#v2-values').value;
    if (!trainedVals) optList.querySelectorAll('[data-opt]').forEach((inp) => {
      const typ = inp.dataset.type;
      if (typ === 'bool') { if (String(inp.checked) !== inp.dataset.default) p['opt.' + inp.dataset.opt] = String(inp.checked); }
      else if (inp.value !== '' && Number(inp.value) !== Number(inp.dataset.default)) p['opt.' + inp.dataset.opt] = inp.value;
    });
    optList.querySelectorAll('[data-set]').forEach((inp) => { if (inp.value !== '') p['set.' + inp.dataset.set] = inp.value; });
    return p;
  }
  async function load() {
    if (!entry) return;
    try {
      const d = await run(() => api('bias', params()));
      if (d === undefined) return;
      showError('v2', null);
      data = d;
      lockTrained();
      render();
    } catch (err) { showError('v2', err); }
  }
  const loadSoon = debounce(load, 200);
  // trained values: the options, H and D the values were trained with are shown and locked (a
  // table of 32 buckets cannot be read with 16); initial values give the controls back
  function lockTrained() {
    const tr = data && data.values_from === 'trained';
    optList.querySelectorAll('[data-opt]').forEach((inp) => {
      const v = data && data.used_options ? data.used_options[inp.dataset.opt] : undefined;
      if (tr && v !== undefined) {
        if (inp.dataset.type === 'bool') inp.checked = !!v; else inp.value = String(v);
      } else if (!tr && inp.disabled) {
        if (inp.dataset.type === 'bool') inp.checked = inp.dataset.default === 'true'; else inp.value = inp.dataset.default;
      }
      inp.disabled = tr;
    });
    if (tr) {
      if (heads.value !== String(data.n_heads)) { heads.value = String(data.n_heads); fillHeads(); head.value = String(data.head); }
      headDim.value = String(data.head_dim);
    }
    heads.disabled = tr; headDim.disabled = tr;
  }

  // the readout follows the data: after a new answer it shows the same cell of the new matrix,
  // or nothing when that cell is gone (never a number of the previous scheme)
  let last = null;
  function refreshReadout() {
    const c = hm.cursor || last;
    if (c && data && c[0] < data.matrix.length && c[1] < data.matrix[0].length) cell(c[0], c[1]);
    else { last = null; $('#v2-readout').textContent = ''; }
  }
  function valueName() { return t('v2.what.' + (data ? data.values : 'bias')); }
  function cell(i, j) {
    if (!data) return;
    last = [i, j];
    const d = j - i;
    const out = $('#v2-readout');
    if (data.content) {
      const tk = { i, j, a: data.tokens[i], b: data.tokens[j] };
      if (data.causal && j > i) { out.textContent = t('v2.cell_content_masked', tk); return; }
      tk.v = fmtNum(data.matrix[i][j], 6);
      if (data.positions) { tk.p = fmtNum(data.positions[i][j], 5); out.textContent = t('v2.cell_cope', tk); }
      else out.textContent = t('v2.cell_content', tk);
      return;
    }
    if (data.causal && j > i) { out.textContent = t('v2.cell_masked', { i, j, d: fmtInt(d) }); return; }
    const v = data.matrix[i][j];
    const name = data.values === 'bucket' ? 'bucket' : data.values === 'norm' ? '‖aᴷ‖' : 'b';
    out.textContent = t('v2.cell', { i, j, d: fmtInt(d), name, v: data.values === 'bucket' ? fmtInt(v) : fmtNum(v, 6) });
  }
  function auxCell(i, j) {
    if (!data || !data.content) return;
    const out = $('#v2-aux-readout');
    const tk = { i, j, a: data.tokens[i], b: data.tokens[j] };
    if (data.causal && j > i) { out.textContent = t('v2.cell_content_masked', tk); return; }
    if (data.positions) out.textContent = t('v2.aux_cell_cope', Object.assign(tk, { p: fmtNum(data.positions[i][j], 5) }));
    else if (data.rel_index) out.textContent = t('v2.aux_cell_deberta', Object.assign(tk, { r: fmtInt(i - j), v: String(data.rel_index[i][j]) }));
  }
  // content-dependent schemes: the score for the typed text, and what drives it
  function renderContent() {
    const masked = data.causal ? (i, j) => j > i : null;
    const flat = [];
    data.matrix.forEach((r, i) => r.forEach((v, j) => { if (!(data.causal && j > i)) flat.push(v); }));
    hm.draw({ matrix: data.matrix, labels: data.tokens, scale: signedScale(flat), masked, unit: 'logit', aria: $('#v2-hm-cap').textContent });
    refreshReadout();
    const curve = $('#v2-curve'), auxWrap = $('#v2-aux-wrap'), gates = $('#v2-gates');
    $('#v2-buckets').replaceChildren();
    gates.replaceChildren();
    if (data.gates) {
      auxWrap.hidden = true; curve.hidden = false;
      const n = data.n, xs = Array.from({ length: n }, (_, k) => k);
      const series = [];
      data.gates.forEach((ys, h) => {
        if (h !== data.head) series.push({ label: t('v2.head_n', { h: h + 1 }), xs, ys, colour: OKABE[h % 8], width: 1, opacity: 0.4, dash: DASHES[h % 4] });
      });
      series.push({ label: t('v2.head_n', { h: data.head + 1 }), xs, ys: data.gates[data.head], colour: OKABE[data.head % 8], width: 3, marker: n <= 40 ? MARKERS[data.head % 4] : null });
      lineChart(curve, { series, xLabel: t('v2.gates_x'), yLabel: t('v2.gates_y'), xTicks: n <= 16 ? xs : null, yInclude: [0, 1], maxWidth: 500, height: 240, aria: $('#v2-curve-cap').textContent });
      const tbl = el('table', { class: 'mini', id: 'v2-gate-table' });
      const rows = [['v2.row_t', (k) => String(k)], ['v2.row_tok', (k) => data.tokens[k]],
        ['v2.row_gate', (k) => fmtNum(data.gates[data.head][k], 4)], ['v2.row_log', (k) => fmtNum(data.log_gates[data.head][k], 4)]];
      for (const [key, f] of rows) {
        const tr = el('tr', { 'data-row': key.slice(7) }, el('th', { scope: 'row', text: t(key, { h: data.head + 1 }) }));
        for (let k = 0; k < n; k++) tr.append(el('td', { text: f(k) }));
        tbl.append(tr);
      }
      gates.append(el('div', { class: 'scroll' }, tbl));  // a long text scrolls inside, not the page
    } else if (data.positions || data.rel_index) {
      curve.hidden = true; curve.replaceChildren(); auxWrap.hidden = false;
      const mat = data.positions || data.rel_index;
      const vals = [];
      mat.forEach((r, i) => r.forEach((v, j) => { if (!(data.causal && j > i)) vals.push(v); }));
      const sc = scaleFor(vals, 'sequential');
      if (data.positions) sc.lo = 0;
      aux.draw({ matrix: mat, labels: data.tokens, scale: sc, masked, unit: '', aria: $('#v2-curve-cap').textContent });
      if (aux.cursor) auxCell(aux.cursor[0], aux.cursor[1]); else $('#v2-aux-readout').textContent = '';
    } else {  // a content term with nothing more to show (e.g. Transformer-XL's u, v and R terms)
      curve.hidden = true; curve.replaceChildren(); auxWrap.hidden = true;
    }
    const ps = $('#v2-params');
    ps.replaceChildren(el('p', { class: 'hint' }, t('v2.scale', { s: fmtNum(data.scale, 5), c: data.content_dim })));
    ps.append(el('p', { class: 'hint' }, data.learned_params > 0 ? t('v2.learned', { seed: data.seed, p: fmtCount(data.learned_params) }) : t('v2.fixed')));
    if (data.paper) ps.append(el('p', { class: 'hint' }, t('v2.paper') + ': ', el('a', { href: data.paper, rel: 'noopener noreferrer', target: '_blank' }, data.paper)));
  }
  function render() {
    relabel();
    if (!data) return;
    if (data.content) { $('#v2-curve-legend').replaceChildren(); renderContent(); return; }
    $('#v2-curve').hidden = false; $('#v2-aux-wrap').hidden = true; $('#v2-gates').replaceChildren();
    const flat = [];
    data.matrix.forEach((r, i) => r.forEach((v, j) => { if (!(data.causal && j > i)) flat.push(v); }));
    const signs = new Set(flat.filter((v) => v !== null && v !== 0).map((v) => Math.sign(v)));
    let scale;
    if (data.values === 'bias' && signs.size > 1) scale = scaleFor(flat, 'diverging');
    else if (data.values === 'bias') {  // one-signed (ALiBi, KERPLE: all <= 0): half of T5's RdBu, ending at 0
      scale = signedScale(flat);
    } else scale = scaleFor(flat, data.values === 'bucket' && signs.has(-1) ? 'diverging' : 'sequential');
    hm.draw({
      matrix: data.matrix, scale,
      masked: data.causal ? (i, j) => j > i : null,
      unit: data.values === 'bias' ? 'logit' : '',
      aria: $('#v2-hm-cap').textContent
    });
    refreshReadout();
    // curve
    const series = [];
    const stepped = data.values !== 'bias' || data.kind === 'bucketed';
    data.curves.forEach((ys, h) => {
      if (h === data.head) return;
      series.push({ label: t('v2.head_n', { h: h + 1 }), xs: data.offsets, ys, colour: OKABE[h % 8], width: 1, opacity: 0.4, dash: DASHES[h % 4], step: stepped });
    });
    const sel = data.curves.length > 1 ? data.head : 0;
    series.push({ label: t('v2.head_n', { h: sel + 1 }), xs: data.offsets, ys: data.curves[sel], colour: OKABE[sel % 8], width: 3, step: stepped, marker: data.offsets.length <= 40 ? MARKERS[sel % 4] : null });
    const vlines = [];
    // bucket boundaries as dotted lines only while they stay readable; the table lists them all
    const wide = data.buckets ? data.buckets.filter((b, k) => k > 0 && (b.to > b.from || data.buckets[k - 1].to > data.buckets[k - 1].from)).length : 0;
    if (data.buckets && wide <= 16) {
      const bs = data.buckets;
      // mark where a bucket wider than one offset starts or ends (the exact range needs no lines)
      bs.forEach((b, k) => {
        if (k > 0 && (b.to > b.from || bs[k - 1].to > bs[k - 1].from)) vlines.push({ x: b.from - 0.5, colour: '#666', dash: '2 3' });
      });
    }
    if (data.k !== undefined && data.k < data.n) {
      // Shaw: offsets beyond +-k reuse the end rows of the table
      vlines.push({ x: -data.k - 0.5, colour: '#666', dash: '4 3', label: MINUS + 'k' });
      if (!data.causal) vlines.push({ x: data.k + 0.5, colour: '#666', dash: '4 3', label: 'k' });
    }
    lineChart($('#v2-curve'), { series, vlines, xLabel: t('v2.x'), yLabel: t('v2.y.' + data.values), maxWidth: 500, height: 280, aria: $('#v2-curve-cap').textContent });
    // a legend for the heads' curves (the chosen head is the bold one)
    const leg = $('#v2-curve-legend');
    leg.replaceChildren();
    if (series.length > 1) {
      for (const sr of series.slice().sort((a, b) => (a.label < b.label ? -1 : 1))) {
        const sw = svg('svg', { width: 30, height: 12, 'aria-hidden': 'true' },
          svg('line', { x1: 0, x2: 30, y1: 6, y2: 6, stroke: sr.colour, 'stroke-width': sr.width, 'stroke-dasharray': sr.dash || null, opacity: sr.opacity === undefined ? 1 : sr.opacity }));
        leg.append(el('li', {}, sw, ' ' + sr.label));
      }
    }
    // parameters
    const ps = $('#v2-params');
    ps.replaceChildren();
    // per-head numbers the scheme exposes (the server lists them: ALiBi's slopes, KERPLE's r1 and r2, ...)
    for (const sc of data.scalars || []) {
      const vals = data[sc.attribute];
      if (!vals) continue;
      const v = vals.map((x) => fmtNum(x, 4)).join(', ');
      const key = 'v2.values.' + sc.attribute;
      ps.append(el('p', { 'data-scalar': sc.attribute }, has(key) ? t(key, { v }) : t('v2.values.other', { name: sc.attribute, v })));
    }
    if (data.values_from === 'trained') {
      ps.append(el('p', { class: 'hint', id: 'v2-made-by' }, t('v2.made_by', { how: data.made_by || '' }) + ' ' +
        t(data.fitted === true ? 'v0.fitted_words_yes' : data.fitted === false ? 'v0.fitted_words_no' : 'v0.fitted_words_unknown') + '.'));
      ps.append(el('p', { class: 'hint', id: 'v2-locked' }, t('v2.trained_locked')));
    }
    if (data.learned_params !== undefined) {
      const key = data.learned_params > 0 ? (data.values_from === 'trained' ? 'v2.learned_trained' : 'v2.learned') : 'v2.fixed';
      ps.append(el('p', { class: 'hint', id: 'v2-learned' }, t(key, { seed: data.seed, p: fmtCount(data.learned_params) })));
    }
    if (data.paper) ps.append(el('p', { class: 'hint' }, t('v2.paper') + ': ', el('a', { href: data.paper, rel: 'noopener noreferrer', target: '_blank' }, data.paper)));
    // bucket table
    const bt = $('#v2-buckets');
    bt.replaceChildren();
    if (data.buckets) {
      const tbl = el('table', { class: 'mini' },
        el('caption', {}, t('v2.buckets')),
        el('tr', {}, el('th', { scope: 'col' }, t('v2.bucket')), el('th', { scope: 'col' }, t('v2.range')), el('th', { scope: 'col' }, t('v2.width'))));
      for (const b of data.buckets) {
        tbl.append(el('tr', {}, el('td', {}, fmtInt(b.bucket)), el('td', {}, b.from === b.to ? fmtInt(b.from) : fmtInt(b.from) + ' … ' + fmtInt(b.to)), el('td', {}, String(b.to - b.from + 1))));
      }
      bt.append(el('div', { class: 'scroll short' }, tbl));
    }
  }
  function relabel() {
    const key = scheme.value;
    // a scheme without its own text in the tables is described by the server's summary
    const known = state.info.bias_schemes.find((x) => x.key === key) || {};
    $('#v2-scheme-text').textContent = has('x.' + key) ? t('x.' + key) : (known.summary || key);
    $('#v2-formula').textContent = has('f.' + key) ? t('f.' + key) : '';
    const note = $('#v2-content-note');
    note.hidden = !isContent();
    note.textContent = isContent() ? t('v2.content_note', { seed: clampInt(seed.value, 0, 2147483647, 0) }) : '';
    optList.querySelectorAll('p[data-lib]').forEach((x) => { x.textContent = t('v2.lib_default', { v: x.dataset.lib, w: x.dataset.start }); });
    scheme.querySelectorAll('option').forEach((o) => {
      const e = state.info.bias_schemes.find((x) => x.key === o.value);
      o.textContent = schemeLabel(e || { key: o.value }) + (e && !e.available ? ' ' + t('v2.unavailable') : '');
    });
    head.querySelectorAll('option').forEach((o) => { o.textContent = t('v2.head_n', { h: Number(o.value) + 1 }); });
    optList.querySelectorAll('label[data-key]').forEach((l) => { const k = l.dataset.key; if (has(k)) l.textContent = t(k); });
    if (data) {
      const what = valueName();
      $('#v2-hm-cap').textContent = (data.curves && data.curves.length > 1) || data.content || (entry && entry.per_head)
        ? t('v2.hm_cap', { what, h: data.head + 1, n: data.n }) : t('v2.hm_cap_nohead', { what, n: data.n });
      let cap;
      if (data.gates) cap = t('v2.gates_cap', { h: data.head + 1 });
      else if (data.positions) cap = t('v2.aux_cope', { h: data.head + 1, cap: data.npos_max - 1 });
      else if (data.rel_index) cap = t('v2.aux_deberta', { s: data.span });
      else if (data.content) cap = '';  // a content term with nothing more to draw (Transformer-XL): no caption over an empty area
      else cap = data.curve_row !== undefined ? t('v2.curve_row', { what, i: data.curve_row }) : t('v2.curve_cap', { what });
      $('#v2-curve-cap').textContent = cap;
      $('#v2-curve-cap').hidden = !cap;
    }
  }
  function init() {
    fillSchemes(); fillHeads(); buildOptions();
    nIn.max = String(state.info.limits.max_len);
    heads.max = String(state.info.limits.max_heads);
    scheme.addEventListener('change', () => { buildOptions(); relabel(); load(); });
    heads.addEventListener('input', () => { fillHeads(); loadSoon(); });
    [nIn, headDim, seed, textIn].forEach((x) => x.addEventListener('input', loadSoon));
    $('#v2-values').addEventListener('change', syncCausal);
    [causal, head, show, $('#v2-values')].forEach((x) => x.addEventListener('change', load));
    causal.addEventListener('change', () => { if (!causal.disabled) userCausal = causal.checked; });
    textIn.maxLength = state.info.limits.max_text_chars;
    if (SNAP) { textIn.readOnly = true; textIn.title = t('snapshot_readonly'); }
    $('#v2-form').addEventListener('submit', (ev) => ev.preventDefault());
  }
  const geometry = ropeSection();  // RoPE's geometry, a section of this view
  return {
    show() { if (!loaded) { loaded = true; init(); load(); } else if (data) render(); geometry.show(); },
    relabel() { if (loaded) render(); geometry.relabel(); },
    redraw() { if (loaded && data) render(); geometry.redraw(); }
  };
}
