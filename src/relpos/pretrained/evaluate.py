"""Zero-shot context extension of a local Hugging Face causal LM: as shipped first, then under each RoPE scaling.

``relpos compare --hf-model PATH`` (wired by the compare command) evaluates a
LLaMA-family checkpoint -- a folder with ``config.json`` or a ``.gguf`` file,
loaded by :mod:`relpos.pretrained.load` (no code from the folder runs,
nothing is downloaded, sizes bounded before anything is built) -- without
training, at lengths ``factor x L0`` of its original context ``L0``
(:func:`relpos.pretrained.scalings.original_context`; ``--hf-context`` overrides).
Rows (:mod:`relpos.pretrained.scalings`): ``native`` -- the checkpoint exactly as
its config says, whatever its ``rope_type`` -- then ``none``, ``linear``,
``dynamic``, ``yarn``, ``llama3`` applied to its base RoPE at
``factor = max(1, L / L0)``.

Measured on the validation split of the chosen corpus, tokenized with the
model's tokenizer (``tokenizer.json``, the GGUF file's own, or ``--tokenizer``):
the window, position and fixed-target protocols of :mod:`relpos.tasks.lm`
(loss per token, bits per byte) and passkey retrieval
(:mod:`relpos.tasks.passkey`). A window's loss never materialises its full
``(N, vocab)`` logits: :meth:`HFCausalLM.token_losses` runs the last hidden
states through the output layer and the cross-entropy in chunks. Lengths above
``max_eval_tokens`` are left out, and said so (:func:`plan`).

Records: :func:`run_hf_job` returns the job dict that
:func:`relpos.compare.runner.run_job` returns, so
:meth:`relpos.compare.store.Store.write_job` stores it unchanged: one job
per (model, scaling), key ``hf/<name>/<scaling>``, with two runs -- task ``"lm"``
and task ``"passkey"`` -- whose ``scheme`` is ``hf:<name>`` and ``variant`` the
scaling (``native`` for the checkpoint as shipped, None for ``none``),
``train_len = L0``, ``seed = 0``. :func:`run_hf_sweep` runs every scaling into a
results folder of its own (the output-folder rule of :mod:`relpos.outdir`),
skipping jobs already stored there (resumable; a new scaling adds only its job).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from relpos.corpus.token_ids import check_ids_fit
from relpos.pretrained.load import (DTYPES, load_config, load_hf_causal_lm, model_fingerprint, model_source,
                                        require_hf, tokenizer_file)
from relpos.pretrained.out import HF_MARK, _archive, _stored_fingerprint, check_hf_output_dir
from relpos.pretrained.scalings import (APPLIED_SCALINGS, HF_SCALINGS, NATIVE_ONLY, hf_rope_parameters,
                                        native_rope_type, original_context, relpos_rope_options)
from relpos.tasks.base import IGNORE

__all__ = ["HF_SCALINGS", "HFCausalLM", "load_hf_model", "original_context", "hf_rope_parameters",
           "relpos_rope_options", "hf_model_for", "HFEvalSpec", "run_hf_job", "run_hf_sweep", "hf_fingerprint",
           "model_fingerprint", "plan", "check_hf_output_dir", "HF_MARK"]

#: logits held at once by the chunked loss: about 64 MiB of float64
_CHUNK_BYTES = 64 << 20


class HFCausalLM(nn.Module):
    """A transformers causal LM as relpos's evaluators want it: ``forward(x) -> logits (B, N, V)`` float32.

    :meth:`set_scaling` rebuilds the model's rotary embedding from its own config
    (``native``) or one with other ``rope_parameters`` (it has no weights, so
    nothing else changes). :meth:`token_losses` gives per-token losses without
    the full logits; :meth:`last_logits` computes only the last ``k`` rows.
    """

    def __init__(self, hf_model: nn.Module, name: str = "model", original: int | None = None) -> None:
        super().__init__()
        inner = getattr(hf_model, "model", None)
        if inner is None or not isinstance(getattr(inner, "rotary_emb", None), nn.Module):
            raise ValueError(f"{name} is not a rotary (LLaMA-family) causal LM: its model has no rotary_emb")
        self.hf = hf_model.eval()
        self.name = name
        self.base_config = copy.deepcopy(hf_model.config)
        self.rope_type = native_rope_type(hf_model.config)
        self.original = original_context(hf_model.config, original)
        self.scaling, self.factor = "native", 1.0
        self.set_scaling("native", 1.0)
        self.chunked = self._chunked_loss_is_exact()

    @property
    def config(self):
        return self.hf.config

    def set_scaling(self, scaling: str, factor: float = 1.0) -> "HFCausalLM":
        """A fresh rotary embedding for ``scaling`` at ``factor`` (>= 1; ignored by ``native``)."""
        factor = float(factor)
        if not math.isfinite(factor) or factor < 1.0:
            raise ValueError(f"factor must be a finite number >= 1, got {factor}")
        cfg = copy.deepcopy(self.base_config)
        if scaling != "native":
            cfg.rope_parameters = hf_rope_parameters(self.base_config, scaling, factor, self.original)
            cfg.max_position_embeddings = self.original
        old = self.hf.model.rotary_emb
        dev = next((b.device for b in old.buffers()), torch.device("cpu"))
        self.hf.model.rotary_emb = type(old)(config=cfg).to(dev)
        self.scaling, self.factor = scaling, factor
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N) -> (B, N, V)
        return self.hf(input_ids=x, use_cache=False).logits.float()

    def last_logits(self, x: torch.Tensor, k: int) -> torch.Tensor:  # (B, N) -> (B, k, V)
        return self.hf(input_ids=x, use_cache=False, logits_to_keep=int(k)).logits.float()

    def _head(self):
        return self.hf.get_output_embeddings()

    @torch.no_grad()
    def _chunked_loss_is_exact(self) -> bool:
        """Whether ``logits == output_layer(last hidden state)`` (no soft-capping or scaling after the head)."""
        head = self._head()
        if head is None or getattr(self.config, "final_logit_softcapping", None) or \
                getattr(self.config, "logit_scale", None) not in (None, 1, 1.0):
            return False
        dev = next(self.hf.parameters()).device
        x = torch.arange(8, device=dev)[None] % int(self.config.vocab_size)
        h = self.hf.model(input_ids=x, use_cache=False).last_hidden_state
        return bool(torch.equal(head(h).float(), self.forward(x)))

    @torch.no_grad()
    def token_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-token cross-entropy in nats, float64, NaN where ``y == -100``: ``(B, N) -> (B, N)``.

        The last hidden states go through the output layer ``_CHUNK_BYTES`` of
        float64 logits at a time, so memory grows with ``N x hidden``, not
        ``N x vocab``; equal to the loss from the full logits.
        """
        if not self.chunked:
            lp = torch.log_softmax(self.forward(x).double(), dim=-1)
            nll = -lp.gather(-1, y.clamp_min(0)[..., None])[..., 0]
            return torch.where(y == IGNORE, torch.full_like(nll, math.nan), nll)
        return self.losses_from_hidden(self.hf.model(input_ids=x, use_cache=False).last_hidden_state, y)

    @torch.no_grad()
    def losses_from_hidden(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """:meth:`token_losses` from the last hidden states ``h`` ``(B, N, hidden)``: the output layer and the
        float64 cross-entropy, in chunks; ``(B, N)`` float64, NaN where ``y == -100``."""
        B, N = y.shape
        head = self._head()
        step = max(1, _CHUNK_BYTES // (8 * int(self.config.vocab_size) * B))
        out = torch.empty(B, N, dtype=torch.float64, device=h.device)
        for s in range(0, N, step):
            lp = torch.log_softmax(head(h[:, s: s + step]).double(), dim=-1)  # (B, c, V)
            yb = y[:, s: s + step]
            nll = -lp.gather(-1, yb.clamp_min(0)[..., None])[..., 0]
            out[:, s: s + step] = torch.where(yb == IGNORE, torch.full_like(nll, math.nan), nll)
        return out


def load_hf_model(path: str | os.PathLike, *, device: str | None = None, dtype: str = "float32",
                  original: int | None = None, attn_implementation: str = "sdpa") -> HFCausalLM:
    """Load a local checkpoint folder or ``.gguf`` file (never downloads, never runs code from it).

    ``attn_implementation`` is passed to transformers: ``"sdpa"`` (default; never
    materialises the ``N x N`` attention matrix) or ``"eager"`` (which can return
    attention probabilities).

    Raises:
        ValueError: see :mod:`relpos.pretrained.load`; not a rotary causal LM;
            an unknown dtype or device.
    """
    src = model_source(path)
    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    dev = _device(device)
    cfg = load_config(src, dtype=dtype)
    return HFCausalLM(load_hf_causal_lm(src, cfg, dtype=dtype, attn_implementation=attn_implementation).to(dev),
                      name=src.name, original=original)


def _device(device: str | None) -> str:
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not str(device).startswith("cuda:"):
        raise ValueError(f"--device must be cpu or cuda, got {device!r}")
    if device != "cpu" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: no CUDA device is available here (use --device cpu)")
    return device


def hf_model_for(model: HFCausalLM, scaling: str) -> Callable[[int], HFCausalLM]:
    """``model_for(L)``: the model with ``scaling`` at ``factor = max(1, L / L0)`` (a fresh rotary embedding)."""

    def model_for(L: int) -> HFCausalLM:
        return model.set_scaling(scaling, max(1.0, L / model.original))

    return model_for


# ------------------------------------------------------------------ settings


class HFEvalSpec(dict):
    """The JSON-able settings of an HF evaluation (a dict; see :func:`run_hf_job` for the keys)."""

    DEFAULTS = {"model": None, "corpus": None, "tokenizer": None, "scalings": list(HF_SCALINGS),
                "factors": [1, 2, 4, 8], "context": None, "eval_tokens": 16384, "blocks": None, "target_len": None,
                "passkey_n": 10, "passkey_depths": [0.0, 0.25, 0.5, 0.75, 1.0], "device": None,
                "dtype": "float32", "max_eval_tokens": 32768, "cache_dir": None, "train_split": False}

    def __init__(self, **kw) -> None:
        unknown = set(kw) - set(self.DEFAULTS)
        if unknown:
            raise ValueError(f"unknown HF evaluation settings {sorted(unknown)}")
        super().__init__({**copy.deepcopy(self.DEFAULTS), **kw})
        if not self["model"] or not self["corpus"]:
            raise ValueError("an HF evaluation needs both a model and a corpus")
        for s in self["scalings"]:
            if s in NATIVE_ONLY:
                raise ValueError(f"--scalings: {s!r} cannot be applied: {NATIVE_ONLY[s]}")
        bad = [s for s in self["scalings"] if s not in HF_SCALINGS]
        if bad or not self["scalings"]:
            raise ValueError(f"--scalings: unknown scalings {bad}; known: {', '.join(HF_SCALINGS)}")
        if not self["factors"]:
            raise ValueError("--hf-factors must name at least one factor")
        for f in self["factors"]:
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or not 1 <= f <= 1024:
                raise ValueError(f"--hf-factors entries must be finite numbers in [1, 1024], got {f!r}")
        for key, flag, lo in (("eval_tokens", "--eval-tokens", 1), ("max_eval_tokens", "--max-eval-tokens", 2),
                              ("passkey_n", "--passkey", 0)):
            v = self[key]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= 1 << 26:
                raise ValueError(f"{flag} must be an integer in [{lo}, {1 << 26}], got {v!r}")
        b = self["blocks"]
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= 1 << 20):
            raise ValueError(f"--hf-blocks must be an integer in [1, {1 << 20}], got {b!r}")
        d = self["passkey_depths"]
        if not d or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1 for x in d):
            raise ValueError(f"--passkey-depths must be fractions in [0, 1] (at least one), got {d!r}")
        if self["context"] is not None:
            original_context(None, self["context"])
        if self["dtype"] not in DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {self['dtype']!r}")


def plan(spec: dict, config=None) -> dict:
    """What an evaluation would do, from the config alone: ``L0``, lengths kept and left out, tokens scored.

    Keys: ``original``, ``lengths``, ``left_out`` (lengths above
    ``max_eval_tokens``), ``rope_type``, ``tokens`` (forward-pass tokens per
    scaling, LM protocols and passkey), ``windows`` (forward passes per scaling
    at each length: attention costs each one ``L**2``), ``scalings``.
    """
    spec = HFEvalSpec(**spec)
    cfg = config if config is not None else load_config(model_source(spec["model"]), dtype=spec["dtype"])
    L0 = original_context(cfg, spec["context"])
    wanted = sorted({int(round(L0 * f)) for f in spec["factors"]})
    lengths = [L for L in wanted if L <= spec["max_eval_tokens"]]
    if not lengths:
        raise ValueError(f"every length ({', '.join(map(str, wanted))}) is above --max-eval-tokens "
                         f"{spec['max_eval_tokens']}; raise it or use smaller --hf-factors")
    longest = max(lengths)
    chunks = max(1, spec["eval_tokens"] // longest)
    blocks = spec["blocks"] or max(16, spec["eval_tokens"] // longest)
    window = sum(chunks * max(1, longest // n) * n for n in lengths)
    fixed = sum(blocks * n for n in lengths)
    n_pk = spec["passkey_n"] * len(spec["passkey_depths"]) if spec["passkey_n"] else 0
    pk = n_pk * sum(lengths)
    windows = {n: chunks * max(1, longest // n) + blocks + n_pk for n in lengths}
    return {"original": L0, "lengths": lengths, "left_out": [L for L in wanted if L not in lengths],
            "rope_type": native_rope_type(cfg), "tokens": {"lm": window + fixed, "passkey": pk},
            "windows": windows, "scalings": list(spec["scalings"])}


# ------------------------------------------------------------------ jobs


def _lm_task(spec: dict, L0: int, lengths: list[int], corpus=None):
    """The language-modelling task on the corpus tokenized with the model's tokenizer (size checked first)."""
    from relpos.corpus.lm import CorpusLanguageModelling

    # n_val=1: a zero-shot evaluation has no early stopping, so the validation split needs no windows
    opts = {"train_len": L0, "eval_lengths": lengths, "eval_tokens": spec["eval_tokens"], "blocks": spec["blocks"],
            "target_len": spec["target_len"], "max_eval_tokens": spec["max_eval_tokens"], "n_val": 1}
    if corpus is not None:
        return CorpusLanguageModelling(corpus, **opts)
    c = spec["corpus"]
    c = dict(c) if isinstance(c, dict) else {"path": str(c)}
    c["tokenizer"] = tokenizer_file(spec["model"], spec["tokenizer"], spec["cache_dir"])
    # a zero-shot evaluation never reads the training split: it is not tokenized
    # an evaluation alone never reads the training split, so it is hashed but not tokenized; a fine-tuning run
    # (``train_split``) tokenizes it, and its test windows then exclude text also in training
    return CorpusLanguageModelling.from_spec(c, cache_dir=spec.get("cache_dir"), eval_only=not spec.get("train_split"),
                                             **opts)


def _passkey(spec: dict, lengths: list[int], tok, bos):
    from relpos.tasks.passkey import Passkey

    if not spec["passkey_n"]:
        return None

    def enc(s: str) -> list[int]:
        return tok.encode(s, add_special_tokens=False).ids

    # a context too short for the prompt is left out
    return Passkey.fitting(lengths, depths=spec["passkey_depths"], n=spec["passkey_n"], encode=enc, bos=bos,
                           max_tokens=spec["max_eval_tokens"])


def _bos(config) -> list[int]:
    return [] if getattr(config, "bos_token_id", None) is None else [int(config.bos_token_id)]


def hf_fingerprint(spec: dict, config=None, notes: list | None = None) -> tuple[str, dict, object]:
    """``(fingerprint, protocol, corpus)`` of an HF evaluation: model and corpus content, settings.

    Warnings for the user (passkey left out) are appended to ``notes``.
    """
    notes = [] if notes is None else notes
    from relpos.corpus import load_tokenizer

    spec = HFEvalSpec(**spec)
    cfg = config if config is not None else load_config(model_source(spec["model"]), dtype=spec["dtype"])
    p = plan(spec, cfg)
    L0 = p["original"]
    tok = load_tokenizer(tok_path := tokenizer_file(spec["model"], spec["tokenizer"], spec["cache_dir"]))
    check_ids_fit(tok, int(cfg.vocab_size), "the model's vocabulary", where=f"tokenizer {tok_path}")  # before reading
    lm = _lm_task(spec, L0, p["lengths"])
    pk = _passkey(spec, p["lengths"], tok, _bos(cfg))
    if spec["passkey_n"] and pk is None:
        from relpos.tasks.passkey import Passkey

        need = Passkey([1 << 20], depths=spec["passkey_depths"], n=1, bos=_bos(cfg),
                       encode=lambda t: tok.encode(t, add_special_tokens=False).ids).min_length()
        notes.append(f"warning: passkey is not evaluated: its prompt needs {need} tokens and the longest length is "
                     f"{max(p['lengths'])}; give --hf-factors up to {math.ceil(need / L0)} or more (or --passkey 0)")
    corpus = lm.corpus
    protocol = {"hf_model": model_fingerprint(spec["model"]), "original_context": L0,
                "lm": {**lm.options(), "corpus": corpus.options()}, "passkey": pk.options() if pk else None,
                "dtype": spec["dtype"]}
    blob = json.dumps(protocol, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16], protocol, corpus


class _Bar:
    """A progress bar on a terminal only, whose count never passes its total."""

    def __init__(self, total: int, desc: str, enabled: bool | None) -> None:
        on = sys.stderr.isatty() if enabled is None else enabled
        self.bar = None
        if on and total > 0:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, leave=False, file=sys.stderr)

    def tick(self) -> None:
        if self.bar is not None and self.bar.n < self.bar.total:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_hf_job(spec: dict, scaling: str, *, model: HFCausalLM | None = None, progress: bool | None = False,
               corpus=None) -> dict:
    """Evaluate one scaling; returns a job dict for :meth:`Store.write_job` (see the module docstring).

    ``spec`` keys (:class:`HFEvalSpec`): ``model`` (folder or ``.gguf``),
    ``corpus`` (a path or a :class:`~relpos.corpus.CorpusSpec` dict),
    ``tokenizer`` (default: the model's own), ``scalings``, ``factors`` (of
    ``L0``), ``context`` (``L0``; default from the config), ``eval_tokens``,
    ``blocks``, ``target_len``, ``passkey_n`` (0: no passkey),
    ``passkey_depths``, ``device``, ``dtype``, ``max_eval_tokens`` (longest
    length and tokens per forward pass), ``cache_dir``. ``progress``: True, False,
    or None for "on a terminal".
    """
    from relpos.corpus import load_tokenizer

    spec = HFEvalSpec(**spec)
    if scaling not in spec["scalings"]:
        raise ValueError(f"scaling {scaling!r} is not in this evaluation's scalings {spec['scalings']}")
    model = model or load_hf_model(spec["model"], device=spec["device"], dtype=spec["dtype"],
                                   original=spec["context"])
    p = plan(spec, model.base_config)
    tok = load_tokenizer(tok_path := tokenizer_file(spec["model"], spec["tokenizer"], spec["cache_dir"]))
    check_ids_fit(tok, int(model.config.vocab_size), "the model's vocabulary", where=f"tokenizer {tok_path}")
    lm = _lm_task(spec, model.original, p["lengths"], corpus)
    corpus = lm.corpus
    pk = _passkey(spec, p["lengths"], tok, _bos(model.config))
    inner = hf_model_for(model, scaling)
    n_fixed = sum(1 for c in lm.eval_lengths if c >= lm.target_len)
    bar = _Bar(len(lm.eval_lengths) + n_fixed + (len(pk.lengths) if pk else 0), f"{model.name} {scaling}", progress)

    def model_for(L):
        bar.tick()
        return inner(L)

    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            lm_meas = lm.evaluate(model_for)
            pk_meas = pk.evaluate(model_for) if pk else []
    finally:
        bar.close()
    secs = time.perf_counter() - t0
    for m in lm_meas:
        if m.loss is not None and not math.isfinite(m.loss):
            raise ValueError(f"{model.name} under {scaling} gave a non-finite loss ({m.loss}) at length "
                             f"{m.eval_len}; its weights or config are broken for this input")
    label = f"hf:{model.name}"
    variant = None if scaling == "none" else scaling

    def run(task, ms):
        return {"scheme": label, "variant": variant, "task": task, "seed": 0, "train_len": model.original,
                "measurements": [m.to_dict() for m in ms],
                "hf": {"model": str(spec["model"]), "scaling": scaling, "original_context": model.original,
                       "rope_type": model.rope_type, "dtype": spec["dtype"], "left_out": p["left_out"],
                       "max_eval_tokens": spec["max_eval_tokens"], "corpus": corpus.options(),
                       "corpus_report": corpus_report(corpus), "units": corpus.unit}}

    return {"job": f"hf/{model.name}/{scaling}", "scheme": label, "task": "lm", "seed": 0, "randomized": False,
            "train": {"steps": 0, "seconds": 0.0, "tokens_per_s": 0.0, "final_loss": None, "loss_curve": [],
                      "params": int(sum(q.numel() for q in model.parameters())),
                      "model": {"hf_model": str(spec["model"]), "model_type": model.config.model_type}},
            "eval_seconds": secs, "runs": [run("lm", lm_meas)] + ([run("passkey", pk_meas)] if pk else [])}


def run_hf_sweep(out: str | os.PathLike, spec: dict, *, progress: bool | None = False, force: bool = False,
                 log=print) -> list[dict]:
    """Every scaling of ``spec`` into ``<out>/results.sqlite``; scalings already stored are skipped.

    Returns the stored runs (:meth:`Store.runs`).

    Raises:
        relpos.outdir.OutputDirError: ``out`` is not a new, empty or relpos HF folder.
        relpos.compare.store.ConfigMismatchError: ``out`` holds another
            evaluation (``force`` moves it into ``previous-<fp>-<time>/``).
    """
    from relpos.compare.store import ConfigMismatchError, Store

    spec = HFEvalSpec(**spec)
    _device(spec["device"])
    outp = check_hf_output_dir(out)  # before anything is read or built
    src = model_source(spec["model"])
    require_hf(gguf=bool(src.gguf))
    cfg = load_config(src, dtype=spec["dtype"])
    notes: list[str] = []
    fp, protocol, corpus = hf_fingerprint(spec, cfg, notes)  # raises on bad input before anything is written
    log_corpus(corpus, log)
    for n in notes:
        log(n)
    model = load_hf_model(spec["model"], device=spec["device"], dtype=spec["dtype"], original=spec["context"])
    old = _stored_fingerprint(outp)
    if old is not None and old != fp:
        if not force:
            raise ConfigMismatchError(f"--out {out} holds results of a different evaluation (fingerprint {old}, "
                                      f"this one {fp}). Nothing was changed. Use another --out, or pass --force to "
                                      f"move the old results into {out}/previous-{old}-<time>/")
        log(f"moved the results of evaluation {old} to {_archive(outp, old)}")
    db = outp / "results.sqlite"  # the folder too is made with the first result (a refusal leaves --out as it was)
    done: set[str] = set()
    if db.exists() or db.is_symlink():  # a new store is created only with its first result (a refusal leaves none)
        with Store(db) as store:
            store.bind(fp, protocol)
            done = store.done_jobs(fp)
    for s in spec["scalings"]:
        key = f"hf/{model.name}/{s}"
        if key in done:
            log(f"{key}: already stored, skipped")
            continue
        res = run_hf_job(spec, s, model=model, progress=progress, corpus=corpus)
        with Store(db) as store:
            store.bind(fp, protocol)
            store.write_job(fp, res)
        log(f"{key}: {res['eval_seconds']:.1f}s")
    with Store(db) as store:
        store.bind(fp, protocol)
        return store.runs(fp)


def log_corpus(corpus, log) -> None:
    """Console lines: documents, bytes and tokens per split, files skipped and why, the corpus hash."""
    from relpos.corpus.summary import corpus_lines

    for line in corpus_lines(corpus_report(corpus)):
        log(line)


def corpus_report(corpus) -> dict:
    """:meth:`Corpus.report`, with :meth:`Corpus.identity` (content hash, leak removal) where the corpus has it."""
    rep = dict(corpus.report())
    ident = getattr(corpus, "identity", None)
    if callable(ident):
        rep["identity"] = ident()
    return rep
