"""The report of the ``extend`` benchmark: ``report.md``, ``results.json`` and the figure, written to ``--out``.

The numbers (kept rows, tables, steps-to-match, the three claim rules) are :mod:`relpos.report.extension`'s, which
the results page reads too; this module adds what needs the run's plan (its settings) and the files.
"""

from __future__ import annotations

import json
from pathlib import Path

from relpos.outdir import save_figure
from relpos.report.extension import (FAILS, HOLDS, UNTESTABLE, analyse, claims, mean_loss, report_markdown,
                                     select, steps_to_match, tables)

__all__ = ["select", "claims", "tables", "steps_to_match", "write_report", "meta_of", "HOLDS", "FAILS",
           "UNTESTABLE", "RESULTS_VERSION"]

#: ``results.json`` layout: 2 holds every row (per-window arrays included), so the report and the results
#: page recompute from it alone.
RESULTS_VERSION = 2


def _summary_only(row: dict) -> dict:
    """A row a rate choice passed over: its validation loss and mean losses, without the per-window arrays."""
    return {**row, "lengths": {n: {k: v for k, v in x.items() if k not in ("windows", "far")}
                               for n, x in row["lengths"].items()}}


def meta_of(p) -> dict:
    """The run's settings that the report reads, from its plan (:func:`relpos.extend.bench.plan`)."""
    cfg = p.source.cfg
    return {"train_len": p.source.train_len, "factor": p.spec.factor, "eval_factors": list(p.spec.eval_factors),
            "grid": list(p.grid), "recipes": [r.name for r in p.recipes], "seeds": list(p.seeds),
            "k_fractions": list(p.spec.k_fractions), "lr_grid": list(p.spec.lr_grid),
            "pretrain_steps": p.pretrain_steps, "n_layers": cfg.n_layers, "d_model": cfg.d_model,
            "fitted": all(m.fitted for m in p.source.models), "source": Path(p.source.folder).name,
            "pretrain_models": len(p.source.models), "pretrain_cpu_seconds": (sum(m.cpu_seconds for m in p.source.models)
                                     if all(m.cpu_seconds is not None for m in p.source.models) else None)}


def _plot(sel: dict, curves: dict, m: dict, path: Path) -> bool:
    """Three panels against K: the test loss at the fine-tuning length, and the far-position ratio there and at
    the longest evaluation length (a recipe measured at K = 0 only is one point)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    L, f, top = m["train_len"], m["factor"], max(m["eval_factors"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for rec in m["recipes"]:
        ks = [k for k in m["grid"] if (rec, k) in sel]
        if ks:
            axes[0].plot(ks, [mean_loss(sel, rec, k, f * L) for k in ks], marker="o", label=rec)
        for ax, col in ((axes[1], f), (axes[2], top)):
            pts = (curves.get(rec) or {}).get(col) or []
            if pts:
                ax.plot([k for k, _ in pts], [v for _, v in pts], marker="o", label=rec)
    axes[0].set_ylabel(f"test loss at {f}x L (nats per token)")
    for ax, col in ((axes[1], f), (axes[2], top)):
        ax.set_ylabel(f"far-position ratio at {col}x L")
        ax.axhline(1.0, color="grey", lw=0.5)
    for ax in axes:
        ax.set_xlabel("fine-tuning steps K")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # never through a link
    plt.close(fig)
    return True


def write_report(rows: list[dict], p, out: Path, *, plots: bool = True) -> dict:
    """Write ``report.md``, ``results.json`` (settings and every row; per-window arrays for the rows the rate
    choice keeps, which are all that the report reads) and ``extend.png``; returns
    ``{"text", "claims", "tables"}``."""
    from relpos.outdir import write_text_atomic

    sel = select(rows)
    kept = {id(r) for by in sel.values() for r in by.values()}
    data = {"version": RESULTS_VERSION, "protocol": p.protocol, "fingerprint": p.fingerprint, "meta": meta_of(p),
            "rows": [r if id(r) in kept else _summary_only(r) for r in rows]}
    done = analyse(data)  # the same rows kept: the rate choice reads only the validation losses
    t, data["claims"] = done["tables"], done["claims"]
    write_text_atomic(out / "results.json", json.dumps(data, separators=(",", ":"), allow_nan=False) + "\n")
    png = _plot(done["sel"], t["curves"], data["meta"], out / "extend.png") if plots else False
    text = report_markdown(data, png="extend.png" if png else None, done=done)
    write_text_atomic(out / "report.md", text)
    return {"text": text, "claims": data["claims"], "tables": t}
