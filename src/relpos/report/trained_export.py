"""Export the trained position parameters of a ``relpos compare`` folder for the explorer.

The explorer shows T5's table, KERPLE's r, FIRE's and DPB's MLPs and Shaw's
tables at their trained values when the package ships a file of them
(``relpos/data/trained_positions.json``, format in :mod:`relpos.explorer.trained`).
This module writes that file from the models a sweep kept (``OUT/models/``): for
every scheme, the first layer's position module of one fitted language model.
Only the position scheme's own parameters are stored.

With ``--results FILE`` it also writes the folder's ``results.json`` without training
curves and validation histories: the explorer offers it as the documented results
when the package ships it as ``relpos/data/results-documented.json``.

Usage::

    python -m relpos.report.trained_export [--include-unfitted] runs/compare-default \
        src/relpos/data/trained_positions.json
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

__all__ = ["trained_positions", "slim_results", "main"]


def trained_positions(out_dir: str | Path, *, task: str = "lm", seed: int = 0, fitted_only: bool = True) -> dict:
    """The trained-values document of a compare folder (schemes with learned position parameters only).

    Args:
        out_dir: a ``relpos compare`` output folder whose models were kept.
        task, seed: which runs to export.
        fitted_only: skip runs that missed the fit gate; with False they are exported and
            ``made_by`` says so (language-modelling runs that were still improving at their
            step budget still show what training made of the position parameters).
    """
    from relpos.training.checkpoint import load

    out_dir = Path(out_dir)
    results = json.loads((out_dir / "results.json").read_text())
    schemes: dict[str, dict] = {}
    for r in results["runs"]:
        if r["task"] != task or r["seed"] != seed or r["variant"] or r["scheme"] in schemes:
            continue
        train = r.get("train") or {}
        fitted = bool((train.get("fit") or {}).get("fitted"))
        if (fitted_only and not fitted) or not train.get("checkpoint"):
            continue
        model, mcfg = load(out_dir / train["checkpoint"])
        enc = model.layer_encoding(0) if callable(getattr(model, "layer_encoding", None)) else None
        if enc is None or not any(True for _ in enc.parameters()):
            continue
        state = {k: v.detach().float().tolist() for k, v in enc.state_dict().items() if v.is_floating_point()}
        schemes[r["scheme"]] = {
            "n_heads": mcfg.n_heads,
            "head_dim": mcfg.d_model // mcfg.n_heads,
            "options": dict(mcfg.scheme_options),
            "state": state,
            "fitted": fitted,
            "causal": True,  # compare trains decoder-only (causal) language models
        }
    cfg = results.get("config", {})
    made_by = (f"relpos compare --preset {cfg.get('preset', '?')}, task {task}, seed {seed}, "
               + ("fitted models only, " if fitted_only else "every trained model (see each entry's 'fitted'), ") +
               f"exported {_dt.date.today().isoformat()}")
    return {"version": 1, "made_by": made_by, "schemes": schemes}


def slim_results(results: dict) -> dict:
    """A compare ``results.json`` without the training curves and validation histories (what the
    explorer's extrapolation view needs: metrics, spans and the fit verdicts), for bundling."""
    out = {k: v for k, v in results.items() if k != "runs"}
    out["runs"] = []
    for r in results["runs"]:
        r = dict(r)
        train = dict(r.get("train") or {})
        train.pop("loss_curve", None)
        fit = dict(train.get("fit") or {})
        for k in ("history", "lr_tries"):
            fit.pop(k, None)
        if fit:
            train["fit"] = fit
        r["train"] = train
        out["runs"].append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m relpos.report.trained_export",
                                 description="export what the explorer ships from a relpos compare folder")
    ap.add_argument("compare_dir", help="a relpos compare output folder whose models were kept")
    ap.add_argument("out", help="the trained-values JSON file to write")
    ap.add_argument("--include-unfitted", action="store_true", help="also export runs that missed the fit gate")
    ap.add_argument("--results", metavar="RESULTS.json", help="also write the folder's results.json, slimmed")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    from relpos.outdir import write_text_atomic  # regular files, never written through a link

    doc = trained_positions(args.compare_dir, fitted_only=not args.include_unfitted)
    write_text_atomic(args.out, json.dumps(doc, separators=(",", ":")))
    print(f"wrote {args.out}: {', '.join(sorted(doc['schemes'])) or 'no scheme'}")
    if args.results:
        slim = slim_results(json.loads((Path(args.compare_dir) / "results.json").read_text()))
        write_text_atomic(args.results, json.dumps(slim, separators=(",", ":")))
        print(f"wrote {args.results}: {len(slim['runs'])} runs")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
