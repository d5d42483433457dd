/* Shared page state: the language, the open view, the server's /api/info answer, and the
 * snapshot an exported page embeds (null on a live page). */
export const SNAP = window.RELPOS_SNAPSHOT || null;
export const state = { lang: 'en', view: 'offsets', info: null };
