/* A canvas heatmap with ticks or token labels, a colour bar, mouse and keyboard reading. */
import { el, fmtNum, FONT } from './dom.js';
import { t } from './i18n.js';
import { colourOf, rgbCss } from './colours.js';

export function Heatmap(host, opts) {
  opts = opts || {};
  const wrap = el('div', { class: 'hm' });
  const canvas = el('canvas', { tabindex: '0', class: 'hm-canvas', role: 'img' });
  const bar = el('canvas', { class: 'hm-bar', 'aria-hidden': 'true' });
  const barLabels = el('div', { class: 'hm-bar-labels' });
  wrap.append(canvas, el('div', { class: 'hm-barwrap' }, bar, barLabels));
  host.replaceChildren(wrap);
  const hm = { canvas, cursor: null, data: null, geom: null };
  const maxSize = opts.maxSize || 440;

  hm.draw = function (data) {
    hm.data = data;
    const n = data.matrix.length, m = data.matrix[0].length;
    if (hm.cursor) hm.cursor = [Math.min(hm.cursor[0], n - 1), Math.min(hm.cursor[1], m - 1)];
    const labels = data.labels;
    const avail = Math.max(120, Math.min(maxSize, (host.clientWidth || maxSize)));
    const ctx0 = canvas.getContext('2d');
    ctx0.font = '12px ' + FONT;
    let ml = 30, mt = 22;
    if (labels) {
      let w = 0;
      for (const s of labels) w = Math.max(w, ctx0.measureText(s).width);
      ml = Math.min(70, Math.ceil(w) + 8);
      mt = w <= (avail - ml - 4) / Math.max(n, m) - 1 ? 20 : ml;
    }
    const cs = (avail - ml - 4) / Math.max(n, m);
    const showLabels = labels && cs >= 9;
    if (labels && !showLabels) { ml = 30; mt = 22; }
    const cs2 = (avail - ml - 4) / Math.max(n, m);
    const W = Math.round(ml + cs2 * m + 4), Hh = Math.round(mt + cs2 * n + 4);
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(Hh * dpr);
    canvas.style.width = W + 'px'; canvas.style.height = Hh + 'px';
    hm.geom = { ml, mt, cs: cs2, n, m, W, H: Hh };
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, Hh);
    const sc = data.scale;
    for (let i = 0; i < n; i++) {
      const y0 = Math.round(mt + i * cs2), y1 = Math.round(mt + (i + 1) * cs2);
      for (let j = 0; j < m; j++) {
        const x0 = Math.round(ml + j * cs2), x1 = Math.round(ml + (j + 1) * cs2);
        const v = data.matrix[i][j];
        const masked = data.masked && data.masked(i, j);
        if (masked || v === null) {
          ctx.fillStyle = '#d4d4d4';
          ctx.fillRect(x0, y0, x1 - x0, y1 - y0);
          if (cs2 >= 6) {
            ctx.strokeStyle = '#a8a8a8'; ctx.lineWidth = 1;
            ctx.beginPath(); ctx.moveTo(x0, y1); ctx.lineTo(x1, y0); ctx.stroke();
          }
        } else {
          ctx.fillStyle = rgbCss(colourOf(v, sc));
          ctx.fillRect(x0, y0, x1 - x0, y1 - y0);
        }
      }
    }
    // every cell's value printed inside it, when the cells are large enough (compose view)
    if (data.showValues && cs2 >= 30) {
      ctx.font = Math.min(12, Math.floor(cs2 / 3.4)) + 'px ' + FONT; ctx.textAlign = 'center'; ctx.textBaseline = 'middle';
      for (let i = 0; i < n; i++) for (let j = 0; j < m; j++) {
        const v = data.matrix[i][j];
        if (v === null || (data.masked && data.masked(i, j))) continue;
        const c = colourOf(v, sc);
        ctx.fillStyle = 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] > 140 ? '#111' : '#fff';
        const txt = fmtNum(v, data.valueDigits || 2);
        let size = Math.min(12, Math.floor(cs2 / 3.4));  // shrink until the number fits its cell
        ctx.font = size + 'px ' + FONT;
        while (size > 7 && ctx.measureText(txt).width > cs2 - 3) { size -= 1; ctx.font = size + 'px ' + FONT; }
        ctx.fillText(txt, ml + (j + 0.5) * cs2, mt + (i + 0.5) * cs2);
      }
    }
    // ticks / labels
    ctx.fillStyle = '#222'; ctx.font = '12px ' + FONT;
    if (showLabels) {
      ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
      for (let i = 0; i < n; i++) ctx.fillText(labels[i], ml - 4, mt + (i + 0.5) * cs2);
      let widest = 0;
      for (const s of labels) widest = Math.max(widest, ctx.measureText(s).width);
      for (let j = 0; j < m; j++) {
        if (widest <= cs2 - 1) {
          ctx.textAlign = 'center'; ctx.textBaseline = 'bottom';
          ctx.fillText(labels[j], ml + (j + 0.5) * cs2, mt - 3);
        } else {
          ctx.save(); ctx.translate(ml + (j + 0.5) * cs2, mt - 4); ctx.rotate(-Math.PI / 2);
          ctx.textAlign = 'left'; ctx.textBaseline = 'middle'; ctx.fillText(labels[j], 0, 0); ctx.restore();
        }
      }
    } else {
      // ticks count positions; tickOffset shifts them (a map of positions c .. c + N - 1 starts at c)
      const off = data.tickOffset || 0;
      const step = niceStep(Math.max(n, m), Math.max(2, Math.floor((avail - ml) / 28)));
      ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
      for (let i = 0; i < n; i += step) ctx.fillText(String(i + off), ml - 4, mt + (i + 0.5) * cs2);
      ctx.textAlign = 'center'; ctx.textBaseline = 'bottom';
      for (let j = 0; j < m; j += step) ctx.fillText(String(j + off), ml + (j + 0.5) * cs2, mt - 4);
      canvas.dataset.firstTick = String(off);
    }
    if (hm.cursor) outline(ctx, hm.cursor[0], hm.cursor[1]);
    canvas.dataset.cursor = hm.cursor ? hm.cursor[0] + ',' + hm.cursor[1] : '';
    // 'tokens' when the axes carry the token labels, 'ticks' when they count positions
    canvas.dataset.axes = showLabels ? 'tokens' : 'ticks';
    drawBar(data);
    canvas.setAttribute('aria-label', (data.aria || 'heatmap') + ' ' + t('hm.keys'));
  };

  function outline(ctx, i, j) {
    const g = hm.geom;
    const x = g.ml + j * g.cs, y = g.mt + i * g.cs, s = Math.max(g.cs, 3);
    ctx.lineWidth = 3; ctx.strokeStyle = '#000'; ctx.strokeRect(x - 1, y - 1, s + 2, s + 2);
    ctx.lineWidth = 1.5; ctx.strokeStyle = '#fff'; ctx.strokeRect(x - 1, y - 1, s + 2, s + 2);
  }

  function drawBar(data) {
    const sc = data.scale, g = hm.geom;
    const W = Math.min(260, g.W - g.ml), H = 12, dpr = window.devicePixelRatio || 1;
    bar.width = W * dpr; bar.height = H * dpr; bar.style.width = W + 'px'; bar.style.height = H + 'px';
    bar.style.marginLeft = g.ml + 'px'; barLabels.style.marginLeft = g.ml + 'px'; barLabels.style.width = W + 'px';
    const ctx = bar.getContext('2d'); ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    for (let x = 0; x < W; x++) {
      const f = x / (W - 1);
      const v = sc.kind === 'diverging' ? (sc.half === 'neg' ? (f - 1) * sc.m : sc.half === 'pos' ? f * sc.m : (2 * f - 1) * sc.m) : sc.lo + f * (sc.hi - sc.lo);
      ctx.fillStyle = rgbCss(colourOf(v, sc)); ctx.fillRect(x, 0, 1, H);
    }
    const lo = sc.kind === 'diverging' ? (sc.half === 'pos' ? 0 : -sc.m) : sc.lo, hi = sc.kind === 'diverging' ? (sc.half === 'neg' ? 0 : sc.m) : sc.hi;
    const mid = sc.kind === 'diverging' && !sc.half ? '0' : '';
    const digits = Math.abs(hi) < 1e-3 && hi !== 0 ? 2 : 3;
    // a scale cut below the largest value says so: cells above it saturate at the top colour
    barLabels.replaceChildren(el('span', { text: fmtNum(lo, digits) }), el('span', { text: mid }),
      el('span', { class: data.clippedAbove ? 'cut' : null, text: (data.clippedAbove ? '≥ ' : '') + fmtNum(hi, digits) + (data.unit ? ' ' + data.unit : '') }));
  }

  hm.setCursor = function (i, j, silent) {
    if (!hm.data) return;
    const g = hm.geom;
    i = Math.max(0, Math.min(g.n - 1, i)); j = Math.max(0, Math.min(g.m - 1, j));
    hm.cursor = [i, j];
    hm.draw(hm.data);
    if (!silent && opts.onCell) opts.onCell(i, j);
  };
  function cellAt(ev) {
    const g = hm.geom; if (!g) return null;
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left - g.ml, y = ev.clientY - r.top - g.mt;
    const j = Math.floor(x / g.cs), i = Math.floor(y / g.cs);
    if (i < 0 || j < 0 || i >= g.n || j >= g.m) return null;
    return [i, j];
  }
  canvas.addEventListener('mousemove', (ev) => {
    const c = cellAt(ev);
    if (c && opts.onCell) opts.onCell(c[0], c[1]);
  });
  canvas.addEventListener('click', (ev) => { const c = cellAt(ev); if (c) { canvas.focus(); hm.setCursor(c[0], c[1]); } });
  canvas.addEventListener('mouseleave', () => { if (hm.cursor && opts.onCell) opts.onCell(hm.cursor[0], hm.cursor[1]); });
  canvas.addEventListener('focus', () => { if (!hm.cursor) hm.setCursor(0, 0); else if (opts.onCell) opts.onCell(hm.cursor[0], hm.cursor[1]); });
  canvas.addEventListener('keydown', (ev) => {
    if (!hm.cursor) return;
    let [i, j] = hm.cursor;
    const g = hm.geom;
    switch (ev.key) {
      case 'ArrowUp': i -= 1; break;
      case 'ArrowDown': i += 1; break;
      case 'ArrowLeft': j -= 1; break;
      case 'ArrowRight': j += 1; break;
      case 'Home': j = 0; break;
      case 'End': j = g.m - 1; break;
      case 'PageUp': i -= 8; break;
      case 'PageDown': i += 8; break;
      default: return;
    }
    ev.preventDefault();
    hm.setCursor(i, j);
  });
  return hm;
}

export function niceStep(n, maxTicks) {
  const raw = n / Math.max(1, maxTicks);
  for (const s of [1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 200, 256]) if (s >= raw) return s;
  return Math.ceil(raw);
}
