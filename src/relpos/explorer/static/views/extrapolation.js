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
  const source = $('#v4-source'), file = $('#v4-file'), task = $('#v4-task'), metric = $('#v4-metric');

  function init() {
    source.replaceChildren();
    for (const r of state.info.results) source.append(el('option', { value: String(r.index) }, r.label));
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
      render();
    } catch (err) { showError('v4', err); }
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
    const src = data.source === 'upload' ? t('v4.upload') : data.source;
    $('#v4-cap').textContent = t('v4.cap', { metric: t('metric.' + data.metric), task: data.task, src });
    const series = data.series.map((s, k) => ({
      label: s.label, xs: s.points.map((p) => p.eval_len), ys: s.points.map((p) => p.mean),
      band: s.seeds > 1 ? [s.points.map((p) => p.min), s.points.map((p) => p.max)] : null,
      ...seriesStyle(k), width: 2.2  // every series its own colour and marker
    }));
    const lens = Array.from(new Set([].concat(...data.series.map((s) => s.points.map((p) => p.eval_len))))).sort((a, b) => a - b);
    const vlines = data.train_lens.map((n) => ({ x: n, label: t('v4.train', { n }), dash: '6 4', colour: '#333', width: 1.5 }));
    lineChart($('#v4-chart'), {
      series: series.filter((s) => !hidden.has(s.label)), vlines, xLog: true,
      shadeFrom: data.train_lens.length ? Math.max(...data.train_lens) : null, shadeLabel: t('v4.beyond'), xTicks: lens.length <= 12 ? lens : null, xLabel: t('v4.x'),
      yLabel: t('metric.' + data.metric), maxWidth: 760, height: 360, aria: $('#v4-cap').textContent
    });
    const leg = $('#v4-legend');
    leg.replaceChildren();
    series.forEach((s) => {
      const sw = svg('svg', { width: 34, height: 12, 'aria-hidden': 'true' },
        svg('line', { x1: 0, x2: 34, y1: 6, y2: 6, stroke: s.colour, 'stroke-width': 2.2, 'stroke-dasharray': s.dash || null }),
        marker(s.marker, 17, 6, s.colour));
      const on = !hidden.has(s.label);
      const b = el('button', { type: 'button', class: 'series-toggle', 'aria-pressed': String(on), title: t('v4.toggle') }, sw, ' ' + s.label);
      b.addEventListener('click', () => {
        if (hidden.has(s.label)) hidden.delete(s.label); else hidden.add(s.label);
        render();
        const again = leg.querySelectorAll('button')[series.indexOf(s)];
        if (again) again.focus();
      });
      leg.append(el('li', {}, b));
    });
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
    relabel() { if (loaded) render(); },
    redraw() { if (loaded) render(); }
  };
}
