/* Colour scales: Okabe-Ito for series, ColorBrewer RdBu (diverging) and viridis (sequential). */
export const OKABE = ['#0072B2', '#E69F00', '#009E73', '#D55E00', '#CC79A7', '#56B4E9', '#000000', '#F0E442'];
export const DASHES = ['', '7 4', '2 3', '9 3 2 3'];
export const MARKERS = ['circle', 'square', 'triangle', 'diamond'];
// one colour and marker per series for up to 16 x 6 series: Okabe-Ito, then Paul Tol's muted scheme
export const SERIES_COLOURS = OKABE.concat(['#332288', '#88CCEE', '#44AA99', '#117733', '#999933', '#882255', '#AA4499', '#DDCC77']);
export const SERIES_MARKERS = ['circle', 'square', 'triangle', 'diamond', 'down', 'cross'];
export function seriesStyle(k) {
  return { colour: SERIES_COLOURS[k % SERIES_COLOURS.length], marker: SERIES_MARKERS[k % SERIES_MARKERS.length],
    dash: DASHES[Math.floor(k / SERIES_COLOURS.length) % DASHES.length] };
}
export const RDBU = ['#2166ac', '#4393c3', '#92c5de', '#d1e5f0', '#f7f7f7', '#fddbc7', '#f4a582', '#d6604d', '#b2182b'];
export const VIRIDIS = ['#440154', '#482878', '#3e4989', '#31688e', '#26828e', '#1f9e89', '#35b779', '#6ece58', '#b5de2b', '#fde725'];
export const hexRgb = (h) => [1, 3, 5].map((k) => parseInt(h.slice(k, k + 2), 16));
export const RDBU_RGB = RDBU.map(hexRgb);
export const VIR_RGB = VIRIDIS.map(hexRgb);
export function ramp(stops, x) {
  x = Math.min(1, Math.max(0, x));
  const p = x * (stops.length - 1);
  const k = Math.min(stops.length - 2, Math.floor(p));
  const f = p - k;
  const a = stops[k], b = stops[k + 1];
  return [0, 1, 2].map((c) => Math.round(a[c] + (b[c] - a[c]) * f));
}
// scale: {kind: 'diverging', m} (centred at 0) or {kind: 'sequential', lo, hi}
export function colourOf(v, sc) {
  if (sc.kind === 'diverging') return ramp(RDBU_RGB, sc.m > 0 ? 0.5 + v / (2 * sc.m) : 0.5);
  return ramp(VIR_RGB, sc.hi > sc.lo ? (v - sc.lo) / (sc.hi - sc.lo) : 0.5);
}
export function scaleFor(values, kind) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) if (v !== null && Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
  if (!Number.isFinite(lo)) { lo = 0; hi = 0; }
  if (kind === 'diverging') return { kind, m: Math.max(Math.abs(lo), Math.abs(hi)), lo, hi };
  return { kind: 'sequential', lo, hi };
}
export const rgbCss = (c) => 'rgb(' + c.join(',') + ')';
// a one-signed term (ALiBi, KERPLE, FoX: never positive) on the same RdBu scale as a two-signed one
// (T5), so every bias on the page reads alike: only the half it uses is drawn in the colour bar
export function signedScale(values) {
  const sc = scaleFor(values, 'diverging');
  if (sc.lo >= 0 && sc.hi > 0) sc.half = 'pos';
  else if (sc.hi <= 0 && sc.lo < 0) sc.half = 'neg';
  return sc;
}
