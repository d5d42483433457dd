/* View 4: extrapolation curves from relpos compare results.
 * create() wires the view to its DOM and returns { show, relabel, redraw }. */
import { $, el, svg, fmtInt, fmtNum, debounce, clampInt, MINUS } from '../dom.js';
import { t, has } from '../i18n.js';
import { state, SNAP } from '../state.js';
import { api, ApiFailure, latest, showError } from '../api.js';
import { Heatmap } from '../heatmap.js';
import { lineChart, marker } from '../linechart.js';
import { OKABE, DASHES, MARKERS, scaleFor, colourOf, rgbCss, seriesStyle } from '../colours.js';

export function create() {
  const run = latest();
  let data = null, loaded = false, uploaded = null;
  const hidden = new Set();  // series labels switched off in the legend
  const offFamilies = new Set();  // families switched off by the filters
  const FAMILIES = ['relative', 'mixed', 'absolute', 'none', 'rope-scaling', 'other'];
  const srcLabel = (r) => (r.bundled ? t('v4.bundled', { preset: r.preset || '?' }) : r.label);
  const source = $('#v4-source'), file = $('#v4-file'), task = $('#v4-task'), metric = $('#v4-metric');

  function init() {
    source.replaceChildren();
    for (const r of state.info.results) source.append(el('option', { value: String(r.index) }, srcLabel(r)));
    if (!state.info.results.length) source.append(el('option', { value: '', disabled: true }, '—'));
    source.disabled = !state.info.results.length;
    if (SNAP) $('#v4-upload-wrap').hidden = true;
    source.addEventListener('change', () => { uploaded = null; task.value = ''; metric.value = ''; load(true); });
    task.addEventListener('change', () => { metric.value = ''; load(false); });
    metric.addEventListener('change', () => load(false));
    file.addEventListener('change', onFile);
    $('#v4-form').addEventListener('submit', (ev) => ev.preventDefault());
  }
  async function onFile() {
    const f = file.files && file.files[0];
    if (!f) return;
    const lim = state.info.limits.max_body_bytes;
    if (f.size > lim) { showError('v4', new ApiFailure({ error: f.name + ': ' + f.size + ' bytes', code: 'too_large', limit: lim, unit: 'bytes' })); return; }
    uploaded = await f.text();
    task.value = ''; metric.value = '';
    load(true);
  }
  async function load(fresh) {
    const p = {};
    // say that the curves are on their way (the documented results take a moment to aggregate)
    const loading = $('#v4-loading');
    loading.textContent = t('v4.loading'); loading.hidden = false;
    if (!fresh && task.value) p.task = task.value;
    if (!fresh && metric.value) p.metric = metric.value;
    try {
      let d;
      if (uploaded !== null) d = await run(() => api('results', p, uploaded));
      else {
        if (!state.info.results.length) { data = null; render(); return; }
        p.source = source.value || '0';
        d = await run(() => api('results', p));
      }
      if (d === undefined) return;
      showError('v4', null);
      data = d;
      loading.hidden = true;
      render();
    } catch (err) { loading.hidden = true; showError('v4', err); }
  }
  function fillSelect(sel, values, cur, labeller) {
    sel.replaceChildren();
    for (const v of values) sel.append(el('option', { value: v }, labeller ? labeller(v) : v));
    if (values.includes(cur)) sel.value = cur;
  }
  function render() {
    if (!data) {
      $('#v4-chart').replaceChildren(el('p', { class: 'hint' }, t('v4.none')));
      $('#v4-cap').textContent = ''; $('#v4-legend').replaceChildren(); $('#v4-table').replaceChildren();
      $('#v4-metric-hint').textContent = '';
      return;
    }
    fillSelect(task, data.tasks, data.task);
    fillSelect(metric, data.metrics.length ? data.metrics : [data.metric], data.metric, (m) => t('metric.' + m));
    const src = data.source === 'upload' ? t('v4.upload') : data.bundled ? t('v4.bundled', { preset: data.preset || '?' }) : data.source;
    $('#v4-cap').textContent = t('v4.cap', { metric: t('metric.' + data.metric), task: data.task, src });
    // one colour and marker per scheme (kept when lines are filtered out); a line with a seed that did
    // not pass the fit gate is dashed, faded and marked in the legend
    const series = data.series.map((s, k) => {
      const st = seriesStyle(k);
      const unfit = s.fitted === false;
      return {
        label: s.label, xs: s.points.map((p) => p.eval_len), ys: s.points.map((p) => p.mean),
        band: s.seeds > 1 ? [s.points.map((p) => p.min), s.points.map((p) => p.max)] : null,
        colour: st.colour, marker: st.marker, dash: unfit ? '5 4' : '', width: unfit ? 1.6 : 2.2,  // dashed means "not fitted", nothing else
        opacity: unfit ? 0.75 : 1, family: s.family || 'other', fitted: s.fitted, fittedRows: s.fitted_rows, rows: s.rows
      };
    });
    const shownSeries = series.filter((s) => !hidden.has(s.label) && !offFamilies.has(s.family));
    const lens = Array.from(new Set([].concat(...data.series.map((s) => s.points.map((p) => p.eval_len))))).sort((a, b) => a - b);
    const vlines = data.train_lens.map((n) => ({ x: n, label: t('v4.train', { n }), dash: '6 4', colour: '#333', width: 1.5 }));
    const unit = has('lenunit.' + data.unit) ? t('lenunit.' + data.unit) : (data.unit || t('lenunit.tokens'));
    lineChart($('#v4-chart'), {
      series: shownSeries, vlines, xLog: true,
      shadeFrom: data.train_lens.length ? Math.max(...data.train_lens) : null, shadeLabel: t('v4.beyond'), xTicks: lens.length <= 12 ? lens : null,
      xLabel: t('v4.x_unit', { unit }),
      yLabel: t('metric.' + data.metric), maxWidth: 760, height: 360, aria: $('#v4-cap').textContent
    });
    $('#v4-chart').dataset.unit = data.unit || '';
    // filters: one switch per family present (relative, absolute, RoPE scalings, ...)
    const fam = $('#v4-filters');
    fam.replaceChildren();
    for (const f of FAMILIES) {
      const n = series.filter((s) => s.family === f).length;
      if (!n) continue;
      const id = 'v4-fam-' + f;
      const box = el('input', { type: 'checkbox', id, 'data-family': f });
      box.checked = !offFamilies.has(f);
      box.addEventListener('change', () => { if (box.checked) offFamilies.delete(f); else offFamilies.add(f); render(); const again = $('#' + id); if (again) again.focus(); });
      fam.append(el('span', { class: 'switch-row' }, box, el('label', { for: id }, t('v4.family.' + f) + ' (' + n + ')')));
    }
    const leg = $('#v4-legend');
    leg.replaceChildren();
    series.forEach((s) => {
      if (offFamilies.has(s.family)) return;
      const sw = svg('svg', { width: 34, height: 12, 'aria-hidden': 'true' },
        svg('line', { x1: 0, x2: 34, y1: 6, y2: 6, stroke: s.colour, 'stroke-width': 2.2, 'stroke-dasharray': s.dash || null }),
        marker(s.marker, 17, 6, s.colour));
      const on = !hidden.has(s.label);
      const note = s.fitted === false ? ' ⚠ ' + t('v4.unfitted', { k: s.fittedRows, n: s.rows }) : '';
      const b = el('button', { type: 'button', class: 'series-toggle' + (s.fitted === false ? ' unfitted' : ''), 'aria-pressed': String(on), title: t('v4.toggle'), 'data-label': s.label }, sw, ' ' + s.label + note);
      b.addEventListener('click', () => {
        if (hidden.has(s.label)) hidden.delete(s.label); else hidden.add(s.label);
        render();
        const again = leg.querySelector(`button[data-label="${CSS.escape(s.label)}"]`);
        if (again) again.focus();
      });
      leg.append(el('li', {}, b));
    });
    // a glossary of the row names on this chart
    const gl = $('#v4-glossary-list');
    gl.replaceChildren();
    for (const s of data.series) {
      const key = s.variant ? 'gloss.variant.' + s.variant : 'gloss.' + s.scheme;
      const info = (state.info.schemes || []).find((x) => x.name === s.scheme);
      const text = has(key) ? t(key, { scheme: s.scheme }) : (info ? info.summary : s.label);
      gl.append(el('dt', {}, s.label), el('dd', {}, text));
    }
    const tbl = el('table', { class: 'mini data', id: 'v4-numbers' },
      el('tr', {}, ...['v4.col_series', 'v4.col_len', 'v4.col_mean', 'v4.col_min', 'v4.col_max', 'v4.col_n'].map((k) => el('th', { scope: 'col' }, t(k)))));
    for (const s of data.series) for (const p of s.points) {
      tbl.append(el('tr', {}, el('td', {}, s.label), el('td', {}, String(p.eval_len)), el('td', {}, fmtNum(p.mean, 5)),
        el('td', {}, fmtNum(p.min, 5)), el('td', {}, fmtNum(p.max, 5)), el('td', {}, String(p.n))));
    }
    $('#v4-table').replaceChildren(tbl);
  }
  return {
    show() { if (!loaded) { loaded = true; init(); load(true); } else render(); },
    relabel() {
      if (!loaded) return;
      source.querySelectorAll('option').forEach((o) => { const r = state.info.results.find((x) => String(x.index) === o.value); if (r) o.textContent = srcLabel(r); });
      render();
    },
    redraw() { if (loaded) render(); }
  };
}
