"""View 5: attention maps of a loaded checkpoint on the bytes of a text."""

from __future__ import annotations

import torch

from relpos.explorer.cache import cached_call
from relpos.explorer.models import token_labels
from relpos.explorer.errors import ApiError
from relpos.explorer.params import get_int, get_text, tolist

ROUTE = "attention"


def maps_of(ex, index: int, data: bytes) -> list[torch.Tensor]:
    """Attention probabilities ``(H, N, N)`` of every layer (cached per checkpoint and text, in bytes)."""
    model = ex.checkpoints[index].model

    def compute():
        idx = torch.tensor([list(data)], dtype=torch.long)  # (1, N)
        with torch.no_grad():
            maps = model.attention_maps(idx)
        return [m[0].float() for m in maps]  # each (H, N, N)

    return cached_call(ex.attention_cache, (index, data), compute,
                       lambda ms: sum(m.numel() * m.element_size() for m in ms))


def answer(ex, params: dict) -> dict:
    """Attention probabilities of every head of one layer, for the bytes of ``text``."""
    if not ex.checkpoints:
        raise ApiError("no checkpoint loaded: start the explorer with --checkpoint DIR "
                       "(a folder written by relpos train)", code="no_checkpoint", field="checkpoint")
    L = ex.limits
    ci = get_int(params, "checkpoint", 0, 0, len(ex.checkpoints) - 1)
    ck = ex.checkpoints[ci]
    text = get_text(params, "text", "", L.max_text_chars)
    data = text.encode("utf-8")
    if not data:
        raise ApiError("type some text", code="empty", field="text")
    cap = min(L.max_attention_bytes, int(getattr(ck.config, "max_len", L.max_attention_bytes)))
    if len(data) > cap:
        raise ApiError(f"the text is {len(data)} bytes; the explorer accepts at most {cap} for this model",
                       code="too_large", field="text", limit=cap, unit="bytes", value=len(data))
    n_layers = int(ck.config.n_layers)
    layer = get_int(params, "layer", 0, 0, n_layers - 1)
    m = maps_of(ex, ci, data)[layer]
    return {"checkpoint": ck.label, "scheme": getattr(ck.config, "scheme", None), "n_layers": n_layers,
            "n_heads": int(m.shape[0]), "layer": layer, "bytes": list(data),
            # a character's first byte shows the character (猫, not xE7), its other bytes a dot
            "tokens": token_labels(data)[0], "byte_part": token_labels(data)[1],
            "causal": bool(getattr(ck.config, "causal", True)),
            "maps": [tolist(m[h], 5) for h in range(m.shape[0])]}
