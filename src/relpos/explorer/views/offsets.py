"""View 1: the tokens of a sentence and their relative positions ``d = j - i`` (optionally clipped)."""

from __future__ import annotations

from relpos import distance
from relpos.explorer.errors import ApiError
from relpos.explorer.params import get_choice, get_int, get_text
from relpos.explorer.content import tokenize

ROUTE = "offsets"


def tokens_of(ex, params: dict, noun: str) -> list[str]:
    """Tokens of ``params["text"]``, with the explorer's caps (``noun`` names it in errors)."""
    L = ex.limits
    tokens = tokenize(get_text(params, "text", "", L.max_text_chars))
    if not tokens:
        raise ApiError("type at least one word", code="empty", field="text")
    if len(tokens) > L.max_tokens:
        raise ApiError(f"the {noun} has {len(tokens)} tokens; the explorer shows at most {L.max_tokens}",
                       code="too_large", field="text", limit=L.max_tokens, unit="tokens", value=len(tokens))
    return tokens


def answer(ex, params: dict) -> dict:
    """Tokens of ``text`` and their relative positions ``d[i][j]`` (``j - i`` or ``i - j``)."""
    L = ex.limits
    tokens = tokens_of(ex, params, "sentence")
    convention = get_choice(params, "convention", "j-i", ("j-i", "i-j"))
    n = len(tokens)
    clip_raw = params.get("clip")
    clip = None if clip_raw in (None, "", "none") else get_int(params, "clip", None, 0, L.max_tokens)
    d = distance.relative_positions(n, convention=convention)  # (N, N)
    out = {"tokens": tokens, "n": n, "convention": convention, "clip": clip, "offsets": d.tolist()}
    out["clipped"] = distance.clip_relative(d, clip).tolist() if clip is not None else None
    return out
