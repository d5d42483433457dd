"""Export the trained position parameters of a ``relpos compare`` folder for the explorer.

The explorer shows T5's table, KERPLE's r, FIRE's and DPB's MLPs and Shaw's
tables at their trained values when the package ships a file of them
(``relpos/data/trained_positions.json``, format in :mod:`relpos.explorer.trained`).
This module writes that file from the models a sweep kept (``OUT/models/``): for
every scheme, the first layer's position module of one fitted language model.
Only the position scheme's own parameters are stored.

Usage::

    python -m relpos.experiments.trained_export runs/compare-default src/relpos/data/trained_positions.json
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

__all__ = ["trained_positions", "main"]


def trained_positions(out_dir: str | Path, *, task: str = "lm", seed: int = 0) -> dict:
    """The trained-values document of a compare folder (schemes with learned position parameters only)."""
    from relpos.checkpoint import load

    out_dir = Path(out_dir)
    results = json.loads((out_dir / "results.json").read_text())
    schemes: dict[str, dict] = {}
    for r in results["runs"]:
        if r["task"] != task or r["seed"] != seed or r["variant"] or r["scheme"] in schemes:
            continue
        train = r.get("train") or {}
        if not (train.get("fit") or {}).get("fitted") or not train.get("checkpoint"):
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
        }
    cfg = results.get("config", {})
    made_by = (f"relpos compare --preset {cfg.get('preset', '?')}, task {task}, seed {seed}, fitted models only, "
               f"exported {_dt.date.today().isoformat()}")
    return {"version": 1, "made_by": made_by, "schemes": schemes}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m relpos.experiments.trained_export COMPARE_DIR OUT.json", file=sys.stderr)
        return 2
    doc = trained_positions(argv[0])
    Path(argv[1]).write_text(json.dumps(doc, separators=(",", ":")))
    print(f"wrote {argv[1]}: {', '.join(sorted(doc['schemes'])) or 'no scheme'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
