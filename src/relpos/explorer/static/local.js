/* Answers the exported page computes itself, with no server: view 1's tokens and offsets.
 * The same rules as relpos.explorer.content.tokenize (words, single punctuation marks, single CJK
 * characters) and relpos.distance.relative_positions / clip_relative; tests hold the two to each other. */
import { state } from './state.js';

const CJK = '\\u3040-\\u30ff\\u3400-\\u4dbf\\u4e00-\\u9fff\\uf900-\\ufaff\\uac00-\\ud7af';
const W = '[\\p{L}\\p{N}\\p{M}_]';  // Python's \w on str: letters, digits, marks and the underscore
const TOKEN = new RegExp(`[${CJK}]|(?:(?![${CJK}])${W})+(?:['\\u2019](?:(?![${CJK}])${W})+)*|[^\\p{L}\\p{N}\\p{M}_\\s]`, 'gu');

export function tokenize(text) { return String(text).match(TOKEN) || []; }

class LocalFailure extends Error {
  constructor(info) { super(info.error); this.info = info; }
}

// the `offsets` route (relpos/explorer/views/offsets.py), computed in the page
export function offsets(params) {
  const lim = (state.info && state.info.limits) || { max_tokens: 64, max_text_chars: 1000 };
  const text = params.text === undefined ? '' : String(params.text);
  if (text.length > lim.max_text_chars) {
    throw new LocalFailure({ error: `the text is ${text.length} characters long; the explorer accepts at most ${lim.max_text_chars}`, code: 'too_large', field: 'text', limit: lim.max_text_chars, unit: 'chars', value: text.length });
  }
  const tokens = tokenize(text);
  if (!tokens.length) throw new LocalFailure({ error: 'type at least one word', code: 'empty', field: 'text' });
  if (tokens.length > lim.max_tokens) {
    throw new LocalFailure({ error: `the sentence has ${tokens.length} tokens; the explorer shows at most ${lim.max_tokens}`, code: 'too_large', field: 'text', limit: lim.max_tokens, unit: 'tokens', value: tokens.length });
  }
  const convention = params.convention === 'i-j' ? 'i-j' : 'j-i';
  const n = tokens.length;
  const raw = params.clip;
  const clip = raw === undefined || raw === '' || raw === 'none' ? null : Math.max(0, Math.min(lim.max_tokens, Number.parseInt(raw, 10)));
  const d = [];
  for (let i = 0; i < n; i++) { const row = []; for (let j = 0; j < n; j++) row.push(convention === 'j-i' ? j - i : i - j); d.push(row); }
  const clipped = clip === null ? null : d.map((row) => row.map((v) => Math.max(-clip, Math.min(clip, v))));
  return { tokens, n, convention, clip, offsets: d, clipped, local: true };
}
