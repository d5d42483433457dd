"""What every benchmark task provides, and the model-level evaluation tools they share.

A task knows how to make training batches (the batch-source protocol of
:func:`relpos.training.loop.train`: ``batch(step, micro) -> (x, y)`` with ``-100`` marking
targets that do not count) and how to measure a trained model at a list of
evaluation lengths. Tasks never train anything themselves.

Evaluation takes a ``model_for(seq_len)`` callable rather than a model, so that the
same protocol can measure a model whose position scheme is rescaled for each
evaluation length (the RoPE scalings: position interpolation, NTK, YaRN, which
take ``factor = seq_len / train_seq_len``) without the task knowing about it.

Everything here is deterministic: the same task options give the same batches and
the same evaluation examples on every run, for every scheme.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Callable, ClassVar, Protocol

import torch
from torch import Tensor, nn

__all__ = [
    "Measurement",
    "Task",
    "BatchSource",
    "ModelFor",
    "token_losses",
    "greedy_decode",
    "stable_seed",
    "IGNORE",
]

#: Target value that marks a position as not counted in the loss (as in ``F.cross_entropy``).
IGNORE = -100

#: ``model_for(seq_len) -> model``: the model to evaluate on sequences of ``seq_len`` tokens.
ModelFor = Callable[[int], nn.Module]


class BatchSource(Protocol):
    """The training-batch protocol (see :mod:`relpos.training.loop`)."""

    def batch(self, step: int, micro: int = 0) -> tuple[Tensor, Tensor]:  # (B, N), (B, N) int64
        ...


@dataclasses.dataclass
class Measurement:
    """One number (or a few related ones) measured on one trained model.

    Attributes:
        protocol: ``"window"`` (mean over non-overlapping windows of ``eval_len``
            tokens), ``"position"`` (the same windows, only positions
            ``[bucket_start, bucket_end)`` of each window), ``"fixed_target"``
            (the same final tokens, given ``eval_len`` tokens of context) or
            ``"accuracy"`` (algorithmic tasks, greedy decoding).
        eval_len: the evaluation length: tokens per window for language
            modelling, problem length for algorithmic tasks.
        loss: mean cross-entropy in nats per token.
        bpb: the same in bits per token (bits per byte for byte-level text).
        ppl: ``exp(loss)``.
        accuracy: fraction of examples whose whole answer was decoded exactly.
        token_accuracy: fraction of answer tokens decoded correctly.
        bucket_start, bucket_end: position range (``-1`` when not a bucket).
        count: tokens or examples averaged over.
        per_example: optional, one number per evaluation example in a fixed order that is the same for
            every scheme of a seed (algorithmic: exact match 0/1 of each prompt; language modelling: the
            mean loss of each window): what the paired bootstrap of
            :mod:`relpos.report.stats` resamples.
        per_example_token: optional, per-token accuracy of each example (algorithmic tasks).
    """

    protocol: str
    eval_len: int
    loss: float | None = None
    bpb: float | None = None
    ppl: float | None = None
    accuracy: float | None = None
    token_accuracy: float | None = None
    bucket_start: int = -1
    bucket_end: int = -1
    count: int = 0
    per_example: list[float] | None = None
    per_example_token: list[float] | None = None

    PROTOCOLS: ClassVar[tuple[str, ...]] = ("window", "position", "fixed_target", "accuracy")

    def __post_init__(self) -> None:
        if self.protocol not in self.PROTOCOLS:
            raise ValueError(f"protocol must be one of {self.PROTOCOLS}, got {self.protocol!r}")

    @classmethod
    def from_loss(cls, protocol: str, eval_len: int, loss: float, count: int, **kw) -> "Measurement":
        """Fill ``bpb`` and ``ppl`` from a mean loss in nats."""
        loss = float(loss)
        ppl = math.exp(loss) if loss < 700 else math.inf
        return cls(protocol, int(eval_len), loss=loss, bpb=loss / math.log(2), ppl=ppl, count=int(count), **kw)

    def to_dict(self) -> dict:
        """JSON-able fields; the per-example lists only when set."""
        d = dataclasses.asdict(self)
        for k in ("per_example", "per_example_token"):
            if d[k] is None:
                del d[k]
        return d


class Task:
    """Base class of benchmark tasks.

    Subclasses set ``name`` and ``kind`` (``"lm"`` or ``"algorithmic"``) and
    implement the methods below. ``train_len`` is the task's nominal training
    length (tokens per window for language modelling, the longest problem for
    algorithmic tasks) and ``eval_lengths`` the lengths it is measured at, in the
    same unit.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    vocab_size: int
    train_len: int
    eval_lengths: tuple[int, ...]

    def train_source(self, batch_size: int, seed: int) -> BatchSource:
        """Training batches, deterministic in ``(seed, step, micro)``."""
        raise NotImplementedError

    def train_seq_len(self) -> int:
        """Longest model input (tokens) seen in training."""
        raise NotImplementedError

    def seq_len(self, eval_len: int) -> int:
        """Longest model input (tokens) when evaluating at ``eval_len``."""
        raise NotImplementedError

    def max_seq_len(self) -> int:
        """Longest model input over all evaluation lengths (sizes learned tables)."""
        return max([self.train_seq_len()] + [self.seq_len(n) for n in self.eval_lengths])

    def evaluate(self, model_for: ModelFor, *, lengths: tuple[int, ...] | None = None) -> list[Measurement]:
        """Measure a trained model at every evaluation length (or ``lengths``)."""
        raise NotImplementedError

    def options(self) -> dict:
        """The task's settings, JSON-able (they enter the configuration fingerprint)."""
        raise NotImplementedError


def stable_seed(*parts) -> int:
    """A 63-bit seed from any printable parts, identical on every machine and run."""
    h = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def _param_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


#: Tokens per forward pass of the in-training validation (:func:`relpos.tasks.algorithmic.validation_score`, and
#: the language models' :func:`relpos.compare.fitting.lm_validation_loss`). Chunks of this size keep every activation within a few MB:
#: at the full preset's 1,024 copy examples NoPE's validation took 122 ms in 2,048-token chunks against 211 ms
#: in one 32,768-token chunk, Shaw's 165 ms against 669 ms (2026-12-06, one thread).
VALIDATION_TOKENS = 2048


@torch.no_grad()
def token_losses(model: nn.Module, x: Tensor, y: Tensor, *, max_tokens: int = 16384) -> Tensor:
    """Per-token cross-entropy of a causal LM, in nats, computed in float64.

    Args:
        model: ``model(x) -> logits (B, N, V)``.
        x: ``(B, N)`` int64 inputs.
        y: ``(B, N)`` int64 targets; ``-100`` marks positions that do not count.
        max_tokens: rows are processed in chunks of at most this many tokens.

    Returns:
        ``(B, N)`` float64 losses, NaN where ``y == -100``.

    A model with a ``token_losses(x, y)`` method (the Hugging Face wrapper, which
    never materialises the full ``(N, vocab)`` logits) computes each chunk itself.
    """
    if x.shape != y.shape or x.dim() != 2:
        raise ValueError(f"x and y must both be (B, N), got {tuple(x.shape)} and {tuple(y.shape)}")
    B, N = x.shape
    rows = max(1, max_tokens // max(N, 1))
    dev = _param_device(model)
    out = torch.empty(B, N, dtype=torch.float64)
    for s in range(0, B, rows):
        xb, yb = x[s : s + rows].to(dev), y[s : s + rows].to(dev)
        own = getattr(model, "token_losses", None)
        if callable(own):
            out[s : s + rows] = own(xb, yb).double().cpu()
            continue
        logits = model(xb).double()  # (b, N, V)
        lp = torch.log_softmax(logits, dim=-1)
        tgt = yb.clamp_min(0)
        nll = -lp.gather(-1, tgt[..., None])[..., 0]  # (b, N)
        nll = torch.where(yb == IGNORE, torch.full_like(nll, math.nan), nll)
        out[s : s + rows] = nll.cpu()
    return out


@torch.no_grad()
def greedy_decode(model: nn.Module, prompt: Tensor, n_new: int, *, max_tokens: int = 32768,
                  use_cache: bool = True) -> Tensor:
    """Greedy (argmax) continuation of every prompt row.

    With ``use_cache`` and a model that has ``generate(idx, n, greedy=True)``
    (:class:`relpos.model.TransformerLM`), the model's KV-cached decoding is
    used; otherwise the full forward pass is recomputed for every new token, which
    is by construction what the teacher-forced forward pass implies.

    Args:
        model: ``model(idx (B, N)) -> logits (B, N, V)``.
        prompt: ``(B, P)`` int64, every row the same length.
        n_new: tokens to generate.
        max_tokens: rows are decoded in chunks of at most this many tokens.
        use_cache: use ``model.generate`` when the model has it.

    Returns:
        ``(B, n_new)`` int64, the generated tokens only.
    """
    if prompt.dim() != 2:
        raise ValueError(f"prompt must be (B, P), got shape {tuple(prompt.shape)}")
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 0:
        raise ValueError(f"n_new must be an int >= 0, got {n_new!r}")
    B, P = prompt.shape
    dev = _param_device(model)
    rows = max(1, max_tokens // max(P + n_new, 1))
    cached = use_cache and callable(getattr(model, "generate", None))
    outs = []
    for s in range(0, B, rows):
        seq = prompt[s : s + rows].to(dev)
        if n_new == 0:
            outs.append(seq[:, P:].cpu())
            continue
        if cached:
            seq = model.generate(seq, n_new, greedy=True)
        else:
            for _ in range(n_new):
                nxt = model(seq)[:, -1].argmax(-1, keepdim=True)  # (b, 1)
                seq = torch.cat([seq, nxt], dim=1)
        outs.append(seq[:, P:].cpu())
    return torch.cat(outs, 0) if outs else torch.empty(0, n_new, dtype=torch.long)
