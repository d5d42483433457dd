"""What a model's rotary embedding does, read from the model itself (used by :func:`relpos.hf.use_scheme`).

* :func:`rotary_width`: how many channels of each head the model rotates (the last
  dimension of its ``rotary_emb``'s ``cos``), so a partial-rotary model (StableLM,
  GLM, ...) gets an identity of the right width and relpos' RoPE its
  ``rotary_fraction``.
* :func:`rope_pairing`: which channels the model pairs (``rotate_half``, as Llama;
  or interleaved, as GLM, Cohere, Helium), found by running one attention layer
  (a float32 copy) with the model's own rotation and with relpos' RoPE under each
  pairing, and keeping the pairing that reproduces it; a model that neither
  reproduces is refused by name.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from relpos.encodings import make_encoding
from relpos.encodings.rope import PAIRINGS

__all__ = ["rotary_width", "rope_pairing", "PROBE_TOL"]

#: Largest relative difference (max |a - b| / max |b|) between the model's own rotation and relpos' RoPE, on one
#: float32 attention layer, for a pairing to count as reproduced (a wrong pairing differs by 1e-2 and more).
PROBE_TOL = 1e-4
_PROBE_N = 16
_PROBE_START = 5  # positions 5 .. 20: every frequency has turned (an offset also checks positions are used)


def _cos_sin(rotary: nn.Module, x: torch.Tensor, position_ids: torch.Tensor, model_type: str):
    try:
        out = rotary(x, position_ids)
    except Exception as e:  # noqa: BLE001 - any failure means the bridge cannot read it: refused by name
        raise ValueError(f"model type {model_type!r}: the relpos bridge could not call its rotary_emb(x, position_ids) "
                         f"({type(e).__name__}: {e})") from None
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)
            and out[0].shape == out[1].shape and out[0].dim() == 3):
        raise ValueError(f"model type {model_type!r}: its rotary_emb does not return (cos, sin) of shape (B, N, d); "
                         f"the relpos bridge cannot turn it off")
    return out


def rotary_width(model, rotary: nn.Module, head_dim: int) -> int:
    """Channels per head the model rotates (``cos.shape[-1]`` of its ``rotary_emb``).

    Raises:
        ValueError: the rotary embedding is not ``(cos, sin)`` of an even width ``<= head_dim`` (named).
    """
    mt = model.config.model_type
    p = next(model.parameters())
    x = torch.zeros(1, 2, model.config.hidden_size, device=p.device, dtype=p.dtype)
    cos, _ = _cos_sin(rotary, x, torch.arange(2, device=p.device)[None], mt)
    d = int(cos.shape[-1])
    if d % 2 or d > head_dim or d < 2:
        raise ValueError(f"model type {mt!r}: its rotary_emb gives cos of width {d} for head_dim {head_dim}; the "
                         f"relpos bridge needs an even width in [2, head_dim]")
    return d


def _run(layer: nn.Module, x: torch.Tensor, cos_sin, position_ids: torch.Tensor) -> torch.Tensor:
    out = layer(hidden_states=x, position_embeddings=cos_sin, attention_mask=None, position_ids=position_ids)
    return out[0] if isinstance(out, tuple) else out


def rope_pairing(model, attn: nn.Module, rotary: nn.Module, no_rotary: nn.Module, *, n_heads: int, head_dim: int,
                 attn_name: str, **rope_opts) -> str:
    """The pairing (``"half"`` or ``"interleaved"``) under which relpos' RoPE with ``rope_opts`` reproduces ``attn``.

    Runs a float32 copy of one attention layer on random inputs at positions 5..20, once with the model's
    ``rotary`` and no relpos scheme, once per pairing with ``no_rotary`` and relpos' RoPE, through the
    attention function registered as ``attn_name``.

    Raises:
        ValueError: no pairing reproduces the layer within :data:`PROBE_TOL` (the model type named), or the
            layer cannot be run this way.
    """
    mt = model.config.model_type
    p = next(model.parameters())
    layer = copy.deepcopy(attn).float().eval()
    layer.config = copy.copy(attn.config)
    layer.config._attn_implementation = attn_name
    layer.relpos_impl = "dense"
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(1, _PROBE_N, model.config.hidden_size, generator=g).to(p.device)
    pos = torch.arange(_PROBE_START, _PROBE_START + _PROBE_N, device=p.device)[None]

    def make(name, **kw):
        return make_encoding(name, n_heads=n_heads, head_dim=head_dim, d_model=model.config.hidden_size,
                             max_len=4 * _PROBE_N, causal=True, **kw).to(p.device)

    errors = {}
    try:
        with torch.no_grad():
            cos, sin = _cos_sin(rotary, x, pos, mt)
            layer.relpos_encoding = make("nope")
            want = _run(layer, x, (cos.float(), sin.float()), pos)
            for pairing in PAIRINGS:
                layer.relpos_encoding = make("rope", **{**rope_opts, "pairing": pairing})
                got = _run(layer, x, no_rotary(x, pos), pos)
                errors[pairing] = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
                if errors[pairing] <= PROBE_TOL:
                    return pairing
    except (TypeError, RuntimeError, ValueError) as e:
        if str(e).startswith(f"model type {mt!r}"):
            raise
        raise ValueError(f"model type {mt!r}: the relpos bridge could not run its attention layer to read its RoPE "
                         f"pairing ({type(e).__name__}: {e})") from None
    found = ", ".join(f"{k}: {v:.2g}" for k, v in errors.items())
    raise ValueError(f"model type {mt!r} rotates q and k in a way relpos' RoPE does not reproduce (relative "
                     f"difference per pairing {found}; tolerance {PROBE_TOL}); the relpos bridge refuses it")
