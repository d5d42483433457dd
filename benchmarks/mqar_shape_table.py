"""The MQAR shape probe's table: one row per base scheme, one column group per head count.

Reads the curves ``benchmarks/mqar_shape_probe.sh OUT`` wrote (``OUT/h<heads>/<scheme>.json``) and prints, and
writes as ``--md`` / ``--json``, for each scheme and head count: the best validation exact match at L over the
run, the first step at which it reached 0.5 (the lookup formed) and 0.95 (the compare fit gate), and the steps
run. Validation only: the probe never reads a test split.

    python benchmarks/mqar_shape_table.py OUT --md benchmarks/results/mqar_shape_probe.md \
        --json benchmarks/results/mqar_shape_probe.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

GATE = 0.95
FORMED = 0.5


def summarise(curve: dict) -> dict:
    """Best exact match, first steps to 0.5 and 0.95, steps run, and whether the run finished."""
    hist = curve["history"]
    first = lambda t: next((h["step"] for h in hist if h["exact"] >= t), None)  # noqa: E731
    return {"best_exact": max(h["exact"] for h in hist), "final_exact": hist[-1]["exact"],
            "final_acc": hist[-1]["acc"], "step_formed": first(FORMED), "step_gate": first(GATE),
            "steps": hist[-1]["step"], "done": bool(curve.get("done")), "seconds": curve.get("seconds")}


def collect(out: Path) -> dict:
    """``{heads: {scheme: summary}}`` for every curve under ``out``."""
    rows: dict = {}
    for f in sorted(out.glob("h*/*.json")):
        heads = int(f.parent.name[1:])
        rows.setdefault(heads, {})[f.stem] = summarise(json.loads(f.read_text()))
    return rows


def markdown(rows: dict) -> str:
    heads = sorted(rows)
    schemes = sorted({s for h in heads for s in rows[h]})
    cell = lambda r: "-" if r is None else (  # noqa: E731
        f"{r['best_exact']:.2f} | {r['step_formed'] if r['step_formed'] is not None else '>' + str(r['steps'])} | "
        f"{r['step_gate'] if r['step_gate'] is not None else '>' + str(r['steps'])}" + ("" if r["done"] else " (running)"))
    head = "| scheme | " + " | ".join(f"{h} head{'s' * (h > 1)}: best exact | step to 0.5 | step to 0.95" for h in heads)
    head += " |"
    sep = "|---|" + "---|---|---|" * len(heads)
    lines = [head, sep]
    for s in schemes:
        lines.append(f"| {s} | " + " | ".join(cell(rows[h].get(s)) if rows[h].get(s) else "- | - | -" for h in heads) + " |")
    fitted = {h: sum(r["step_gate"] is not None for r in rows[h].values()) for h in heads}
    formed = {h: sum(r["step_formed"] is not None for r in rows[h].values()) for h in heads}
    lines.append("")
    lines.append("Schemes that passed the gate / formed the lookup: " +
                 "; ".join(f"{h} head{'s' * (h > 1)}: {fitted[h]} / {formed[h]} of {len(rows[h])}" for h in heads))
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rows = collect(a.out)
    text = markdown(rows)
    print(text)
    from relpos.outdir import write_json_atomic, write_text_atomic

    if a.md:
        write_text_atomic(a.md, text)
    if a.json:
        write_json_atomic(a.json, {str(h): r for h, r in rows.items()})


if __name__ == "__main__":
    main()
