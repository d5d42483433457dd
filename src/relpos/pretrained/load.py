"""Load a local Hugging Face checkpoint (a folder or a ``.gguf`` file) safely, bounded, never from the network.

The rules, checked in this order before anything is built:

1. The path exists locally: a folder with ``config.json`` or a ``.gguf`` file
   (a mistyped path is reported as such, never as a hub error; nothing is ever
   downloaded: ``local_files_only=True``).
2. No code from the model folder ever runs: ``trust_remote_code=False`` on every
   transformers call, and a ``config.json`` with an ``auto_map`` or a
   ``model_type`` that the installed transformers does not know is refused by
   name (transformers would otherwise import the folder's ``*.py`` or prompt).
3. The size is bounded from the config alone: every dimension within
   :data:`DIM_BOUNDS` and the parameter count within :data:`MAX_PARAMS` and the
   machine's memory (:func:`check_config`), so a ``num_hidden_layers: 1000000``
   costs nothing.
4. The RoPE settings are ones the installed transformers implements with
   finite values (:func:`relpos.pretrained.scalings.check_rope`).
5. After loading, every weight is finite (NaN or inf is refused, naming the tensor).

A ``.gguf`` file (llama.cpp, Ollama) goes through transformers' GGUF support
(``gguf_file=...``; needs the ``gguf`` package), dequantised to the chosen dtype;
its tokenizer comes from the file and is saved as a ``tokenizer.json`` in the
relpos cache (:func:`tokenizer_file`). Optional packages: ``pip install 'relpos[hf]'``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["ModelSource", "model_source", "require_hf", "check_config", "load_config", "estimate_params",
           "load_hf_causal_lm", "check_loading_info", "model_fingerprint", "tokenizer_file", "model_tokenizer",
           "DIM_BOUNDS", "MAX_PARAMS", "DTYPES"]

#: upper bounds of the config's dimensions (largest published LLaMA-family values, with room)
DIM_BOUNDS: dict[str, int] = {
    "vocab_size": 1 << 21, "hidden_size": 1 << 16, "intermediate_size": 1 << 18, "num_hidden_layers": 1024,
    "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 1024, "max_position_embeddings": 1 << 24,
    "num_local_experts": 1024, "num_experts": 1024, "moe_intermediate_size": 1 << 18,
}
#: the largest parameter count loaded (1e11); the machine's memory may bound it lower
MAX_PARAMS = 10 ** 11
#: config.json larger than this is refused (real ones are a few KiB)
MAX_CONFIG_BYTES = 4 << 20
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def require_hf(*, gguf: bool = False) -> None:
    """Raise a one-line ``ValueError`` naming the ``relpos[hf]`` extra when a needed package is missing."""
    missing = []
    for mod in ("transformers", "tokenizers") + (("gguf", "accelerate") if gguf else ()):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise ValueError(f"--hf-model needs the optional package(s) {', '.join(missing)}: "
                         "pip install 'relpos[hf]'")


@dataclass(frozen=True)
class ModelSource:
    """Where a checkpoint is: ``folder`` (its ``config.json`` and weights), or ``folder`` + ``gguf`` file name."""

    path: Path
    folder: Path
    gguf: str | None = None

    @property
    def name(self) -> str:
        return self.path.stem if self.gguf else self.path.name

    def kwargs(self) -> dict:
        """Keyword arguments every transformers ``from_pretrained`` call gets."""
        kw = {"local_files_only": True, "trust_remote_code": False}
        if self.gguf:
            kw["gguf_file"] = self.gguf
        return kw


def model_source(path: str | os.PathLike) -> ModelSource:
    """Check that ``--hf-model`` names a local folder with ``config.json`` or a ``.gguf`` file."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"--hf-model {str(p)!r} does not exist (give a local checkpoint folder or a .gguf file; "
                         "relpos never downloads)")
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise ValueError(f"--hf-model {str(p)!r} is a file but not a .gguf file (give a checkpoint folder "
                             "with config.json, or a .gguf file)")
        return ModelSource(p, p.parent, p.name)
    if not (p / "config.json").is_file():
        raise ValueError(f"--hf-model {str(p)!r} is not a model folder (no config.json)")
    return ModelSource(p, p)


def _read_config_json(src: ModelSource) -> dict:
    f = src.folder / "config.json"
    if f.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{f} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a model config")
    try:
        cfg = json.loads(f.read_bytes())
    except RecursionError:
        raise ValueError(f"{f} is nested too deeply to be a model config") from None
    except ValueError as e:
        raise ValueError(f"{f} is not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{f} must hold a JSON object, got {type(cfg).__name__}")
    return cfg


def _gguf_config(src: ModelSource) -> dict:
    """The config dict of a GGUF file, its RoPE scaling included (the file parsed once, bounds checked first)."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from relpos.pretrained.gguf import check_gguf, gguf_rope_parameters, read_gguf_header
    from relpos.pretrained.gguf_reader import use_parsed_reader

    head = read_gguf_header(src.path)
    check_gguf(head)
    try:
        with use_parsed_reader(head):
            parsed = load_gguf_checkpoint(str(src.path), return_tensors=False)
    except (ValueError, KeyError, OSError, IndexError, TypeError, struct.error) as e:
        raise ValueError(f"--hf-model {str(src.path)!r} does not read as a GGUF model: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    cfg = dict(parsed.get("config", {}))
    rp = gguf_rope_parameters(head)  # transformers' GGUF reader drops these keys
    if rp:
        cfg["rope_scaling"] = dict(rp)
    return cfg


def _reading(src: ModelSource):
    """A context in which transformers reads ``src``'s GGUF file from relpos's one bounded parse."""
    import contextlib

    if not src.gguf:
        return contextlib.nullcontext()
    from relpos.pretrained.gguf import read_gguf_header
    from relpos.pretrained.gguf_reader import use_parsed_reader

    return use_parsed_reader(read_gguf_header(src.path))


def estimate_params(cfg: dict) -> int:
    """Parameters of a LLaMA-family decoder from its config dict (embeddings, attention, MLP/experts, head)."""
    V, H = int(cfg.get("vocab_size", 0)), int(cfg.get("hidden_size", 0))
    layers, heads = int(cfg.get("num_hidden_layers", 0)), int(cfg.get("num_attention_heads", 1) or 1)
    kv = int(cfg.get("num_key_value_heads") or heads)
    hd = int(cfg.get("head_dim") or (H // max(heads, 1)))
    inter = int(cfg.get("intermediate_size") or 4 * H)
    experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 1)
    mlp = 3 * H * int(cfg.get("moe_intermediate_size") or inter) * experts if experts > 1 else 3 * H * inter
    attn = H * heads * hd * 2 + H * kv * hd * 2
    tied = bool(cfg.get("tie_word_embeddings", False))
    return V * H * (1 if tied else 2) + layers * (attn + mlp + 2 * H) + H


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def check_config(cfg: dict, *, where: str = "config.json", dtype: str = "float32") -> int:
    """Refuse unsafe or absurd configs before anything is built; return the estimated parameter count.

    Raises:
        ValueError: an ``auto_map`` (custom code), an unknown or non-causal-LM
            ``model_type``, a dimension outside :data:`DIM_BOUNDS`, or more
            parameters than :data:`MAX_PARAMS` or the machine's memory holds.
    """
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if "auto_map" in cfg:
        raise ValueError(f"{where} has an auto_map (custom code in the model folder); relpos never runs code "
                         "from a model folder")
    mt = cfg.get("model_type")
    if not isinstance(mt, str) or mt not in CONFIG_MAPPING_NAMES:
        raise ValueError(f"{where}: model_type {mt!r} is not a model type the installed transformers knows; relpos "
                         "never runs code from a model folder")
    if mt not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ValueError(f"{where}: model_type {mt!r} is not a causal language model")
    for key, hi in DIM_BOUNDS.items():
        v = cfg.get(key)
        if v is None and key in ("head_dim", "num_key_value_heads", "num_local_experts", "num_experts",
                                 "moe_intermediate_size", "intermediate_size"):
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
            raise ValueError(f"{where}: {key} must be an integer in [1, {hi}], got {v!r}")
    n = estimate_params(cfg)
    if n > MAX_PARAMS:
        raise ValueError(f"{where} describes {n:.3g} parameters, more than relpos loads ({MAX_PARAMS:.0e})")
    mem = _memory_bytes()
    need = n * torch.empty((), dtype=DTYPES.get(dtype, torch.float32)).element_size()
    if mem and need > 0.9 * mem:
        raise ValueError(f"{where} describes {n:.3g} parameters: {need / 2**30:.1f} GiB in {dtype}, more than this "
                         f"machine's {mem / 2**30:.1f} GiB of memory" + (" (try --dtype bfloat16)"
                                                                         if dtype == "float32" else ""))
    return n


def _raw_view(raw: dict, where: str = "config.json"):
    """The raw config dict as the attributes :func:`relpos.pretrained.scalings.check_rope` reads."""
    from types import SimpleNamespace

    rp = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if not isinstance(rp, dict):
        raise ValueError(f"{where}: rope_parameters must be an object, got {type(rp).__name__}")
    rp = dict(rp)
    if "type" in rp and "rope_type" not in rp:
        rp["rope_type"] = rp["type"]
    if raw.get("rope_theta") is not None and not any(isinstance(v, dict) for v in rp.values()):
        rp.setdefault("rope_theta", raw["rope_theta"])
    if not rp:
        rp = {"rope_type": "default", "rope_theta": raw.get("rope_theta", 10000.0)}
    return SimpleNamespace(**{**raw, "rope_parameters": rp})


def _check_weight_bytes(src: ModelSource, n: int) -> None:
    """Refuse a config describing far more parameters than the folder's weight files can hold (>= 2 bits each)."""
    files = [q for q in src.folder.iterdir() if q.suffix in (".safetensors", ".bin", ".pt") and q.is_file()]
    have = sum(q.stat().st_size for q in files)
    if files and n > 4 * have + 4096:
        raise ValueError(f"{src.folder / 'config.json'} describes about {n:.3g} parameters but the weight files "
                         f"hold only {have:,} bytes; weights are missing")


def load_config(src: ModelSource, *, dtype: str = "float32"):
    """The checked transformers config of ``src`` (no code from the folder runs; nothing is built)."""
    require_hf(gguf=bool(src.gguf))
    from transformers import AutoConfig

    from relpos.pretrained.scalings import check_rope

    raw = _gguf_config(src) if src.gguf else _read_config_json(src)
    where = str(src.path if src.gguf else src.folder / "config.json")
    n = check_config(raw, where=where, dtype=dtype)
    if src.gguf:  # sizes the metadata declares, against the tensors the file holds, before any allocation
        from relpos.pretrained.gguf import declared_params_check, read_gguf_header

        declared_params_check(read_gguf_header(src.path), n)
    else:
        _check_weight_bytes(src, n)
    check_rope(_raw_view(raw, where), where=where)  # before transformers reads it (it divides by the context)
    try:
        with _reading(src):
            cfg = AutoConfig.from_pretrained(str(src.folder), **src.kwargs())
    except RecursionError:
        raise ValueError(f"{src.path}: the config is nested too deeply") from None
    except (OSError, ValueError, KeyError, TypeError, ArithmeticError) as e:
        raise ValueError(f"could not read the config of {str(src.path)!r}: {str(e).splitlines()[0]}") from None
    if src.gguf and raw.get("rope_scaling"):  # applied as shipped: transformers' GGUF config leaves it out
        from relpos.pretrained.scalings import rope_params

        base = {k: v for k, v in rope_params(cfg).items() if k in ("rope_theta", "partial_rotary_factor")}
        cfg.rope_parameters = {**base, **raw["rope_scaling"]}
    check_rope(cfg, where=where)
    return cfg


def load_hf_causal_lm(src: ModelSource, cfg, *, dtype: str = "float32", attn_implementation: str = "sdpa"):
    """The transformers model of ``src`` (weights checked finite)."""
    from transformers import AutoModelForCausalLM

    dt = DTYPES.get(dtype)
    if dt is None:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    quiet = not sys.stderr.isatty()  # transformers' own loading bars: only on a terminal
    if quiet:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    gg = None
    if quiet and src.gguf:  # the GGUF loader's own tqdm bar
        import functools

        import transformers.modeling_gguf_pytorch_utils as gg

        bar = gg.tqdm
        gg.tqdm = functools.partial(bar, disable=True)
    try:
        with _reading(src):
            model, info = AutoModelForCausalLM.from_pretrained(
                str(src.folder), config=cfg, dtype=dt, attn_implementation=attn_implementation,
                output_loading_info=True, ignore_mismatched_sizes=True, **src.kwargs())  # named below
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, IndexError) as e:
        raise ValueError(f"could not load {str(src.path)!r} as a causal LM: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    finally:
        if gg is not None:
            gg.tqdm = bar
    check_loading_info(src, info)
    if src.gguf:  # transformers' GGUF loader skips a tensor the model has no parameter for, and says nothing
        from relpos.pretrained.gguf import read_gguf_header
        from relpos.pretrained.gguf_reader import unexpected_tensors

        extra = unexpected_tensors(read_gguf_header(src.path), model)
        if extra:
            more = f" and {len(extra) - 3} more" if len(extra) > 3 else ""
            raise ValueError(f"{src.path} holds tensors the model does not have: {', '.join(extra[:3])}{more}; "
                             "relpos does not evaluate a model with weights left out")
    model = model.to(dt)
    for name, p in model.named_parameters():
        if p.is_floating_point() and not bool(torch.isfinite(p).all()):
            raise ValueError(f"{src.path}: weight {name} holds NaN or inf; relpos does not evaluate a broken "
                             "checkpoint")
    return model


def check_loading_info(src: ModelSource, info: dict) -> None:
    """Refuse, naming the weights, a checkpoint with missing, unexpected or mis-shaped weights.

    transformers initialises a missing weight at random and reports it only on
    stderr; an evaluation of such a model gives normal-looking numbers.
    """
    for key, what in (("missing_keys", "has no weight for"), ("unexpected_keys", "holds weights the model does not "
                                                                                  "have:"),
                      ("mismatched_keys", "holds weights of the wrong shape:")):
        names = sorted(k if isinstance(k, str) else f"{k[0]} ({list(k[1])} in the file, {list(k[2])} in the model)"
                       if len(k) == 3 else str(k[0]) for k in (info.get(key) or ()))
        if names:
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            raise ValueError(f"{src.path} {what} {', '.join(names[:3])}{more}; relpos does not evaluate a model "
                             "with weights initialised at random or left out")


def model_fingerprint(path: str | os.PathLike) -> str:
    """16 hex digits from the config and, for every weight file, its size and first and last MiB."""
    src = model_source(path)
    if src.gguf:
        files = [src.path]
        h = hashlib.sha256(b"gguf")
    else:
        files = sorted(q for q in src.folder.iterdir() if q.suffix in (".safetensors", ".bin", ".pt"))
        h = hashlib.sha256((src.folder / "config.json").read_bytes())
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


def tokenizer_file(path: str | os.PathLike, tokenizer: str | None = None, cache_dir: str | None = None) -> str:
    """The ``tokenizer.json`` to use: ``--tokenizer``, the folder's own, or one saved from a GGUF file's tokenizer."""
    if tokenizer:
        if not Path(tokenizer).is_file():
            raise ValueError(f"--tokenizer {tokenizer!r} does not exist")
        return str(tokenizer)
    src = model_source(path)
    if not src.gguf:
        tok = src.folder / "tokenizer.json"
        if not tok.is_file():
            raise ValueError(f"{src.path} has no tokenizer.json; give one with --tokenizer")
        return str(tok)
    out = _gguf_tokenizer_path(path, cache_dir)
    if not out.is_file():
        text = _gguf_tokenizer_text(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        from relpos.outdir import write_text_atomic

        write_text_atomic(out, text)
    return str(out)


def _gguf_tokenizer_path(path, cache_dir) -> Path:
    from relpos.corpus import default_cache_dir

    root = Path(cache_dir) if cache_dir else default_cache_dir()
    return root.parent / "gguf-tokenizers" / f"{model_fingerprint(path)}.json"


def _gguf_tokenizer_text(src: ModelSource) -> str:
    """The ``tokenizer.json`` text of a GGUF file's tokenizer (transformers' builder; only the file's ids)."""
    require_hf(gguf=True)
    from transformers import AutoTokenizer

    from relpos.pretrained.gguf import check_gguf, read_gguf_header

    check_gguf(read_gguf_header(src.path))  # bounded, and special-token ids inside the vocabulary
    try:
        with _reading(src):
            tok = AutoTokenizer.from_pretrained(str(src.folder), **src.kwargs())
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:
        raise ValueError(f"could not read the tokenizer of {str(src.path)!r}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"the tokenizer of {str(src.path)!r} has no fast (tokenizers) form; give one with "
                         "--tokenizer")
    # transformers' GPT-2 builder adds <|endoftext|> past the file's vocabulary: keep only the file's ids
    n = backend.get_vocab_size(with_added_tokens=False)
    data = json.loads(backend.to_str())
    data["added_tokens"] = [t for t in data.get("added_tokens", []) if int(t["id"]) < n]
    return json.dumps(data, ensure_ascii=False)


def model_tokenizer(path: str | os.PathLike, tokenizer: str | None = None, cache_dir: str | None = None):
    """The ``tokenizers.Tokenizer`` that :func:`tokenizer_file` names, and whether it had to be built: read from
    its file, or -- a GGUF file's not saved yet -- built in memory; writes nothing (for a dry run)."""
    from tokenizers import Tokenizer

    from relpos.corpus import load_tokenizer

    src = model_source(path)
    if tokenizer or not src.gguf or _gguf_tokenizer_path(path, cache_dir).is_file():
        return load_tokenizer(tokenizer_file(path, tokenizer, cache_dir)), False
    return Tokenizer.from_str(_gguf_tokenizer_text(src)), True
