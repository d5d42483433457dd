/* View 2's RoPE section: each frequency pair rotating with position, the angle against d = j - i,
 * the norm kept, q.k depending only on j - i, and the PI / NTK / YaRN frequencies side by side.
 * create() wires the section to its DOM and returns { show, relabel, redraw }. */
import { $, el, svg, fmtNum, debounce, MINUS } from '../dom.js';
import { t } from '../i18n.js';
import { SNAP } from '../state.js';
import { api, latest, showError } from '../api.js';
import { lineChart } from '../linechart.js';
import { OKABE } from '../colours.js';

const SCALINGS = ['none', 'linear', 'ntk', 'yarn'];

export function create() {
  const run = latest();
  let data = null, loaded = false;
  const iIn = $('#rope-i'), jIn = $('#rope-j'), scaling = $('#rope-scaling'), dIn = $('#rope-d');

  function init() {
    scaling.replaceChildren(...SCALINGS.map((s) => el('option', { value: s }, t('rope.scaling.' + s))));
    [iIn, jIn].forEach((x) => x.addEventListener('input', loadSoon));
    [scaling, dIn].forEach((x) => x.addEventListener('change', load));
    $('#rope-form').addEventListener('submit', (ev) => ev.preventDefault());
    if (SNAP) [iIn, jIn].forEach((x) => { x.readOnly = true; x.title = t('snapshot_readonly'); });
  }
  async function load() {
    try {
      const d = await run(() => api('rope', { i: iIn.value, j: jIn.value, scaling: scaling.value, head_dim: dIn.value }));
      if (d === undefined) return;
      showError('rope', null);
      data = d;
      render();
    } catch (err) { showError('rope', err); }
  }
  const loadSoon = debounce(load, 200);

  // one pair: the unit circle, q's pair (blue) turned by i.theta and k's (orange) turned by j.theta
  function circle(k) {
    const S = 92, c = S / 2, R = 34;
    const q = data.q_rot[k], kk = data.k_rot[k];
    const nq = Math.hypot(q[0], q[1]) || 1, nk = Math.hypot(kk[0], kk[1]) || 1;
    const arrow = (v, n, colour, dash) => svg('line', { x1: c, y1: c, x2: c + R * v[0] / n, y2: c - R * v[1] / n, stroke: colour, 'stroke-width': 2.4, 'stroke-dasharray': dash || null });
    const g = svg('svg', { width: S, height: S, viewBox: `0 0 ${S} ${S}`, role: 'img', 'aria-label': t('rope.pair_aria', { k: k + 1 }) },
      svg('circle', { cx: c, cy: c, r: R, fill: 'none', stroke: '#bbb' }),
      arrow(q, nq, OKABE[0]), arrow(kk, nk, OKABE[1], '4 2'));
    const ang = ((data.angle_k[k] - data.angle_q[k]) % (2 * Math.PI) + 2 * Math.PI) % (2 * Math.PI);
    return el('figure', { class: 'rope-pair', 'data-pair': String(k) }, g,
      el('figcaption', {}, t('rope.pair', { k: k + 1, theta: fmtNum(data.theta[k], 3), a: fmtNum(ang, 3) })));
  }
  function render() {
    if (!data) return;
    const box = $('#rope-circles');
    box.replaceChildren(...data.q.map((_, k) => circle(k)));
    $('#rope-norms').textContent = t('rope.norms', { q: fmtNum(data.norm_q, 6), qr: fmtNum(data.norm_q_rot, 6), k: fmtNum(data.norm_k, 6), kr: fmtNum(data.norm_k_rot, 6) });
    $('#rope-dot').textContent = t('rope.dot', { i: data.i, j: data.j, d: data.d, s: data.shift, is: data.i + data.shift, js: data.j + data.shift,
      v: fmtNum(data.dot, 6), w: fmtNum(data.dot_shifted, 6), u: fmtNum(data.dot_unrotated, 6) });
    lineChart($('#rope-curve'), {
      series: [
        { label: t('rope.from0'), xs: data.offsets, ys: data.curve, colour: OKABE[0], width: 2.4 },
        { label: t('rope.froms', { s: data.shift + 24 }), xs: data.offsets, ys: data.curve_shifted, colour: OKABE[1], width: 1.6, dash: '5 4', marker: 'circle' }
      ],
      vlines: [{ x: data.d, label: 'd = ' + String(data.d).replace('-', MINUS), colour: '#333', dash: '3 3' }],
      xLabel: t('rope.curve_x'), yLabel: t('rope.curve_y'), maxWidth: 480, height: 240, aria: t('rope.curve_cap')
    });
    const series = data.frequencies.map((f, n) => ({
      label: t('rope.scaling.' + f.scaling), xs: f.theta.map((_, k) => k + 1), ys: f.theta.map((v) => Math.log10(v)),
      colour: OKABE[[0, 1, 2, 3][n]], marker: ['circle', 'square', 'triangle', 'diamond'][n], dash: ['', '7 4', '2 3', '9 3 2 3'][n], width: 2
    }));
    lineChart($('#rope-freqs'), { series, xLabel: t('rope.freq_x'), yLabel: t('rope.freq_y'), maxWidth: 480, height: 240, aria: t('rope.freq_cap', { f: data.factor, L: data.original }) });
    $('#rope-freqs-legend').replaceChildren(...series.map((s) => {
      const li = el('li', {}, el('span', { class: 'swatch', 'aria-hidden': 'true' }, '―'), ' ' + s.label);
      li.firstChild.style.color = s.colour;  // CSSOM, not a style attribute (the page's CSP forbids those)
      return li;
    }));
    $('#rope-freq-cap').textContent = t('rope.freq_cap', { f: data.factor, L: data.original });
    const tbl = el('table', { class: 'mini', id: 'rope-freq-table' },
      el('tr', {}, el('th', { scope: 'col' }, 'k'), ...data.frequencies.map((f) => el('th', { scope: 'col' }, t('rope.scaling.' + f.scaling)))));
    for (let k = 0; k < data.pairs; k++) {
      tbl.append(el('tr', {}, el('td', {}, String(k + 1)), ...data.frequencies.map((f) => el('td', {}, fmtNum(f.theta[k], 4)))));
    }
    $('#rope-freq-table-wrap').replaceChildren(tbl);
  }
  return {
    show() { if (!loaded) { loaded = true; init(); load(); } else render(); },
    relabel() { if (loaded) { scaling.querySelectorAll('option').forEach((o) => { o.textContent = t('rope.scaling.' + o.value); }); render(); } },
    redraw() { if (loaded) render(); }
  };
}
