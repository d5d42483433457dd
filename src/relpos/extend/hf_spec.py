"""Typed settings of ``relpos extend --hf-model`` (:class:`HFExtendSpec`), checked with one-line errors.

>>> HFExtendSpec(model="m", corpus="c.txt", out="o").scaling
'yarn'
>>> HFExtendSpec(model="m", corpus="c.txt", out="o", scheme="alibi").scaling is None
True
>>> HFExtendSpec(model="m", corpus="c.txt", out="o", factor=0.5)
Traceback (most recent call last):
...
ValueError: --factor must be a number in (1, 64], got 0.5
"""

from __future__ import annotations

import dataclasses
import math

from relpos.extend.spec import _check_int

__all__ = ["HFExtendSpec", "FINETUNE_SCALINGS"]

#: RoPE scalings a checkpoint can be fine-tuned under (transformers implements each; ``none`` is direct
#: fine-tuning of the checkpoint's own RoPE at the longer length).
FINETUNE_SCALINGS: tuple[str, ...] = ("none", "linear", "dynamic", "yarn", "llama3")


@dataclasses.dataclass
class HFExtendSpec:
    """Settings of one ``relpos extend --hf-model`` run.

    Attributes:
        model: a checkpoint folder (``config.json``) or a ``.gguf`` file.
        corpus: the corpus (a path or a :class:`~relpos.corpus.CorpusSpec` dict): fine-tuning reads its training
            split, every reported number its test split.
        out: the output folder (the ``--out`` rules of :mod:`relpos.outdir`).
        scaling: the RoPE scaling put on the checkpoint at ``factor`` (:data:`FINETUNE_SCALINGS`); None with
            ``scheme``.
        scheme: a relpos scheme to swap in instead (:func:`relpos.hf.use_scheme`), e.g. ``"alibi"``.
        scheme_options: the scheme's options.
        factor: the fine-tuning context is ``factor x L0`` (``L0``: the checkpoint's context or ``context``).
        steps: fine-tuning steps (0: evaluate only).
        lr: peak learning rate (AdamW, linear warm-up then constant; Chen et al. fine-tune at 2e-5).
        batch_size: rows of ``factor x L0`` tokens per step.
        warmup: warm-up steps (None: ``min(20, steps // 10)``).
        weight_decay: AdamW weight decay.
        context: ``L0`` (None: from the config).
        eval_factors: evaluation lengths as multiples of ``L0`` (None: 1 and ``factor``).
        eval_tokens, max_eval_tokens: tokens scored per length; longest forward pass.
        blocks: fixed-target blocks of the evaluation (None: its default).
        passkey_n: passkey examples per depth (0: none).
        tokenizer, cache_dir, device, dtype: as ``relpos compare --hf-model``.
        ckpt_every: steps between training checkpoints (resume after a kill); None: ``max(1, steps // 10)``.
        seed: data order of fine-tuning.
        force: move the results of another run aside instead of refusing.
    """

    model: str
    corpus: object
    out: str
    scaling: str | None = "yarn"
    scheme: str | None = None
    scheme_options: dict = dataclasses.field(default_factory=dict)
    factor: float = 4.0
    steps: int = 100
    lr: float = 2e-5
    batch_size: int = 1
    warmup: int | None = None
    weight_decay: float = 0.0
    context: int | None = None
    eval_factors: tuple[float, ...] | None = None
    eval_tokens: int = 16384
    blocks: int | None = None
    max_eval_tokens: int = 32768
    passkey_n: int = 0
    tokenizer: str | None = None
    cache_dir: str | None = None
    device: str | None = None
    dtype: str = "float32"
    ckpt_every: int | None = None
    seed: int = 0
    force: bool = False

    def __post_init__(self) -> None:
        if not self.model or not self.corpus:
            raise ValueError("relpos extend --hf-model needs --hf-model and --corpus")
        if self.scheme is not None:
            self.scaling = None
        elif self.scaling not in FINETUNE_SCALINGS:
            raise ValueError(f"--scaling must be one of {', '.join(FINETUNE_SCALINGS)}, got {self.scaling!r}")
        f = self.factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or not 1 < f <= 64:
            raise ValueError(f"--factor must be a number in (1, 64], got {f!r}")
        self.factor = float(f)
        _check_int("--steps", self.steps, 0, 1 << 24)
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not 0 < self.lr <= 1:
            raise ValueError(f"--lr must be a number in (0, 1], got {self.lr!r}")
        _check_int("--batch-size", self.batch_size, 1, 4096)
        if self.warmup is not None:
            _check_int("--warmup", self.warmup, 0, 1 << 24)
        if self.ckpt_every is not None:
            _check_int("--ckpt-every", self.ckpt_every, 1, 1 << 24)
        _check_int("--seed", self.seed, 0, 2**31 - 1)
        if not (isinstance(self.weight_decay, (int, float)) and 0 <= self.weight_decay < math.inf):
            raise ValueError(f"--weight-decay must be a finite number >= 0, got {self.weight_decay!r}")
        ef = self.eval_factors if self.eval_factors is not None else (1.0, self.factor)
        for x in ef:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 1 <= x <= 1024:
                raise ValueError(f"--eval-factors entries must be numbers in [1, 1024], got {x!r}")
        self.eval_factors = tuple(sorted({float(x) for x in ef}))
        if self.scheme is not None:
            from relpos.hf.bridge import refusal

            why = refusal(self.scheme, **self.scheme_options)
            if why:
                raise ValueError(f"--scheme: {why}")

    @property
    def warmup_steps(self) -> int:
        return self.warmup if self.warmup is not None else min(20, self.steps // 10)

    @property
    def ckpt_steps(self) -> int:
        return self.ckpt_every or max(1, self.steps // 10)

    def eval_spec(self) -> dict:
        """The :class:`relpos.pretrained.evaluate.HFEvalSpec` of every evaluation row (the checkpoint evaluated as
        its config says: ``native``)."""
        return {"model": self.model, "corpus": self.corpus, "tokenizer": self.tokenizer, "scalings": ["native"],
                "factors": list(self.eval_factors), "context": self.context, "eval_tokens": self.eval_tokens,
                "blocks": self.blocks, "passkey_n": self.passkey_n, "device": self.device, "dtype": self.dtype,
                "max_eval_tokens": self.max_eval_tokens, "cache_dir": self.cache_dir, "train_split": True}

    def protocol(self) -> dict:
        """What decides the numbers besides the evaluation's own protocol."""
        return {"scaling": self.scaling, "scheme": self.scheme, "scheme_options": self.scheme_options,
                "factor": self.factor, "steps": self.steps, "lr": self.lr, "batch_size": self.batch_size,
                "warmup": self.warmup_steps, "weight_decay": self.weight_decay, "seed": self.seed,
                "schedule": "linear warm-up, then constant", "grad_clip": 1.0, "optimizer": "AdamW(0.9, 0.95)"}
