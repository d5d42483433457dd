"""Trained position parameters for the explorer, when the package ships them.

The bias view shows a scheme at its random initial values, or -- when a file of
trained values is present -- at the values a ``relpos compare`` run learned.
The file is JSON (nothing is unpickled), looked for at these paths inside the
``relpos`` package, first found wins:

* ``explorer/static/trained.json`` (package data; not served by the server,
  which serves only .html, .js and .css);
* ``data/trained_positions.json``.

Format (version 1)::

    {"version": 1,
     "made_by": "relpos compare --preset full, lm task, seed 0, 2026-12-01",  # how it was made
     "schemes": {
       "t5": {"n_heads": 4, "head_dim": 64, "options": {"num_buckets": 32},
              "state": {"table": [[...], ...]}},               # the scheme's state_dict, as nested lists
       ...}}

Only the position scheme's own parameters are stored (the model's other weights are not).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import torch

from relpos.explorer.errors import ApiError

__all__ = ["TRAINED_PATHS", "trained_values", "trained_entry", "shown_causally", "load_into"]

TRAINED_PATHS = ("explorer/static/trained.json", "data/trained_positions.json")
_MAX_BYTES = 16 * 1024 * 1024


@functools.lru_cache(maxsize=1)
def trained_values() -> dict:
    """``{"made_by": str, "schemes": {name: entry}}``: the position parameters of the shipped trained
    models (:mod:`relpos.explorer.models`, all fitted), then the *fitted* entries of the first file
    found (an entry marked ``"fitted": false`` is not shown: only fitted values are taught from).
    Each entry carries its own ``made_by`` and ``fitted``."""
    file = _file_values()
    schemes = {k: {**v, "made_by": v.get("made_by") or file["made_by"]} for k, v in file["schemes"].items()
               if isinstance(v, dict) and v.get("fitted", True) is not False}
    schemes.update(_model_values())
    return {"made_by": file["made_by"], "schemes": schemes, "path": file["path"]}


def _model_values() -> dict:
    """Entries from the shipped trained models: the scheme module of layer 0 (T5 shares one across layers)."""
    from relpos.explorer import models as models_mod

    out = {}
    for d in models_mod.shipped_model_dirs():
        from relpos.training import checkpoint as ckpt
        model, cfg = ckpt.load(d)
        enc = model.layer_encoding(0)
        if enc is None or not any(True for _ in enc.parameters()):
            continue  # nothing learned in the position scheme (ALiBi, RoPE, NoPE)
        extra = models_mod.read_extra(d)
        out[cfg.scheme] = {
            "n_heads": int(cfg.n_heads), "head_dim": int(cfg.d_model // cfg.n_heads),
            "options": dict(cfg.scheme_options or {}), "causal": bool(cfg.causal), "fitted": bool(extra.get("fitted")),
            "made_by": f"{extra.get('recipe', 'relpos.explorer.make_models')}: layer 1 of the shipped model "
                       f"relpos/explorer/data/models/{d.name}, trained on {extra.get('trained_on', '?')}",
            "state": {k: v.tolist() for k, v in enc.state_dict().items()},
        }
    return out


def _file_values() -> dict:
    """``{"made_by", "schemes", "path"}`` of the first trained-values file found."""
    root = resources.files("relpos")
    for rel in TRAINED_PATHS:
        node = root
        for part in rel.split("/"):
            node = node.joinpath(part)
        try:
            if not node.is_file():
                continue
            raw = node.read_bytes()
        except (OSError, FileNotFoundError):
            continue
        if len(raw) > _MAX_BYTES:
            raise ValueError(f"relpos/{rel} is {len(raw)} bytes; trained values are at most {_MAX_BYTES}")
        data = json.loads(raw.decode("utf-8"), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("schemes"), dict):
            raise ValueError(f"relpos/{rel} is not a version 1 trained-values file")
        return {"made_by": str(data.get("made_by", "")), "schemes": data["schemes"], "path": rel}
    return {"made_by": "", "schemes": {}, "path": None}


def trained_entry(name: str) -> dict | None:
    """The trained entry of one scheme, or None."""
    entry = trained_values()["schemes"].get(name)
    return entry if isinstance(entry, dict) else None


def shown_causally(entry: dict | None) -> bool:
    """Whether trained values must be shown causally: a causal language model (what ``relpos
    compare`` trains) trained only offsets d <= 0, and causal schemes bucket offsets differently."""
    return bool(entry is not None and entry.get("causal", True))


def load_into(enc: torch.nn.Module, entry: dict, name: str) -> None:
    """Copy the stored state into a built scheme (shapes must match).

    Raises:
        ApiError: the stored state does not fit the scheme as built.
    """
    state: dict[str, Any] = entry.get("state") or {}
    own = dict(enc.state_dict())
    with torch.no_grad():
        for key, value in state.items():
            if key not in own:
                raise ApiError(f"the trained values of {name} hold {key!r}, which this build of the scheme lacks",
                               field="values")
            t = torch.tensor(value, dtype=own[key].dtype)
            if t.shape != own[key].shape:
                raise ApiError(f"the trained {name}.{key} has shape {tuple(t.shape)}, the scheme "
                               f"{tuple(own[key].shape)}", field="values")
            own[key].copy_(t)
