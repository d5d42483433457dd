"""Passkey retrieval: can a model fetch a number from far back in its context?

The long-context probe of Mohtashami & Jaggi 2023 ("Landmark Attention",
https://arxiv.org/abs/2305.16300), also used by the position-interpolation and
YaRN papers: a short random number (the *needle*) is written once inside
repetitive filler text, and the prompt ends by asking for it. Filler carries no
information, so the only way to answer is to attend to the needle, however far
back it sits. It complements the fixed-target protocol of
:mod:`relpos.tasks.lm`: that one asks whether a model *survives* a long context,
this one whether it *uses* it.

An example of length ``L`` is built at the token level, so that its length and
the needle's place are exact for any tokenizer::

    [bos] intro  filler[:a]  needle  filler[a:F]  question  answer

``F`` filler tokens make the model input (everything but the last answer token)
exactly ``L`` tokens long, and the needle starts after ``a = round(depth * F)``
filler tokens: depth 0 puts it right after the intro, depth 1 right before the
question. The wording is this module's own; the number has ``digits`` digits
(no leading zero) drawn from a seed fixed by ``(seed, L, depth, index)``.

Scoring is exact and needs one forward pass: with the answer teacher-forced,
an example counts as correct when the argmax at every answer position is the
answer token, which is exactly when greedy decoding would write the answer.
Results are :class:`~relpos.tasks.base.Measurement` rows with protocol
``"accuracy"``, ``eval_len = L``, and the depth in percent in ``bucket_start``
and ``bucket_end`` (``-1`` for the mean over depths); ``loss`` is the mean
cross-entropy of the answer tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from relpos.tasks.base import Measurement, ModelFor, stable_seed
from relpos.validation import check_float, check_int

__all__ = ["Passkey", "PasskeyExample", "passkey_table", "DEPTHS"]

#: default needle depths (fraction of the filler before the needle)
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)

INTRO = "Find the secret number hidden in this text.\n"
FILLER = "The lamps are lit in the square. The river runs past the old mill. Wind comes down from the hills. "
NEEDLE = "The secret number is {key}. Remember {key}. "
QUESTION = "\nWhat is the secret number? It is"
ANSWER = " {key}"


def _utf8(text: str) -> list[int]:
    return list(text.encode("utf-8"))


@dataclass
class PasskeyExample:
    """One prompt: ``tokens`` (model input plus the last answer token, ``length + 1`` ids)."""

    tokens: list[int]
    key: str
    depth: float
    needle_start: int  # index of the needle's first token in ``tokens``
    needle_len: int
    answer_len: int  # the answer is the last ``answer_len`` tokens
    filler_before: int
    filler_total: int


class Passkey:
    """Passkey-retrieval examples and their exact scoring (see the module docstring).

    Args:
        lengths: model input lengths ``L`` in tokens.
        depths: needle depths in ``[0, 1]``.
        n: examples per (length, depth) cell.
        digits: digits of the number.
        seed: example seed.
        encode: ``text -> token ids`` (default: UTF-8 bytes, for relpos's byte models).
        bos: token ids put first (e.g. a tokenizer's BOS), counted in ``L``.
        max_tokens: tokens per forward pass.

    Example:
        >>> pk = Passkey([300], depths=[0.5], n=1)
        >>> ex = pk.example(300, 0.5, 0)
        >>> len(ex.tokens) - 1, bytes(ex.tokens[ex.needle_start:ex.needle_start + 21]).decode()
        (300, 'The secret number is ')
    """

    def __init__(self, lengths: Sequence[int], depths: Sequence[float] = DEPTHS, *, n: int = 10, digits: int = 5,
                 seed: int = 0, encode: Callable[[str], list[int]] | None = None, bos: Sequence[int] = (),
                 max_tokens: int = 16384) -> None:
        self.lengths = tuple(sorted({check_int("lengths entries", L, lo=1) for L in lengths}))
        if not self.lengths:
            raise ValueError("lengths must not be empty")
        self.depths = tuple(check_float("depths entries", d, 0.0, 1.0) for d in depths)
        if not self.depths:
            raise ValueError("depths must not be empty")
        self.n = check_int("n", n, lo=1)
        self.digits = check_int("digits", digits, 1, 18)
        self.seed = check_int("seed", seed, lo=0)
        self.max_tokens = check_int("max_tokens", max_tokens, lo=1)
        self.encode = encode or _utf8
        self.bos = [int(t) for t in bos]
        self._intro = list(self.encode(INTRO))
        self._question = list(self.encode(QUESTION))
        unit = list(self.encode(FILLER))
        if not unit:
            raise ValueError("the tokenizer encodes the filler text to nothing")
        self._filler_unit = unit
        for L in self.lengths:
            need = self.min_length()
            if L < need:
                raise ValueError(f"passkey length {L} is too short: a prompt with a {self.digits}-digit number "
                                 f"needs at least {need} tokens")

    @classmethod
    def fitting(cls, lengths: Sequence[int], **kw) -> "Passkey | None":
        """A :class:`Passkey` over the ``lengths`` long enough for its prompt (None if none is).

        For running passkey retrieval at a language-modelling task's evaluation
        lengths, the shortest of which may be too short for a prompt.
        """
        probe = cls([1 << 20], **kw)
        fit = [L for L in lengths if L >= probe.min_length()]
        return cls(fit, **kw) if fit else None

    def options(self) -> dict:
        return {"lengths": list(self.lengths), "depths": list(self.depths), "n": self.n, "digits": self.digits,
                "seed": self.seed}

    def _parts(self, key: str) -> tuple[list[int], list[int]]:
        return list(self.encode(NEEDLE.format(key=key))), list(self.encode(ANSWER.format(key=key)))

    def min_length(self) -> int:
        """Shortest ``L`` whose prompt fits with no filler (longest needle and answer over keys)."""
        key = "9" * self.digits
        needle, answer = self._parts(key)
        return len(self.bos) + len(self._intro) + len(needle) + len(self._question) + len(answer) - 1 + 8

    def _filler(self, n: int) -> list[int]:
        reps = n // len(self._filler_unit) + 1
        return (self._filler_unit * reps)[:n]

    def key(self, length: int, depth: float, index: int) -> str:
        rng = random.Random(stable_seed("passkey", self.seed, length, repr(float(depth)), index))
        return str(rng.randint(10 ** (self.digits - 1), 10 ** self.digits - 1))

    def example(self, length: int, depth: float, index: int) -> PasskeyExample:
        """Example ``index`` of the cell ``(length, depth)``."""
        key = self.key(length, depth, index)
        needle, answer = self._parts(key)
        head = self.bos + self._intro
        fixed = len(head) + len(needle) + len(self._question) + len(answer)
        F = length + 1 - fixed
        if F < 0:
            raise ValueError(f"passkey length {length} is too short for its prompt ({fixed - 1} tokens)")
        a = round(depth * F)
        filler = self._filler(F)
        toks = head + filler[:a] + needle + filler[a:] + self._question + answer
        assert len(toks) == length + 1
        return PasskeyExample(toks, key, float(depth), len(head) + a, len(needle), len(answer), a, F)

    def batch(self, length: int, depth: float) -> tuple[torch.Tensor, list[PasskeyExample]]:
        """All ``n`` examples of a cell as ``(n, length + 1)`` int64, with their descriptions.

        Answers of one cell may tokenize to different lengths; each row keeps its own.
        """
        exs = [self.example(length, depth, i) for i in range(self.n)]
        return torch.tensor([e.tokens for e in exs], dtype=torch.long), exs

    @torch.no_grad()
    def score(self, model, length: int, depth: float) -> Measurement:
        """Exact-match accuracy of one cell (teacher-forced argmax over the answer tokens)."""
        full, exs = self.batch(length, depth)
        k = max(e.answer_len for e in exs)
        hits, tok_hits, tok_total, nll = 0, 0, 0, 0.0
        rows = max(1, self.max_tokens // length)
        for s in range(0, full.shape[0], rows):
            xb = full[s: s + rows, :-1]
            logits = last_logits(model, xb, k).double().cpu()  # (b, k, V): predictions of the last k tokens
            lp = torch.log_softmax(logits, dim=-1)
            for r, e in enumerate(exs[s: s + rows]):
                tgt = full[s + r, -e.answer_len:]  # (A,)
                lpr = lp[r, k - e.answer_len:]  # (A, V)
                ok = lpr.argmax(-1) == tgt
                hits += int(ok.all())
                tok_hits += int(ok.sum())
                tok_total += e.answer_len
                nll += float(-lpr.gather(-1, tgt[:, None]).sum())
        pct = round(depth * 100)
        return Measurement("accuracy", length, loss=nll / tok_total, accuracy=hits / len(exs),
                           token_accuracy=tok_hits / tok_total, bucket_start=pct, bucket_end=pct, count=len(exs))

    def evaluate(self, model_for: ModelFor, *, lengths: Sequence[int] | None = None) -> list[Measurement]:
        """Every (length, depth) cell, plus the mean over depths per length (``bucket_start = -1``)."""
        out = []
        for L in tuple(lengths or self.lengths):
            model = model_for(L)
            cells = [self.score(model, L, d) for d in self.depths]
            out += cells
            cnt = sum(m.count for m in cells)
            out.append(Measurement(
                "accuracy", L, loss=sum(m.loss * m.count for m in cells) / cnt,
                accuracy=sum(m.accuracy * m.count for m in cells) / cnt,
                token_accuracy=sum(m.token_accuracy * m.count for m in cells) / cnt, count=cnt))
        return out


def last_logits(model, x: torch.Tensor, k: int) -> torch.Tensor:
    """Logits ``(B, k, V)`` of the last ``k`` positions of ``x (B, N)``.

    Uses ``model.last_logits(x, k)`` when the model has it (the Hugging Face
    wrapper computes only those rows), otherwise ``model(x)[:, -k:]``.
    """
    dev = next((p.device for p in model.parameters()), torch.device("cpu")) if hasattr(model, "parameters") \
        else torch.device("cpu")
    x = x.to(dev)
    fn = getattr(model, "last_logits", None)
    if callable(fn):
        return fn(x, k)
    return model(x)[:, -k:]


#: a cell resting on fewer prompts than this shows its count, ``0.00 (n=1)``.
FEW_EXAMPLES = 10


def passkey_table(measurements: Sequence[Measurement | dict], *, title: str = "passkey accuracy") -> str:
    """A Markdown table of accuracy: one row per length, one column per depth, and the mean; a cell that rests
    on fewer than :data:`FEW_EXAMPLES` prompts shows its count."""
    rows: dict[int, dict[int, str]] = {}
    for m in measurements:
        d = m.to_dict() if isinstance(m, Measurement) else m
        if d.get("protocol") != "accuracy" or d.get("accuracy") is None:
            continue
        n = d.get("count")
        few = f" (n={n})" if isinstance(n, int) and n < FEW_EXAMPLES else ""
        rows.setdefault(int(d["eval_len"]), {})[int(d.get("bucket_start", -1))] = f"{float(d['accuracy']):.2f}{few}"
    depths = sorted({b for r in rows.values() for b in r if b >= 0})
    head = f"| {title} | " + " | ".join(f"depth {b}%" for b in depths) + " | mean |"
    lines = [head, "|" + "---|" * (len(depths) + 2)]
    for L in sorted(rows):
        r = rows[L]
        cells = [r.get(b, "") for b in depths] + [r.get(-1, "")]
        lines.append(f"| {L} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
