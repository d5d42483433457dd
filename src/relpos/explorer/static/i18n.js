/* Translation lookup: t(key, vars) in the current language, falling back to English. */
import en from './i18n/en.js';
import zh from './i18n/zh.js';
import { state } from './state.js';

export const I18N = { en, zh };

export function t(key, vars) {
  const dict = I18N[state.lang] || I18N.en;
  let s = dict[key];
  if (s === undefined) s = I18N.en[key];
  if (s === undefined) return key;
  if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (vars[k] === undefined ? m : String(vars[k])));
  return s;
}
export const has = (key) => I18N.en[key] !== undefined;

// whether one language's own table has the key (no fallback to English)
export const hasIn = (lang, key) => (I18N[lang] || {})[key] !== undefined;
