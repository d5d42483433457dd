/* View 0, compose: content score + position term = logit -> softmax, one head, every number printed.
 * Clicking a cell walks d = j - i -> clip or bucket -> the table row -> the position term -> the logit.
 * create() wires the view to its DOM and returns { show, relabel, redraw }. */
import { $, el, fmtInt, fmtCount, fmtNum, debounce } from '../dom.js';
import { t, has } from '../i18n.js';
import { state, SNAP } from '../state.js';
import { api, latest, showError } from '../api.js';
import { Heatmap } from '../heatmap.js';
import { scaleFor, signedScale } from '../colours.js';

const PANEL = ['max_len', 'd_model', 'k', 'head_dim', 'n_heads', 'buckets'];

export function create() {
  const run = latest();
  let data = null, loaded = false, sel = null;
  const text = $('#v0-text'), scheme = $('#v0-scheme'), head = $('#v0-head'), on = $('#v0-on');
  const causal = $('#v0-causal'), seed = $('#v0-seed');
  const model = $('#v0-model'), layer = $('#v0-layer'), kIn = $('#v0-k');
  // the learner's own choice of "causal"; a scheme or model that forces it does not overwrite it, so
  // leaving FoX (or xPos, CoPE, a causal model) gives the box back as the learner left it
  let userCausal = false;
  const maps = {};
  for (const key of ['content', 'position', 'logits', 'probs']) {
    maps[key] = Heatmap($('#v0-' + key), { maxSize: 300, onCell: (i, j) => {
      sel = [i, j];
      // a click or the keyboard moved this map's cursor: outline the same cell in all four maps
      const cur = maps[key].cursor;
      if (cur && cur[0] === i && cur[1] === j) syncCursor(key);
      walk();
    } });
    maps[key].canvas.dataset.key = key;
  }

  function syncCursor(from) {
    if (!sel) return;
    for (const [key, m] of Object.entries(maps)) {
      if (key === from || !m.data) continue;
      if (!m.cursor || m.cursor[0] !== sel[0] || m.cursor[1] !== sel[1]) m.setCursor(sel[0], sel[1], true);
    }
  }
  // what a model was trained on, in the page's language when relpos made it (make_models)
  const trainedOn = (c) => (c.trained_on_parts ? t('v0.trained_builtin', Object.assign({}, c.trained_on_parts, { bytes: fmtCount(c.trained_on_parts.bytes) }))
    : c.trained_on ? t('v0.trained_on', { what: c.trained_on }) : t('v0.trained_on_unknown'));
  const ckOf = (idx) => state.info.checkpoints.find((c) => String(c.index) === String(idx));
  function modelLabel(c) {
    return c.scheme + ' · ' + t(c.shipped ? 'v0.model.shipped' : 'v0.model.yours', { label: c.label }) +
      ' · ' + t(c.fitted === true ? 'v0.fitted_yes' : c.fitted === false ? 'v0.fitted_no' : 'v0.fitted_unknown');
  }
  function fillModels() {
    const keep = model.value;
    model.replaceChildren();
    for (const c of state.info.checkpoints) model.append(el('option', { value: String(c.index) }, modelLabel(c)));
    model.append(el('option', { value: 'initial' }, t('v0.model.initial')));
    if (keep) model.value = keep;
  }
  function fillSchemes() {
    const keep = scheme.value;
    scheme.replaceChildren();
    for (const s of state.info.compose_schemes) {
      scheme.append(el('option', { value: s.name }, s.name + ' · ' + t('v0.kind.' + s.position)));
    }
    if (keep) scheme.value = keep;
  }
  function init() {
    fillSchemes();
    fillModels();
    const dm = state.info.default_model;
    model.value = dm === null || dm === undefined ? 'initial' : String(dm);
    scheme.value = state.info.compose_schemes.find((s) => s.position === 'bucketed') ? state.info.compose_schemes.find((s) => s.position === 'bucketed').name : scheme.options[0].value;
    head.replaceChildren(el('option', { value: '0' }, t('v2.head_n', { h: 1 })), el('option', { value: '1' }, t('v2.head_n', { h: 2 })));
    [scheme, head, layer].forEach((x) => x.addEventListener('change', load));
    model.addEventListener('change', () => { head.value = '0'; layer.value = '0'; load(); });
    causal.addEventListener('change', () => { userCausal = causal.checked; load(); });
    on.addEventListener('change', render);
    [text, seed, kIn].forEach((x) => x.addEventListener('input', loadSoon));
    PANEL.forEach((k) => $('#v0-p-' + k).addEventListener('input', loadSoon));
    if (SNAP) { text.readOnly = true; text.title = t('snapshot_readonly'); }
    $('#v0-form').addEventListener('submit', (ev) => ev.preventDefault());
    controls();
  }
  const trained = () => model.value !== 'initial' && model.value !== '';
  const forced = () => {
    if (trained()) { const c = ckOf(model.value); return c ? c.causal !== false : true; }
    return !!(state.info.compose_schemes.find((s) => s.name === scheme.value) || {}).causal_only;
  };
  // the controls a choice really uses are live, the others locked (and say why)
  function controls() {
    const tr = trained(), c = tr ? ckOf(model.value) : null;
    scheme.disabled = tr;
    if (c && c.scheme) scheme.value = c.scheme;
    $('#v0-seed-wrap').hidden = tr;
    $('#v0-layer-wrap').hidden = !tr;
    const kind = (state.info.compose_schemes.find((s) => s.name === scheme.value) || {}).position;
    $('#v0-k-wrap').hidden = tr || kind !== 'table';
    causal.disabled = forced();
    causal.checked = forced() || userCausal;
    $('label[for=v0-text]').textContent = t(tr ? 'v0.text_bytes' : 'v0.text');
  }
  function params() {
    controls();
    const p = { text: text.value, head: head.value, causal: causal.checked ? 'true' : 'false' };
    if (trained()) { p.model = model.value; p.layer = layer.value || '0'; }
    else {
      p.model = 'initial'; p.scheme = scheme.value; p.seed = seed.value;
      if (!$('#v0-k-wrap').hidden) p.k = kIn.value;
    }
    for (const k of PANEL) {
      const inp = $('#v0-p-' + k);
      if (inp.value !== '' && inp.value !== inp.defaultValue) p['p.' + k] = inp.value;
    }
    return p;
  }
  // heads and layers follow the answer (a trained model has its own H and layers)
  function followModel(d) {
    const want = d.n_heads;
    if (head.options.length !== want) {
      head.replaceChildren();
      for (let h = 0; h < want; h++) head.append(el('option', { value: String(h) }, t('v2.head_n', { h: h + 1 })));
    }
    head.value = String(d.head);
    if (d.n_layers) {
      if (layer.options.length !== d.n_layers) {
        layer.replaceChildren();
        for (let l = 0; l < d.n_layers; l++) layer.append(el('option', { value: String(l) }, t('v0.layer_n', { l: l + 1, n: d.n_layers })));
      }
      layer.value = String(d.layer);
    }
    const note = $('#v0-model-note');
    if (d.model) {
      const c = ckOf(d.model.index) || {};
      note.textContent = t('v0.model_note', {
        scheme: d.model.scheme, fitted: t(d.model.fitted === true ? 'v0.fitted_words_yes' : d.model.fitted === false ? 'v0.fitted_words_no' : 'v0.fitted_words_unknown'),
        on: trainedOn(c),
        opts: Object.entries(d.options || {}).map(([k, v]) => k + ' = ' + v).join(', ') || '—',
        l: d.layer + 1, nl: d.n_layers, h: d.head + 1, nh: d.n_heads });
    } else note.textContent = t('v0.initial_note');
  }
  async function load() {
    try {
      const d = await run(() => api('compose', params()));
      if (d === undefined) return;
      showError('v0', null);
      data = d;
      causal.checked = d.causal;
      followModel(d);
      render();
    } catch (err) { showError('v0', err); }
  }
  const loadSoon = debounce(load, 200);

  const usePos = () => on.checked;
  const logitsOf = () => (usePos() ? data.logits : data.content);
  const probsOf = () => (usePos() ? data.probs : data.probs_content);

  function render() {
    if (!data) return;
    const masked = data.causal ? (i, j) => j > i : null;
    const flat = (mat) => [].concat(...mat.map((r, i) => r.filter((v, j) => !(data.causal && j > i))));
    const zero = data.position.every((r) => r.every((v) => v === 0));
    const common = { labels: data.tokens, masked, showValues: true };
    maps.content.draw(Object.assign({ matrix: data.content, scale: scaleFor(flat(data.content), 'diverging'), unit: 'logit', aria: t('v0.content') }, common));
    maps.position.draw(Object.assign({ matrix: data.position, scale: signedScale(flat(data.position)), unit: 'logit', aria: t('v0.position') }, common));
    maps.logits.draw(Object.assign({ matrix: logitsOf(), scale: scaleFor(flat(logitsOf()), 'diverging'), unit: 'logit', aria: t('v0.logits') }, common));
    maps.probs.draw(Object.assign({ matrix: probsOf(), scale: { kind: 'sequential', lo: 0, hi: 1 }, aria: t('v0.probs') }, common));
    $('#v0-position-cap').textContent = t('v0.position') + (zero ? ' — ' + t('v0.zero') : '');
    $('#v0-logits-cap').textContent = usePos() ? t('v0.logits') : t('v0.logits_off');
    $('#v0-probs-cap').textContent = usePos() ? t('v0.probs') : t('v0.probs_off');
    if (!sel || sel[0] >= data.n || sel[1] >= data.n) sel = [Math.min(2, data.n - 1), Math.min(1, data.n - 1)];
    syncCursor(null);
    const mv = data.argmax_moves || [];
    $('#v0-moves').textContent = data.position_kind === 'none' || data.position_kind === 'embedding' ? '' :
      mv.length ? t('v0.moves', { n: mv.length, of: data.n, rows: mv.slice(0, 8).join(', ') + (mv.length > 8 ? ', …' : '') }) : t('v0.moves_none');
    walk();
    panel();
    const vb = $('#v0-value');
    vb.textContent = data.value_norms ? t('v0.value', { v: data.value_norms.map((x) => fmtNum(x, 3)).join(', ') }) : '';
  }
  function step(key, vars, value) {
    const li = el('li', { 'data-step': key }, t('v0.walk.' + key, vars));
    if (value !== undefined) li.append(' = ', el('span', { class: 'v' }, fmtNum(value, 6)));
    return li;
  }
  function walk() {
    if (!data || !sel) return;
    const [i, j] = sel;
    const list = $('#v0-walk');
    list.replaceChildren();
    const tk = { i, j, a: data.tokens[i], b: data.tokens[j] };
    list.append(el('li', { 'data-step': 'pair' }, t('v0.walk.pair', tk)));
    if (data.causal && j > i) { list.append(el('li', { 'data-step': 'masked' }, t('v0.walk.masked', tk))); rowTable(i); return; }
    const d = data.offsets[i][j];
    list.append(el('li', { 'data-step': 'd' }, t('v0.walk.d', { i, j, d: fmtInt(d) })));
    for (const s of data.steps) {
      const v = s.matrix[i][j];
      list.append(el('li', { 'data-step': s.name }, t('v0.walk.' + s.name, { d: fmtInt(d), k: data.k, v: fmtInt(v) })));
    }
    if (data.rows) {
      const r = data.rows[i][j];
      list.append(el('li', { 'data-step': 'row' }, t('v0.walk.row_' + data.position_kind, { r, h: data.head + 1, k: data.k })));
    }
    const C = data.content[i][j], P = data.position[i][j], L = logitsOf()[i][j];
    list.append(step('position_' + data.position_kind, { i, j }, P));
    list.append(step('content', { i, j }, C));
    if (usePos()) list.append(step('logit', { c: fmtNum(C, 6), p: fmtNum(P, 6) }, L));
    else list.append(step('logit_off', { c: fmtNum(C, 6) }, L));
    const row = probsOf()[i];
    list.append(step('softmax', { i, j }, row[j]));
    rowTable(i);
  }
  // the clicked query's row: every term for every key, and the softmax row summing to 1
  function rowTable(i) {
    const L = logitsOf(), p = probsOf();
    const tbl = el('table', { class: 'mini', id: 'v0-row-table' });
    tbl.append(el('caption', {}, t('v0.row_cap', { i, tok: data.tokens[i] })));
    const rows = [['v0.row.j', (j) => String(j)], ['v0.row.tok', (j) => data.tokens[j]],
      ['v0.row.content', (j) => fmtNum(data.content[i][j], 4)],
      // a masked key has no position term: it never reaches the softmax
      ['v0.row.position', (j) => (data.causal && j > i ? '' : fmtNum(data.position[i][j], 4))],
      ['v0.row.logit', (j) => (data.causal && j > i ? '−∞' : fmtNum(L[i][j], 4))], ['v0.row.p', (j) => fmtNum(p[i][j], 4)]];
    for (const [key, f] of rows) {
      const tr = el('tr', { 'data-row': key.slice(7) }, el('th', { scope: 'row', text: t(key) }));
      for (let j = 0; j < data.n; j++) tr.append(el('td', { class: sel && sel[1] === j ? 'self' : null, text: f(j) }));
      tbl.append(tr);
    }
    const sum = p[i].reduce((a, b) => a + (b || 0), 0);
    $('#v0-row').replaceChildren(el('div', { class: 'scroll' }, tbl), el('p', { class: 'hint', id: 'v0-row-sum' }, t('v0.row_sum', { s: fmtNum(sum, 6) })));
  }
  function panel() {
    const pp = data.params;
    const box = $('#v0-params');
    box.replaceChildren();
    for (const r of pp.rows) {
      box.append(el('p', { 'data-role': r.role }, t('v0.panel.' + r.role, Object.assign({ scheme: r.scheme, p: fmtCount(r.params) }, r.sizes))));
    }
  }
  return {
    show() { if (!loaded) { loaded = true; init(); load(); } else render(); },
    relabel() { if (loaded) { fillSchemes(); fillModels(); controls(); if (data) { followModel(data); render(); } } },
    redraw() { if (loaded && data) render(); }
  };
}
