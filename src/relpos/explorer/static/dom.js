/* DOM and number-format helpers. */
export const MINUS = '\u2212';
// the page's font stack (style.css) for canvas text: system fonts, with common CJK fonts named
export const FONT = 'system-ui, -apple-system, "Segoe UI", "Noto Sans", "Noto Sans CJK SC", "Source Han Sans SC", ' +
  '"PingFang SC", "Hiragino Sans GB", "Microsoft YaHei", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", ' +
  '"Droid Sans Fallback", sans-serif';

export const $ = (sel, root) => (root || document).querySelector(sel);
export function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') e.textContent = v;
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of kids) if (c !== null && c !== undefined) e.append(c);
  return e;
}
export const SVGNS = 'http://www.w3.org/2000/svg';
export function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, v);
  for (const c of kids) if (c) e.append(c);
  return e;
}
export const minus = (s) => String(s).replace(/^-/, MINUS).replace(/e-/, 'e' + MINUS);
export const fmtInt = (v) => minus(v);
// an integer with thousands separators (262,144), the same in both languages
export const fmtCount = (v) => minus(Number(v).toLocaleString('en-US', { maximumFractionDigits: 0 }));
export function fmtNum(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  if (v === 0) return '0';
  const a = Math.abs(v);
  let s;
  if (a >= 1e-3 && a < 1e6) s = String(Number(v.toPrecision(digits || 6)));
  else s = v.toExponential((digits || 6) - 1).replace(/\.?0+e/, 'e');
  return minus(s);
}
export function debounce(fn, ms) {
  let h = null;
  return (...a) => { clearTimeout(h); h = setTimeout(() => fn(...a), ms); };
}
export const clampInt = (v, lo, hi, dflt) => {
  const n = Number.parseInt(v, 10);
  if (!Number.isFinite(n)) return dflt;
  return Math.min(hi, Math.max(lo, n));
};
