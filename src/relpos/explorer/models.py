"""The small trained language models the explorer ships, and a layer's terms on a text.

The models live in ``relpos/explorer/data/models/<scheme>/`` as ordinary relpos checkpoints
(safetensors + JSON, read only through :func:`relpos.training.checkpoint.load`; nothing is unpickled),
made by ``python -m relpos.explorer.make_models`` (the command, recipe, corpus, fit record and
measured time are in each ``config.json``'s ``extra``). Only models that passed the fit gate are
written, so every shipped model is fitted.

Views 0 and 5 open on :data:`DEFAULT_MODEL` when it ships (on the user's own first checkpoint when
``relpos explore --checkpoint`` gives one).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import torch

__all__ = ["DEFAULT_MODEL", "shipped_model_dirs", "read_extra", "training_parts", "token_labels", "layer_logits"]

#: The shipped model views 0 and 5 open on (its bucket walk and its position term are the lesson).
DEFAULT_MODEL = "t5"

#: The order the page offers shipped models in.
ORDER = ("t5", "alibi", "rope", "shaw", "nope")


def shipped_model_dirs() -> list[Path]:
    """Folders of the shipped models (those with a ``config.json``), :data:`DEFAULT_MODEL` first."""
    root = resources.files("relpos").joinpath("explorer").joinpath("data").joinpath("models")
    try:
        found = [Path(str(d)) for d in root.iterdir() if d.is_dir() and d.joinpath("config.json").is_file()]
    except (OSError, FileNotFoundError, NotADirectoryError):
        return []
    rank = {n: i for i, n in enumerate(ORDER)}
    return sorted(found, key=lambda p: (rank.get(p.name, len(ORDER)), p.name))


def read_extra(path: str | Path) -> dict:
    """The ``extra`` record of a checkpoint's ``config.json`` (what it was trained on, ``fitted``), or {}."""
    try:
        with open(Path(path) / "config.json", encoding="utf-8") as f:
            extra = json.load(f).get("extra")
        return extra if isinstance(extra, dict) else {}
    except (OSError, ValueError):
        return {}


def training_parts(extra: dict) -> dict | None:
    """What a model made by ``make_models`` was trained on, as fields the page words in its own language
    (``{"python": "3.11", "bytes": 11217603, "window": 64}``), or None for any other description."""
    import re

    m = re.fullmatch(r"the built-in corpus: Python (\d+\.\d+)'s standard library, train split \(([\d,]+) bytes\), "
                     r"byte-level, windows of (\d+) bytes", str(extra.get("trained_on", "")))
    if not m:
        return None
    return {"python": m.group(1), "bytes": int(m.group(2).replace(",", "")), "window": int(m.group(3))}


def token_labels(data: bytes) -> tuple[list[str], list[int]]:
    """Labels of the bytes of a UTF-8 text: a character's first byte shows the character (猫, not xE7),
    its other bytes show ``·``; with, per byte, its index in the character (0 for the first).

    Example:
        >>> token_labels("a猫".encode())
        (['a', '猫', '·', '·'], [0, 0, 1, 2])
    """
    from relpos.explorer.content import byte_label

    labels, part = [], []
    i = 0
    while i < len(data):
        b = data[i]
        size = 2 if 0xC0 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF8 else 1
        try:
            ch = data[i:i + size].decode("utf-8") if size > 1 else None
        except UnicodeDecodeError:
            ch = None
        if ch is None:  # ASCII, or a byte that does not start a whole character: its own label
            labels.append(byte_label(b))
            part.append(0)
            i += 1
            continue
        labels.extend([ch] + ["\u00b7"] * (size - 1))
        part.extend(range(size))
        i += size
    return labels, part


def layer_logits(model, data: bytes, layer: int) -> dict:
    """One layer's attention terms of a trained model on the bytes of a text.

    Returns ``{"q", "k": (1, H, N, D) as the layer projects them (not rotated), "enc": the layer's
    scheme or None, "scale", "content": (H, N, N) scale * q.k, "logits": (H, N, N) the logits as
    relpos's dense attention forms them, unmasked}``; softmax of ``logits`` under the model's mask
    is ``model.attention_maps`` of that layer.
    """
    from relpos.explorer.content import qk_logits

    idx = torch.tensor([list(data)], dtype=torch.long)  # (1, N)
    n = idx.shape[1]
    pos = torch.arange(n)[None]  # (1, N)
    model.eval()
    with torch.no_grad():
        h = model._embed(idx, None)
        for i, blk in enumerate(model.blocks):
            if i == layer:
                break
            h, _ = blk(h, model.layer_encoding(i), positions=None)
        blk = model.blocks[layer]
        q, k, _ = blk.attn.project(blk.ln1(h))  # (1, H, N, D)
        enc = model.layer_encoding(layer)
        D = q.shape[-1]
        scale = float(enc.attention_scale(D)) if enc is not None else D ** -0.5
        content = scale * (q @ k.transpose(-1, -2))  # (1, H, N, N)
        logits = content if enc is None else qk_logits(enc, q, k, pos, scale)
    return {"q": q, "k": k, "enc": enc, "scale": scale, "content": content[0].float(), "logits": logits[0].float()}
