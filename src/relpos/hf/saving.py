"""Reload a bridged model saved with ``save_pretrained``: :func:`load_bridged`.

:func:`relpos.hf.use_scheme` records the scheme, its options, ``share`` and
``impl`` in the model's config (``config.relpos_bridge``), so
``model.save_pretrained(folder)`` writes them to ``folder/config.json`` beside
the weights; the scheme's parameters are in the weights (a shared table once,
registered on the base model). :func:`load_bridged` loads the model with
transformers, applies the recorded scheme again and loads the scheme's
parameters from the saved weights.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

__all__ = ["load_bridged", "saved_relpos_tensors"]

_MARK = "relpos_encoding."


def saved_relpos_tensors(folder: str | Path) -> dict[str, torch.Tensor]:
    """The scheme tensors (keys containing ``relpos_encoding.``) of a folder written by ``save_pretrained``.

    Reads ``model.safetensors`` or the shards named in ``model.safetensors.index.json``.

    Raises:
        FileNotFoundError: the folder holds neither (safetensors weights are needed).
    """
    from safetensors import safe_open

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted({f for k, f in weight_map.items() if _MARK in k})
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{folder} has no model.safetensors (or its index): save the bridged model with "
                                f"save_pretrained(folder) (safetensors, the default)")
    out: dict[str, torch.Tensor] = {}
    for name in files:
        with safe_open(str(folder / name), framework="pt") as f:
            for k in f.keys():
                if _MARK in k:
                    out[k] = f.get_tensor(k)
    return out


def load_bridged(folder: str | Path, **from_pretrained_kwargs):
    """Load a model saved after :func:`relpos.hf.use_scheme` with its scheme and the scheme's trained parameters.

    Args:
        folder: a folder written by ``model.save_pretrained`` of a bridged model.
        **from_pretrained_kwargs: passed to ``AutoModelForCausalLM.from_pretrained`` (``dtype``,
            ``device_map``, ...).

    Returns:
        The bridged model (its logits equal the saved model's).

    Raises:
        ValueError: the folder's config has no ``relpos_bridge`` record (not saved from a bridged model), or the
            weights lack a parameter of the recorded scheme (both named).
    """
    from relpos.hf.bridge import _transformers, use_scheme

    tf = _transformers()
    folder = Path(folder)
    rec = getattr(tf.AutoConfig.from_pretrained(folder), "relpos_bridge", None)
    if not isinstance(rec, dict) or "scheme" not in rec:
        raise ValueError(f"{folder}/config.json has no relpos_bridge record: it was not saved from a model bridged by "
                         f"relpos.hf.use_scheme (load it with transformers)")
    kw = {"attn_implementation": "eager", **from_pretrained_kwargs, "output_loading_info": True}
    verbosity = tf.logging.get_verbosity()
    tf.logging.set_verbosity_error()  # the scheme's tensors are "unexpected" to the plain model: loaded below
    try:
        model, info = tf.AutoModelForCausalLM.from_pretrained(folder, **kw)
    finally:
        tf.logging.set_verbosity(verbosity)
    odd = {k: [n for n in info.get(k) or () if _MARK not in n] for k in ("missing_keys", "unexpected_keys")}
    if any(odd.values()):  # what transformers would have warned about, besides the scheme's own tensors
        warnings.warn(f"{folder}: weights not matching the model besides the relpos scheme: "
                      f"missing {odd['missing_keys'][:5]}, unexpected {odd['unexpected_keys'][:5]}", stacklevel=2)
    use_scheme(model, rec["scheme"], impl=rec.get("impl", "auto"), share=rec.get("share"), **rec.get("options", {}))
    saved = saved_relpos_tensors(folder)
    own = {k for k in model.state_dict() if _MARK in k}
    missing = sorted(own - set(saved))
    if missing:
        raise ValueError(f"{folder}: the saved weights lack the scheme's {missing[:3]} (of {len(missing)}); was it "
                         f"saved with the same scheme?")
    result = model.load_state_dict({k: saved[k] for k in own}, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    return model
