"""Zero-shot context extension of a local Hugging Face causal LM under each RoPE scaling.

``relpos compare --hf-model DIR`` (wired by the compare command) evaluates a
LLaMA-family checkpoint (any ``AutoModelForCausalLM`` whose inner model has a
``rotary_emb`` built from its config) without training, under each scaling that
transformers implements -- ``none``, ``linear`` (position interpolation),
``dynamic`` (dynamic NTK), ``yarn`` and ``llama3`` -- at evaluation lengths of
1x to 8x the model's original context ``L0`` (``original_max_position_embeddings``
of a scaled checkpoint, else ``max_position_embeddings``). At length ``L`` the
scaling gets ``factor = max(1, L / L0)`` and ``original_max_position_embeddings
= L0`` (dynamic NTK reads ``L0`` from ``max_position_embeddings``, which is set
to ``L0``).

Measured on the validation split of the chosen corpus, tokenized with the
model's ``tokenizer.json`` (or ``--tokenizer``): the window, position and
fixed-target protocols of :mod:`relpos.tasks.lm` (through
:class:`relpos.corpus.lm.CorpusLanguageModelling`: loss per token, bits per
byte), and passkey retrieval (:mod:`relpos.tasks.passkey`). Nothing is ever
downloaded (``local_files_only=True``).

Records: :func:`run_hf_job` returns the job dict that
:func:`relpos.experiments.runner.run_job` returns, so
:meth:`relpos.experiments.store.Store.write_job` stores it unchanged: one job
per (model, scaling), key ``hf/<name>/<scaling>``, with two runs -- task
``"lm"`` and task ``"passkey"`` -- whose ``scheme`` is ``hf:<name>`` and
``variant`` the scaling (None for ``none``), ``train_len = L0``, ``seed = 0``.
:func:`run_hf_sweep` runs every scaling into a results folder of its own,
skipping jobs already stored there (resumable).

Conformance with relpos's own RoPE (:func:`relpos_rope_options` and
:func:`hf_rope_parameters` describe one scaling for both libraries) is tested
in ``tests/test_hf_eval.py`` on a tiny random ``LlamaForCausalLM``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn

__all__ = ["HF_SCALINGS", "HFCausalLM", "load_hf_model", "original_context", "hf_rope_parameters",
           "relpos_rope_options", "hf_model_for", "HFEvalSpec", "run_hf_job", "run_hf_sweep", "hf_fingerprint",
           "model_fingerprint"]

#: scalings evaluated on a Hugging Face model ("none": the checkpoint's own plain RoPE)
HF_SCALINGS: tuple[str, ...] = ("none", "linear", "dynamic", "yarn", "llama3")


def _rope_params(config) -> dict:
    rp = getattr(config, "rope_parameters", None) or {}
    if "rope_theta" not in rp and getattr(config, "rope_theta", None) is not None:
        rp = {**rp, "rope_theta": config.rope_theta}
    return dict(rp)


def original_context(config) -> int:
    """``L0``: the pretraining context of a config (see the module docstring)."""
    rp = _rope_params(config)
    if rp.get("rope_type", "default") not in ("default", None) and rp.get("original_max_position_embeddings"):
        return int(rp["original_max_position_embeddings"])
    return int(config.max_position_embeddings)


def _head_dim(config) -> int:
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def hf_rope_parameters(config, scaling: str, factor: float, original: int | None = None) -> dict:
    """The transformers ``rope_parameters`` of ``scaling`` at ``factor`` for a model with context ``original``."""
    if scaling not in HF_SCALINGS:
        raise ValueError(f"scaling must be one of {', '.join(HF_SCALINGS)}, got {scaling!r}")
    rp = _rope_params(config)
    L0 = original or original_context(config)
    out = {"rope_type": "default" if scaling == "none" else scaling, "rope_theta": float(rp["rope_theta"])}
    if "partial_rotary_factor" in rp:
        out["partial_rotary_factor"] = rp["partial_rotary_factor"]
    if scaling != "none":
        out["factor"] = float(factor)
    if scaling in ("yarn", "llama3"):
        out["original_max_position_embeddings"] = int(L0)
    if scaling == "yarn":
        out.update(beta_fast=32.0, beta_slow=1.0)
    if scaling == "llama3":
        out["low_freq_factor"] = float(rp.get("low_freq_factor", 1.0)) if rp.get("rope_type") == "llama3" else 1.0
        out["high_freq_factor"] = float(rp.get("high_freq_factor", 4.0)) if rp.get("rope_type") == "llama3" else 4.0
    return out


def relpos_rope_options(config, scaling: str, factor: float, original: int | None = None) -> dict:
    """Keyword arguments of :class:`relpos.encodings.rope.RoPE` for the same scaling as :func:`hf_rope_parameters`."""
    hp = hf_rope_parameters(config, scaling, factor, original)
    L0 = original or original_context(config)
    opts = {"n_heads": int(config.num_attention_heads), "head_dim": _head_dim(config), "base": hp["rope_theta"],
            "rotary_fraction": float(hp.get("partial_rotary_factor", 1.0)), "max_len": int(L0),
            "scaling": None if scaling == "none" else scaling, "factor": float(factor), "original_max_len": int(L0)}
    if scaling == "llama3":
        opts.update(low_freq_factor=hp["low_freq_factor"], high_freq_factor=hp["high_freq_factor"])
    return opts


class HFCausalLM(nn.Module):
    """A transformers causal LM as relpos's evaluators want it: ``forward(x) -> logits (B, N, V)`` float32.

    :meth:`set_scaling` swaps the model's rotary embedding for one built from a
    config with other ``rope_parameters`` (it has no weights, so nothing else
    changes). :meth:`last_logits` computes only the last ``k`` rows of logits.
    """

    def __init__(self, hf_model: nn.Module, name: str = "model", original: int | None = None) -> None:
        super().__init__()
        inner = getattr(hf_model, "model", None)
        if inner is None or not isinstance(getattr(inner, "rotary_emb", None), nn.Module):
            raise ValueError(f"{name} is not a rotary (LLaMA-family) causal LM: its model has no rotary_emb")
        if "rope_theta" not in _rope_params(hf_model.config):
            raise ValueError(f"{name} has no rope_theta in its config: not a rotary model")
        self.hf = hf_model.eval()
        self.name = name
        self.base_config = copy.deepcopy(hf_model.config)
        self.original = int(original or original_context(hf_model.config))
        self.scaling, self.factor = "none", 1.0
        self.set_scaling("none", 1.0)

    @property
    def config(self):
        return self.hf.config

    def set_scaling(self, scaling: str, factor: float = 1.0) -> "HFCausalLM":
        """Rebuild the rotary embedding for ``scaling`` at ``factor`` (>= 1)."""
        factor = float(factor)
        if not math.isfinite(factor) or factor < 1.0:
            raise ValueError(f"factor must be a finite number >= 1, got {factor}")
        cfg = copy.deepcopy(self.base_config)
        cfg.rope_parameters = hf_rope_parameters(self.base_config, scaling, factor, self.original)
        cfg.max_position_embeddings = self.original
        old = self.hf.model.rotary_emb
        dev = next((b.device for b in old.buffers()), torch.device("cpu"))
        new = type(old)(config=cfg)
        self.hf.model.rotary_emb = new.to(dev)
        self.scaling, self.factor = scaling, factor
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N) -> (B, N, V)
        return self.hf(input_ids=x, use_cache=False).logits.float()

    def last_logits(self, x: torch.Tensor, k: int) -> torch.Tensor:  # (B, N) -> (B, k, V)
        return self.hf(input_ids=x, use_cache=False, logits_to_keep=int(k)).logits.float()


def load_hf_model(model_dir: str | os.PathLike, *, device: str | None = None, dtype: str = "float32",
                  original: int | None = None, attn_implementation: str = "sdpa") -> HFCausalLM:
    """Load a local checkpoint folder (never downloads).

    ``attn_implementation`` is passed to transformers: ``"sdpa"`` (default; never
    materialises the ``N x N`` attention matrix, which long contexts need) or
    ``"eager"`` (which can return attention probabilities).

    Raises:
        ValueError: not a folder with a ``config.json``, not a rotary causal LM,
            an unknown dtype, or transformers missing.
    """
    p = Path(model_dir)
    if not (p / "config.json").is_file():
        raise ValueError(f"--hf-model {str(p)!r} is not a model folder (no config.json)")
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise ValueError("--hf-model needs the 'transformers' package") from None
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if dt is None:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    try:
        cfg = AutoConfig.from_pretrained(str(p), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(p), config=cfg, local_files_only=True, dtype=dt,
                                                     attn_implementation=attn_implementation)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"could not load {str(p)!r} as a causal LM: {e}") from None
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return HFCausalLM(model.to(dev), name=p.name, original=original)


def hf_model_for(model: HFCausalLM, scaling: str) -> Callable[[int], HFCausalLM]:
    """``model_for(L)``: the model with ``scaling`` at ``factor = max(1, L / L0)``."""

    def model_for(L: int) -> HFCausalLM:
        return model.set_scaling(scaling, max(1.0, L / model.original))

    return model_for


# ------------------------------------------------------------------ jobs


def model_fingerprint(model_dir: str | os.PathLike) -> str:
    """16 hex digits from ``config.json`` and, for every weight file, its size and first and last MiB."""
    p = Path(model_dir)
    h = hashlib.sha256((p / "config.json").read_bytes())
    for f in sorted(q for q in p.iterdir() if q.suffix in (".safetensors", ".bin", ".pt")):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


class HFEvalSpec(dict):
    """The JSON-able settings of an HF evaluation (a dict; see :func:`run_hf_job` for the keys)."""

    DEFAULTS = {"model": None, "corpus": None, "tokenizer": None, "scalings": list(HF_SCALINGS),
                "factors": [1, 2, 4, 8], "eval_tokens": 16384, "blocks": None, "target_len": None,
                "passkey_n": 10, "passkey_depths": [0.0, 0.25, 0.5, 0.75, 1.0], "device": None,
                "dtype": "float32", "max_eval_tokens": 8192, "cache_dir": None}

    def __init__(self, **kw) -> None:
        unknown = set(kw) - set(self.DEFAULTS)
        if unknown:
            raise ValueError(f"unknown HF evaluation settings {sorted(unknown)}")
        super().__init__({**copy.deepcopy(self.DEFAULTS), **kw})
        if not self["model"] or not self["corpus"]:
            raise ValueError("an HF evaluation needs both a model folder and a corpus")
        bad = [s for s in self["scalings"] if s not in HF_SCALINGS]
        if bad:
            raise ValueError(f"unknown scalings {bad}; known: {', '.join(HF_SCALINGS)}")
        for f in self["factors"]:
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not f >= 1:
                raise ValueError(f"factors must be numbers >= 1, got {f!r}")


def _tokenizer_path(spec: dict) -> str:
    tok = spec.get("tokenizer") or str(Path(spec["model"]) / "tokenizer.json")
    if not Path(tok).is_file():
        raise ValueError(f"{spec['model']} has no tokenizer.json; give one with --tokenizer")
    return tok


def _lengths(spec: dict, L0: int) -> list[int]:
    return sorted({int(round(L0 * f)) for f in spec["factors"]})


def _corpus_for(spec: dict, L0: int | None = None):
    """The corpus tokenized with the model's tokenizer; with ``L0``, checked large enough before it is built."""
    from relpos.corpus import CorpusSpec, cached_corpus, lm_requirement
    from relpos.tasks.lm import LanguageModelling

    c = spec["corpus"]
    c = dict(c) if isinstance(c, dict) else {"path": str(c)}
    c["tokenizer"] = _tokenizer_path(spec)
    need = None
    if L0 is not None:
        t = LanguageModelling(train_len=L0, eval_lengths=_lengths(spec, L0), eval_tokens=spec["eval_tokens"],
                              blocks=spec["blocks"], target_len=spec["target_len"])
        need = lm_requirement(t.train_len, t.eval_lengths, t.eval_tokens, t.blocks)
    return cached_corpus(CorpusSpec(**c), spec.get("cache_dir"), require=need)


def _tasks(spec: dict, corpus, L0: int, tok, bos):
    from relpos.corpus.lm import CorpusLanguageModelling
    from relpos.tasks.passkey import Passkey

    lengths = _lengths(spec, L0)
    lm = CorpusLanguageModelling(corpus, train_len=L0, eval_lengths=lengths, eval_tokens=spec["eval_tokens"],
                                 blocks=spec["blocks"], target_len=spec["target_len"],
                                 max_eval_tokens=spec["max_eval_tokens"])

    def enc(s: str) -> list[int]:
        return tok.encode(s, add_special_tokens=False).ids

    pk = None
    if spec["passkey_n"]:  # a context too short for the prompt is left out
        pk = Passkey.fitting(lengths, depths=spec["passkey_depths"], n=spec["passkey_n"], encode=enc, bos=bos,
                             max_tokens=spec["max_eval_tokens"])
    return lm, pk


def hf_fingerprint(spec: dict) -> tuple[str, dict]:
    """``(fingerprint, protocol)`` of an HF evaluation: model and corpus content, settings."""
    from relpos.corpus import load_tokenizer
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(spec["model"]), local_files_only=True)
    L0 = original_context(cfg)
    corpus = _corpus_for(spec, L0)
    lm, pk = _tasks(spec, corpus, L0, load_tokenizer(_tokenizer_path(spec)), [])
    protocol = {"hf_model": model_fingerprint(spec["model"]), "original_context": L0,
                "lm": lm.options(), "passkey": pk.options() if pk else None, "dtype": spec["dtype"]}
    blob = json.dumps(protocol, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16], protocol


def run_hf_job(spec: dict, scaling: str, *, model: HFCausalLM | None = None, progress: bool = False) -> dict:
    """Evaluate one scaling; returns a job dict for :meth:`Store.write_job` (see the module docstring).

    ``spec`` keys (:class:`HFEvalSpec`): ``model`` (folder), ``corpus`` (a path or
    a :class:`~relpos.corpus.CorpusSpec` dict), ``tokenizer`` (default
    ``<model>/tokenizer.json``), ``factors`` (of ``L0``), ``eval_tokens``,
    ``blocks``, ``target_len``, ``passkey_n`` (0: no passkey),
    ``passkey_depths``, ``device``, ``dtype``, ``max_eval_tokens``, ``cache_dir``.
    """
    from relpos.corpus import load_tokenizer

    spec = HFEvalSpec(**spec)
    if scaling not in spec["scalings"]:
        raise ValueError(f"scaling {scaling!r} is not in this evaluation's scalings {spec['scalings']}")
    model = model or load_hf_model(spec["model"], device=spec["device"], dtype=spec["dtype"])
    tok = load_tokenizer(_tokenizer_path(spec))
    if tok.get_vocab_size(with_added_tokens=True) > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {tok.get_vocab_size()} tokens, more than the model's vocabulary "
                         f"({model.config.vocab_size})")
    bos = [] if getattr(model.config, "bos_token_id", None) is None else [int(model.config.bos_token_id)]
    corpus = _corpus_for(spec, model.original)
    lm, pk = _tasks(spec, corpus, model.original, tok, bos)
    model_for = hf_model_for(model, scaling)
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(lm.eval_lengths) * (2 if pk else 1), desc=f"{model.name} {scaling}", leave=False)
        inner = model_for

        def model_for(L):  # noqa: F811 - the same, with a progress tick
            bar.update(1)
            return inner(L)
    t0 = time.perf_counter()
    with torch.no_grad():
        lm_meas = lm.evaluate(model_for)
        pk_meas = pk.evaluate(model_for) if pk else []
    if progress:
        bar.close()
    secs = time.perf_counter() - t0
    label = f"hf:{model.name}"
    variant = None if scaling == "none" else scaling

    def run(task, ms):
        return {"scheme": label, "variant": variant, "task": task, "seed": 0, "train_len": model.original,
                "measurements": [m.to_dict() for m in ms],
                "hf": {"model": str(spec["model"]), "scaling": scaling, "original_context": model.original,
                       "corpus": corpus.options(), "units": corpus.unit}}

    return {"job": f"hf/{model.name}/{scaling}", "scheme": label, "task": "lm", "seed": 0, "randomized": False,
            "train": {"steps": 0, "seconds": 0.0, "tokens_per_s": 0.0, "final_loss": None, "loss_curve": [],
                      "params": int(sum(p.numel() for p in model.parameters())),
                      "model": {"hf_model": str(spec["model"]), "model_type": model.config.model_type}},
            "eval_seconds": secs, "runs": [run("lm", lm_meas)] + ([run("passkey", pk_meas)] if pk else [])}


def run_hf_sweep(out: str | os.PathLike, spec: dict, *, progress: bool = False, log=print) -> list[dict]:
    """Every scaling of ``spec`` into ``<out>/results.sqlite``; scalings already stored are skipped.

    Returns the stored runs (:meth:`Store.runs`).

    Raises:
        relpos.experiments.store.ConfigMismatchError: ``out`` holds another evaluation.
    """
    from relpos.experiments.store import Store

    spec = HFEvalSpec(**spec)
    fp, protocol = hf_fingerprint(spec)  # raises on bad input before anything is written
    model = load_hf_model(spec["model"], device=spec["device"], dtype=spec["dtype"])
    with Store(Path(out) / "results.sqlite") as store:
        store.bind(fp, protocol)
        done = store.done_jobs(fp)
        for s in spec["scalings"]:
            key = f"hf/{model.name}/{s}"
            if key in done:
                log(f"{key}: already stored, skipped")
                continue
            res = run_hf_job(spec, s, model=model, progress=progress)
            store.write_job(fp, res)
            log(f"{key}: {res['eval_seconds']:.1f}s")
        return store.runs(fp)
