"""The old page's verdict table (protocol 2) against new results: :func:`previous_from_page` reads that table
once from the old page, :func:`changes` sets each base scheme's LM verdict, overall place and best algorithmic
score beside the new ones (the page's "What changed against the protocol-2 page")."""

from __future__ import annotations

import math
import re

from relpos.report.model import ResultsModel
from relpos.report.results_claims import NOT_ALGORITHMIC, _accuracy, _base, _model, fmt_iv, value
from relpos.report.stats import MIN_SEEDS
from relpos.report.verdict import HOLD_RATIO

__all__ = ["previous_from_page", "changes"]


def previous_from_page(text: str) -> dict:
    """The old page's verdict table (protocol 2), read once: ``{"columns": [...], "rows": {scheme: {col: str}}}``."""
    i = text.find("\n## Verdict")
    if i < 0:
        raise ValueError("the previous page has no '## Verdict' section")
    rest = text[i + 1:]
    lines = [ln for ln in rest.split("\n## ", 1)[0].splitlines() if ln.startswith("| ")]
    if len(lines) < 2:
        raise ValueError("the previous page's Verdict section has no table")
    cols = [c.strip() for c in lines[0].strip().strip("|").split("|")]
    rows = {}
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if cells and cells[0] and not set(cells[0]) <= {"-"}:
            rows[cells[0]] = dict(zip(cols[1:], cells[1:]))
    return {"columns": cols, "rows": rows}


def _num(cell: str | None) -> float | None:
    m = re.match(r"\(?(-?\d+(?:\.\d+)?)", (cell or "").strip())
    return float(m.group(1)) if m else None


def changes(previous: dict | None, results: dict | ResultsModel | None, rk: dict | None) -> list[str]:
    """Markdown lines: each base scheme's LM verdict and overall rank on the old page against these results."""
    model, results = _model(results)
    if not previous or not results:
        return []
    base = sorted(_base(results) & set(previous["rows"]))
    lens = sorted({m["eval_len"] for r in results["runs"] if r["task"] == "lm" for m in r["metrics"]})
    old_col = next((c for c in previous["columns"] if re.fullmatch(r"LM 16x/1x|LM \d+x/1x", c) and "16" in c), None)
    new_lm = {s: value(model, "lm", s)[0] for s in base} if lens else {}
    old_mrr = {s: m for s in base if (m := _num(previous["rows"][s].get("MRR"))) is not None}
    new_mrr = {lab: m for lab, m, _ in (rk or {}).get("order", []) if lab in base and math.isfinite(m)}
    place = lambda d, s: 1 + sum(v > d[s] + 1e-12 for v in d.values()) if s in d else "-"  # noqa: E731
    out = ["| scheme | old LM ratio (whole window, protocol 2) | new LM far-position ratio | LM verdict old -> new | "
           "old overall place (MRR) | new overall place (MRR) |", "|---|---:|---:|---|---:|---:|"]
    moved = []
    for s in base:
        o = _num(previous["rows"][s].get(old_col)) if old_col else None
        n = new_lm.get(s)
        word = lambda x: "-" if x is None else ("held" if x <= HOLD_RATIO else "degraded")  # noqa: E731
        ov, nv = word(o), word(n.est if n else None)
        if "-" not in (ov, nv) and ov != nv:
            moved.append(f"{s} ({ov} -> {nv})")
        out.append(f"| {s} | {'-' if o is None else f'{o:.2f}'} | {fmt_iv(n)} | {ov} -> {nv} | {place(old_mrr, s)} | "
                   f"{place(new_mrr, s)} |")
    head = [f"Against the protocol-2 page's verdict table (`protocol2-verdict.json`; its whole-window LM ratio, "
            f"column `{old_col or '?'}`; schemes shared by both pages; a place is 1 + the number "
            f"of schemes with a higher mean reciprocal rank, so ties share it). LM verdicts that changed (held when "
            f"the ratio is <= {HOLD_RATIO}): " + (", ".join(moved) if moved else "none") + ".", ""]
    algo = []
    for t in sorted({r["task"] for r in results["runs"]} - set(NOT_ALGORITHMIC)):
        cols = (f"{t} exact 2L", f"{t} 2L")  # this page's header, and the protocol-2 page's
        old = {k: v for k in base if (v := _num(next((previous["rows"][k][c] for c in cols
                                                        if c in previous["rows"][k]), None))) is not None}
        new = {k: v for k in base if math.isfinite(v := _accuracy(model, t, k, 2.0)[0])
               and _accuracy(model, t, k, 2.0)[1] >= MIN_SEEDS}
        if not old or not new:
            continue
        bo, bn = max(old.values()), max(new.values())
        def who(d, b):
            at = [k for k, v in sorted(d.items()) if v == b]
            return "every scheme" if len(at) == len(d) > 1 else ", ".join(at)

        algo.append(f"- {t}, exact match at 2L (each page's own L): best {bo:.2f} ({who(old, bo)}) -> {bn:.2f} "
                    f"({who(new, bn)}).")
    # tasks of the old page that these results do not hold (the full preset leaves copy-hints to --tasks)
    ran = {r["task"] for r in results["runs"]}
    gone = sorted({m.group(1) for c in previous["columns"] if (m := re.fullmatch(r"(.+?)(?: exact)? (?:1\.5|2)L", c))} - ran)
    from relpos.compare.presets import preset_tasks

    planned = preset_tasks(results["config"].get("preset"))
    algo += [f"- {t}: on the old page, not in these results ("
             + ("no results yet)." if t in planned else "not part of this preset).") for t in gone]
    return head + out + ([""] + algo if algo else [])
