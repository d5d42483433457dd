/* An SVG line chart with bands, markers, vertical marks and nice ticks. */
import { svg, fmtNum } from './dom.js';

export function niceTicks(lo, hi, count) {
  if (!(hi > lo)) { const d = Math.abs(lo) || 1; lo -= d * 0.5; hi += d * 0.5; }
  const span = hi - lo, raw = span / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return { ticks: out, lo: Math.min(lo, out[0]), hi: Math.max(hi, out[out.length - 1]) };
}

export function marker(kind, x, y, colour) {
  const s = 4;
  if (kind === 'square') return svg('rect', { x: x - s, y: y - s, width: 2 * s, height: 2 * s, fill: colour });
  if (kind === 'triangle') return svg('path', { d: `M${x},${y - s - 1}L${x + s + 1},${y + s}L${x - s - 1},${y + s}Z`, fill: colour });
  if (kind === 'diamond') return svg('path', { d: `M${x},${y - s - 1}L${x + s + 1},${y}L${x},${y + s + 1}L${x - s - 1},${y}Z`, fill: colour });
  if (kind === 'down') return svg('path', { d: `M${x},${y + s + 1}L${x + s + 1},${y - s}L${x - s - 1},${y - s}Z`, fill: colour });
  if (kind === 'cross') return svg('path', { d: `M${x - s},${y - s}L${x + s},${y + s}M${x - s},${y + s}L${x + s},${y - s}`, stroke: colour, 'stroke-width': 2.2, fill: 'none' });
  return svg('circle', { cx: x, cy: y, r: s, fill: colour });
}

// series: [{label, xs, ys, colour, dash, width, opacity, marker, band: [lo[], hi[]], step}]
export function lineChart(host, cfg) {
  const W = Math.max(280, Math.min(cfg.maxWidth || 520, host.clientWidth || 520));
  const H = cfg.height || 300;
  // labels of marks (the training length, the shaded region) sit in a band above the plot, never on data
  const labelled = !!cfg.shadeLabel || (cfg.vlines || []).some((v) => v.label);
  const m = { l: 62, r: 14, t: labelled ? 30 : 14, b: 44 };
  const xs = [], ys = [];
  for (const s of cfg.series) {
    s.xs.forEach((x, k) => { if (s.ys[k] !== null) { xs.push(x); ys.push(s.ys[k]); } });
    if (s.band) { s.band[0].forEach((v) => v !== null && ys.push(v)); s.band[1].forEach((v) => v !== null && ys.push(v)); }
  }
  for (const v of cfg.vlines || []) xs.push(v.x);
  for (const v of cfg.yInclude || []) ys.push(v);
  if (!xs.length) { host.replaceChildren(); return; }
  const tx = cfg.xLog ? (v) => Math.log2(v) : (v) => v;
  let xlo = Math.min(...xs.map(tx)), xhi = Math.max(...xs.map(tx));
  if (xhi === xlo) { xlo -= 1; xhi += 1; }
  const pad = (xhi - xlo) * 0.03; xlo -= pad; xhi += pad;
  const yt = niceTicks(Math.min(...ys), Math.max(...ys), Math.max(5, Math.round((H - m.t - m.b) / 42)));  // a tick every ~40 px
  const X = (v) => m.l + (tx(v) - xlo) / (xhi - xlo) * (W - m.l - m.r);
  const Y = (v) => m.t + (1 - (v - yt.lo) / (yt.hi - yt.lo)) * (H - m.t - m.b);
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': cfg.aria || '' });
  // grid + y ticks
  for (const v of yt.ticks) {
    root.append(svg('line', { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), stroke: '#e3e3e3' }));
    const tt = svg('text', { x: m.l - 6, y: Y(v) + 4, 'text-anchor': 'end', class: 'tick' }); tt.textContent = fmtNum(v, 4); root.append(tt);
  }
  // x ticks
  let xticks;
  if (cfg.xTicks) xticks = cfg.xTicks;
  else xticks = niceTicks(xlo, xhi, Math.max(3, Math.floor((W - m.l) / 60))).ticks.filter((v) => v >= xlo && v <= xhi);
  for (const v of xticks) {
    const x = X(v);
    root.append(svg('line', { x1: x, x2: x, y1: H - m.b, y2: H - m.b + 4, stroke: '#555' }));
    const tt = svg('text', { x: x, y: H - m.b + 16, 'text-anchor': 'middle', class: 'tick' }); tt.textContent = fmtNum(v, 4); root.append(tt);
  }
  root.append(svg('line', { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, stroke: '#555' }));
  root.append(svg('line', { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, stroke: '#555' }));
  if (yt.lo < 0 && yt.hi > 0) root.append(svg('line', { x1: m.l, x2: W - m.r, y1: Y(0), y2: Y(0), stroke: '#999' }));
  const xl = svg('text', { x: (m.l + W - m.r) / 2, y: H - 8, 'text-anchor': 'middle', class: 'axis' }); xl.textContent = cfg.xLabel || ''; root.append(xl);
  const yl = svg('text', { x: 14, y: (m.t + H - m.b) / 2, 'text-anchor': 'middle', class: 'axis', transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})` }); yl.textContent = cfg.yLabel || ''; root.append(yl);
  // shade the region past a mark (e.g. beyond the training length), labelled
  if (cfg.shadeFrom !== undefined && cfg.shadeFrom !== null) {
    const x0 = Math.max(m.l, Math.min(W - m.r, X(cfg.shadeFrom)));
    root.append(svg('rect', { x: x0, y: m.t, width: Math.max(0, W - m.r - x0), height: H - m.t - m.b, fill: '#000', 'fill-opacity': 0.06, class: 'beyond' }));
    if (cfg.shadeLabel) { const tt = svg('text', { x: W - m.r - 2, y: m.t - 8, 'text-anchor': 'end', class: 'vlabel beyond-label' }); tt.textContent = cfg.shadeLabel; root.append(tt); }
  }
  // vertical lines
  for (const v of cfg.vlines || []) {
    const x = X(v.x);
    root.append(svg('line', { x1: x, x2: x, y1: m.t, y2: H - m.b, stroke: v.colour || '#333', 'stroke-dasharray': v.dash || '5 4', 'stroke-width': v.width || 1 }));
    if (v.label) { const tt = svg('text', { x: x, y: m.t - 8, 'text-anchor': cfg.shadeLabel ? 'end' : 'middle', class: 'vlabel' }); tt.textContent = v.label; root.append(tt); }
  }
  // series
  for (const s of cfg.series) {
    const g = svg('g', { opacity: s.opacity === undefined ? 1 : s.opacity, class: 'series' });
    if (s.band) {
      let d = '';
      s.xs.forEach((x, k) => { if (s.band[1][k] !== null) d += (d ? 'L' : 'M') + X(x) + ',' + Y(s.band[1][k]); });
      for (let k = s.xs.length - 1; k >= 0; k--) if (s.band[0][k] !== null) d += 'L' + X(s.xs[k]) + ',' + Y(s.band[0][k]);
      if (d) g.append(svg('path', { d: d + 'Z', fill: s.colour, 'fill-opacity': 0.15, stroke: 'none' }));
    }
    let d = '', prev = null;
    s.xs.forEach((x, k) => {
      const y = s.ys[k];
      if (y === null) { prev = null; return; }
      if (s.step && prev !== null) d += 'L' + X(x - 0.5) + ',' + Y(prev) + 'L' + X(x - 0.5) + ',' + Y(y);
      d += (prev === null ? 'M' : 'L') + X(x) + ',' + Y(y);
      prev = y;
    });
    g.append(svg('path', { d, fill: 'none', stroke: s.colour, 'stroke-width': s.width || 2, 'stroke-dasharray': s.dash || null, 'stroke-linejoin': 'round' }));
    if (s.marker) s.xs.forEach((x, k) => { if (s.ys[k] !== null) g.append(marker(s.marker, X(x), Y(s.ys[k]), s.colour)); });
    const title = svg('title'); title.textContent = s.label; g.append(title);
    root.append(g);
  }
  host.replaceChildren(root);
}
