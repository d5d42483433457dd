"""The explorer's JSON API: every number the page shows is computed here, by relpos.

Nothing in this module knows about HTTP. :class:`Explorer` maps a route name and
a dict of string parameters to a JSON-able dict, or raises :class:`ApiError`
with a message the page shows as is. The HTTP server (:mod:`relpos.explorer.server`)
and the static export (:mod:`relpos.explorer.export`) both call it, so a live
page and an exported snapshot show the same numbers.

Routes (all ``GET`` unless noted):

* ``info`` -- schemes, limits, loaded results and checkpoints.
* ``offsets`` -- view 1: tokens of a sentence and the relative-position matrix
  from :func:`relpos.distance.relative_positions` (optionally clipped).
* ``bias`` -- view 2: a scheme's score term over ``(i, j)``, its curve against
  the offset and bucket boundaries; for the content-dependent schemes (DeBERTa,
  CoPE, FoX) the term ``enc.score(q, k, ...)`` for the tokens of a typed text
  (see :func:`content_qk`).
* ``shift`` -- view 3: attention logits of fixed content at positions
  ``0..N-1`` and ``c..c+N-1`` for an absolute and a relative scheme.
* ``results`` -- view 4: extrapolation curves from a ``relpos compare`` folder
  (``POST`` with a results.json body aggregates an uploaded file instead).
* ``attention`` -- view 5: attention maps of a loaded checkpoint on some text.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import re
import threading
from pathlib import Path
from typing import Any, Callable

import torch

from relpos import distance
from relpos.encodings import SCHEMES, get_scheme, make_encoding, scheme_names

__all__ = ["ApiError", "Explorer", "Limits", "tokenize", "BIAS_VIEW_SCHEMES", "CONTENT_DIM", "token_vector",
           "content_projections", "content_qk"]


class ApiError(ValueError):
    """A request the explorer refuses, with a message meant for the page.

    Attributes:
        code: machine-readable kind (``"bad_value"``, ``"too_large"``,
            ``"not_found"``, ``"unavailable"``), which the page may translate.
        field: the request parameter at fault, if any.
        limit: the cap that was exceeded, for ``"too_large"``.
        status: HTTP status the server answers with.
    """

    def __init__(self, message: str, *, code: str = "bad_value", field: str | None = None,
                 limit: int | float | None = None, unit: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.limit = limit
        self.unit = unit
        self.status = status

    def to_json(self) -> dict:
        return {"error": str(self), "code": self.code, "field": self.field, "limit": self.limit, "unit": self.unit}


@dataclasses.dataclass(frozen=True)
class Limits:
    """Caps on what the explorer accepts (each keeps one request well under a second)."""

    max_text_chars: int = 1000
    max_tokens: int = 64
    max_len: int = 256
    max_heads: int = 16
    max_head_dim: int = 256
    max_content_width: int = 1024  # n_heads * head_dim for the content-dependent schemes of view 2
    max_int_option: int = 4096
    max_shift_len: int = 64
    max_shift: int = 2048
    max_attention_bytes: int = 128
    max_query_bytes: int = 8192
    max_body_bytes: int = 8 * 1024 * 1024


# ----------------------------------------------------------------------------- helpers


def _sig(x: float, digits: int = 7) -> float | None:
    """Round to ``digits`` significant digits (float32 carries about 7); None for non-finite."""
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}") + 0.0  # + 0.0 turns -0.0 into 0.0


def _tolist(t: torch.Tensor, digits: int = 7) -> list:
    """A float tensor as nested lists of rounded Python floats."""
    flat = [_sig(v, digits) for v in t.detach().double().reshape(-1).tolist()]
    if t.dim() == 0:
        return flat[0]
    out: list = flat
    for size in reversed(t.shape[1:]):
        out = [out[i : i + size] for i in range(0, len(out), size)]
    return out


def _int(params: dict, name: str, default: int | None, lo: int, hi: int, *, cap: bool = False,
         unit: str | None = None) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ApiError(f"{name} is required", field=name)
        return default
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise ApiError(f"{name} must be a whole number, got {str(raw)[:40]!r}", field=name) from None
    if v > hi and cap:
        raise ApiError(f"{name} = {v} is too large: the explorer accepts at most {hi}", code="too_large",
                       field=name, limit=hi, unit=unit)
    if not lo <= v <= hi:
        raise ApiError(f"{name} must be between {lo} and {hi}, got {v}", field=name, limit=hi)
    return v


def _float(params: dict, name: str, default: float | None) -> float | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        v = float(str(raw).strip())
    except ValueError:
        raise ApiError(f"{name} must be a number, got {str(raw)[:40]!r}", field=name) from None
    if not math.isfinite(v):
        raise ApiError(f"{name} must be a finite number, got {raw!r}", field=name)
    return v


def _bool(params: dict, name: str, default: bool) -> bool:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    s = str(raw).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ApiError(f"{name} must be true or false, got {str(raw)[:40]!r}", field=name)


def _choice(params: dict, name: str, default: str, choices) -> str:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise ApiError(f"{name} must be one of {', '.join(map(str, choices))}; got {str(raw)[:40]!r}", field=name)
    return raw


def _text(params: dict, name: str, default: str, max_chars: int) -> str:
    raw = params.get(name)
    text = default if raw is None else str(raw)
    if len(text) > max_chars:
        raise ApiError(f"the text is {len(text)} characters long; the explorer accepts at most {max_chars}",
                       code="too_large", field=name, limit=max_chars, unit="chars")
    return text


# ------------------------------------------------------------------ view 1: tokens

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|(?:(?![{_CJK}])\w)+(?:['\u2019](?:(?![{_CJK}])\w)+)*|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Split text into display tokens: words, single punctuation marks, single CJK characters.

    Example:
        >>> tokenize("The cat's mat. 猫追老鼠")
        ['The', "cat's", 'mat', '.', '猫', '追', '老', '鼠']
    """
    return _TOKEN.findall(text)


# -------------------------------------------------- view 2: content of a typed text

#: Width of the random token vectors the content-dependent schemes are shown on.
CONTENT_DIM = 64


def _hash_seed(text: str) -> int:
    """A 63-bit generator seed from a string (SHA-256; the same on every machine)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") & (2**63 - 1)


def token_vector(token: str, seed: int, dim: int = CONTENT_DIM) -> torch.Tensor:
    """The fixed random vector ``(dim,)`` of one token: N(0, 1) entries drawn from a
    generator seeded with SHA-256 of ``"relpos-explorer/token/{seed}/{token}"``.

    The same token gets the same vector wherever it stands in the text, so only
    the content, never the position, decides it.
    """
    g = torch.Generator().manual_seed(_hash_seed(f"relpos-explorer/token/{seed}/{token}"))
    return torch.randn(dim, generator=g)


def content_projections(seed: int, n_heads: int, head_dim: int,
                        dim: int = CONTENT_DIM) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random projections ``W_Q, W_K`` of shape ``(dim, H*D)``, entries N(0, 1/dim).

    Drawn (``W_Q`` first) from a generator seeded with SHA-256 of
    ``"relpos-explorer/projections/{seed}"``, a stream apart from the one
    ``torch.manual_seed(seed)`` gives the scheme's own parameters.
    """
    g = torch.Generator().manual_seed(_hash_seed(f"relpos-explorer/projections/{seed}"))
    wq = torch.randn(dim, n_heads * head_dim, generator=g) / math.sqrt(dim)
    wk = torch.randn(dim, n_heads * head_dim, generator=g) / math.sqrt(dim)
    return wq, wk


def content_qk(tokens: list[str], seed: int, n_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys ``(1, H, N, D)`` of a token list: ``q = x W_Q``, ``k = x W_K``
    with ``x (N, CONTENT_DIM)`` the token vectors (:func:`token_vector`)."""
    x = torch.stack([token_vector(t, seed) for t in tokens])  # (N, C0)
    wq, wk = content_projections(seed, n_heads, head_dim)
    n = len(tokens)
    q = (x @ wq).view(n, n_heads, head_dim).transpose(0, 1)[None]  # (1, H, N, D)
    k = (x @ wk).view(n, n_heads, head_dim).transpose(0, 1)[None]
    return q, k


# ----------------------------------------------------------- view 2: bias entries


@dataclasses.dataclass(frozen=True)
class BiasEntry:
    """A choice in the bias-matrix view.

    Attributes:
        key: the name the page sends.
        registry: registry name of the scheme (None for the plain log2 buckets).
        kind: ``"bias"`` (the scheme's bias term), ``"t5"`` (bias or bucket ids),
            ``"log2"`` (bucket ids of :func:`relpos.distance.log2_bucket`),
            ``"shaw"`` (norms of the key-table rows each pair uses) or
            ``"content"`` (a ``"score"`` term that depends on q and k: shown
            for the tokens of a typed text, see :func:`content_qk`).
        hidden: constructor options not shown as controls.
        overrides: per-head scalars the page may set (name -> (lo, hi)).
        defaults: constructor options whose starting value in this view differs
            from the library's (name -> value); the page says so.
    """

    key: str
    registry: str | None
    kind: str = "bias"
    hidden: tuple[str, ...] = ()
    overrides: tuple[tuple[str, float, float], ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()


BIAS_VIEW_SCHEMES: tuple[BiasEntry, ...] = (
    BiasEntry("t5", "t5", "t5"),
    BiasEntry("log2", None, "log2"),
    BiasEntry("alibi", "alibi", hidden=("learnable_slopes",), overrides=(("slope", 1e-6, 100.0),)),
    BiasEntry("kerple-log", "kerple-log", overrides=(("r1", 1e-4, 100.0), ("r2", 1e-4, 100.0))),
    BiasEntry("kerple-power", "kerple-power", overrides=(("r1", 1e-4, 100.0), ("r2", 1e-4, 1.999))),
    BiasEntry("fire", "fire"),
    BiasEntry("sandwich", "sandwich"),
    BiasEntry("shaw", "shaw", "shaw", hidden=("value",)),
    BiasEntry("dpb", "dpb"),
    # content-dependent "score" schemes: the term is shown for the tokens of a typed text
    BiasEntry("deberta", "deberta", "content", hidden=("share_att_key", "layer_norm_eps")),
    # CoPE's table starts at zero in the paper (the term would be 0 everywhere) and FoX's gate
    # weights at std 0.02 (gates all near 1/2): start them larger so the term is visible
    BiasEntry("cope", "cope", "content", defaults=(("init_std", 0.1),)),
    BiasEntry("fox", "fox", "content", defaults=(("init_std", 0.25),)),
)

_DIM_OPTIONS = {"self", "n_heads", "head_dim", "d_model", "max_len", "causal"}


def _available(registry: str | None) -> bool:
    if registry is None:
        return True
    return registry in scheme_names()


def option_specs(registry: str, hidden: tuple[str, ...] = (), defaults=()) -> list[dict]:
    """Numeric/boolean constructor options of a scheme, read from its signature.

    ``defaults`` (pairs or a dict) replaces the starting value of some options;
    such an option reports the library's own default as ``library_default``.
    """
    cls, preset = get_scheme(registry)
    defaults = dict(defaults)
    out = []
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name in _DIM_OPTIONS or p.name in preset or p.name in hidden:
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is inspect.Parameter.empty:
            continue
        d = p.default
        if isinstance(d, bool):
            typ = "bool"
        elif isinstance(d, int):
            typ = "int"
        elif isinstance(d, float):
            typ = "float"
        else:
            continue
        spec = {"name": p.name, "type": typ, "default": d}
        if p.name in defaults:
            spec["default"] = type(d)(defaults[p.name])
            spec["library_default"] = d
        out.append(spec)
    return out


def _uses_head_dim(registry: str) -> bool:
    cls, _ = get_scheme(registry)
    params = inspect.signature(cls.__init__).parameters
    return "head_dim" in params or "d_model" in params


def _bucket_ranges(offsets: list[int], ids: list[int]) -> list[dict]:
    """Consecutive offsets sharing a bucket id, as ``{bucket, from, to}``."""
    out: list[dict] = []
    for d, b in zip(offsets, ids):
        if out and out[-1]["bucket"] == b and out[-1]["to"] == d - 1:
            out[-1]["to"] = d
        else:
            out.append({"bucket": b, "from": d, "to": d})
    return out


def _set_override(enc, entry: BiasEntry, name: str, head: int, value: float) -> None:
    """Set one per-head scalar of a built scheme (ALiBi slope, KERPLE r1/r2)."""
    with torch.no_grad():
        if entry.key == "alibi":
            enc.slopes[head] = value
            return
        if entry.key.startswith("kerple"):
            from relpos.encodings import kerple as kmod

            v = torch.tensor(value, dtype=torch.float32)
            if name == "r1":
                enc.raw_r1[head] = kmod._inv_softplus(v)
            elif enc.kernel == "log":
                enc.raw_r2[head] = kmod._inv_softplus(v)
            else:
                enc.raw_r2[head] = kmod._logit(v / 2)
            return
    raise ApiError(f"{name} cannot be set for {entry.key}", field=name)  # pragma: no cover


# ------------------------------------------------------------------ view 4: results

_METRICS = ("bpb", "loss", "ppl", "accuracy", "token_accuracy")


def load_results(path: str | Path) -> dict:
    """Read a ``relpos compare`` results.json (a folder holding one, or the file itself)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    if not p.is_file():
        raise FileNotFoundError(f"no results.json at {p}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p} is not valid JSON: {e}") from None
    check_results(data, str(p))
    return data


def check_results(data: Any, where: str = "results.json") -> None:
    """Raise ApiError unless ``data`` looks like a relpos compare results.json."""
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ApiError(f"{where} is not a relpos compare results.json (no 'runs' list)", field="results")
    if data.get("version", 1) != 1:
        raise ApiError(f"{where} has version {data.get('version')!r}; this explorer reads version 1",
                       field="results")
    for n, run in enumerate(data["runs"]):
        if not isinstance(run, dict) or not isinstance(run.get("scheme"), str) \
                or not isinstance(run.get("metrics"), list):
            raise ApiError(f"{where}: run {n} needs a 'scheme' string and a 'metrics' list", field="results")
        for m in run["metrics"]:
            if not isinstance(m, dict) or not isinstance(m.get("eval_len"), int):
                raise ApiError(f"{where}: run {n} has a metric without an integer 'eval_len'", field="results")


def aggregate_results(data: dict, task: str | None, metric: str | None) -> dict:
    """Mean, min and max over seeds of one metric, per (scheme, variant), against eval_len."""
    runs = data["runs"]
    tasks = sorted({str(r.get("task") or "lm") for r in runs})
    if not tasks:
        return {"tasks": [], "metrics": [], "task": None, "metric": None, "series": [], "train_lens": []}
    if task is None:
        task = "lm" if "lm" in tasks else tasks[0]
    if task not in tasks:
        raise ApiError(f"task must be one of {', '.join(tasks)}; got {task!r}", field="task")
    truns = [r for r in runs if str(r.get("task") or "lm") == task]
    have = [m for m in _METRICS if any(isinstance(x.get(m), (int, float)) for r in truns for x in r["metrics"])]
    if metric is None:
        metric = have[0] if have else _METRICS[0]
    if metric not in _METRICS:
        raise ApiError(f"metric must be one of {', '.join(_METRICS)}; got {metric!r}", field="metric")
    groups: dict[str, dict] = {}
    for r in truns:
        variant = r.get("variant")
        label = r.get("label") if isinstance(r.get("label"), str) and r.get("label") else (
            r["scheme"] if not variant else f"{r['scheme']} ({variant})")
        g = groups.setdefault(label, {"values": {}, "train_lens": set(), "seeds": set(), "scheme": r["scheme"],
                                      "variant": variant})
        if isinstance(r.get("train_len"), int):
            g["train_lens"].add(r["train_len"])
        g["seeds"].add(r.get("seed"))
        for x in r["metrics"]:
            v = x.get(metric)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                g["values"].setdefault(x["eval_len"], []).append(float(v))
    series = []
    for label, g in groups.items():
        pts = [{"eval_len": L, "mean": _sig(sum(vs) / len(vs), 6), "min": _sig(min(vs), 6),
                "max": _sig(max(vs), 6), "n": len(vs)} for L, vs in sorted(g["values"].items())]
        series.append({"label": label, "scheme": g["scheme"], "variant": g["variant"], "points": pts,
                       "train_lens": sorted(g["train_lens"]), "seeds": len(g["seeds"])})
    series.sort(key=lambda s: s["label"])
    train_lens = sorted({L for s in series for L in s["train_lens"]})
    return {"tasks": tasks, "metrics": have, "task": task, "metric": metric, "series": series,
            "train_lens": train_lens}


# ---------------------------------------------------------------- view 5: bytes


def byte_label(b: int) -> str:
    """A short printable label for one byte of text."""
    if b == 32:
        return "\u2423"  # open box for a space
    if b == 10:
        return "\u23ce"  # return symbol for a newline
    if b == 9:
        return "\u21e5"  # tab
    if 33 <= b < 127:
        return chr(b)
    return f"x{b:02X}"


# ----------------------------------------------------------------------- explorer


@dataclasses.dataclass
class _Checkpoint:
    label: str
    path: str
    model: Any
    config: Any


class Explorer:
    """State (loaded results and checkpoints, caps) and the routes of the JSON API.

    Args:
        results: ``relpos compare`` output folders (or results.json files) to offer.
        checkpoints: checkpoint folders, loaded now through
            :func:`relpos.checkpoint.load` (the safe loader; nothing is unpickled).
        limits: size caps, :class:`Limits` by default.

    Raises:
        FileNotFoundError / ValueError: a results folder or checkpoint that
            cannot be read (the message names it).
    """

    def __init__(self, results=(), checkpoints=(), limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._lock = threading.Lock()
        self.results: list[tuple[str, dict]] = []
        for r in results:
            self.results.append((_label(r), load_results(r)))
        self.checkpoints: list[_Checkpoint] = []
        for c in checkpoints:
            from relpos import checkpoint as ckpt

            model, cfg = ckpt.load(c)
            model.eval()
            self.checkpoints.append(_Checkpoint(_label(c), str(c), model, cfg))
        self._routes: dict[str, Callable[[dict], dict]] = {
            "info": self.info,
            "offsets": self.offsets,
            "bias": self.bias,
            "shift": self.shift,
            "results": self.results_view,
            "attention": self.attention,
        }

    # ------------------------------------------------------------ dispatch

    @property
    def routes(self) -> list[str]:
        return list(self._routes)

    def get(self, route: str, params: dict[str, str]) -> dict:
        """Answer ``GET /api/<route>?<params>``."""
        fn = self._routes.get(route)
        if fn is None:
            raise ApiError(f"no such API route: {route[:40]!r}", code="not_found", status=404)
        return fn(params)

    def post(self, route: str, body: bytes, params: dict[str, str]) -> dict:
        """Answer ``POST /api/results`` with an uploaded results.json body."""
        if route != "results":
            raise ApiError(f"POST is not accepted for {route[:40]!r}", code="not_found", status=405)
        if len(body) > self.limits.max_body_bytes:
            raise ApiError(f"the file is {len(body)} bytes; the explorer accepts at most "
                           f"{self.limits.max_body_bytes}", code="too_large", field="results",
                           limit=self.limits.max_body_bytes, unit="bytes", status=413)
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ApiError(f"the uploaded file is not valid JSON ({e.__class__.__name__})", field="results") from None
        check_results(data, "the uploaded file")
        out = aggregate_results(data, params.get("task") or None, params.get("metric") or None)
        out["source"] = "upload"
        return out

    # ------------------------------------------------------------ info

    def info(self, params: dict) -> dict:
        """Schemes, caps, and what results and checkpoints are loaded."""
        schemes = []
        for name in SCHEMES:
            avail = name in scheme_names()
            item = {"name": name, "available": avail, "summary": SCHEMES[name].summary}
            if avail:
                try:
                    enc = self._encoding(name, (), 2, 8, True, 0)
                    d = enc.describe()
                    item.update(acts_on=d["acts_on"], relative=d["relative"], paper=d["paper"])
                except (ValueError, TypeError) as e:  # a scheme that cannot be built small
                    item.update(available=False, reason=str(e))
            schemes.append(item)
        bias_view = []
        for e in BIAS_VIEW_SCHEMES:
            avail = _available(e.registry)
            item = {"key": e.key, "available": avail, "kind": e.kind,
                    "overrides": [{"name": n, "min": lo, "max": hi} for n, lo, hi in e.overrides]}
            if e.kind == "log2":
                item["options"] = [{"name": "m", "type": "int", "default": 8},
                                   {"name": "max_bucket", "type": "int", "default": 0}]
                item["head_dim"] = False
                item["per_head"] = False
            elif avail:
                cls = get_scheme(e.registry)[0]
                item["options"] = option_specs(e.registry, e.hidden, e.defaults)
                item["head_dim"] = _uses_head_dim(e.registry)
                item["per_head"] = True
                item["paper"] = cls.paper
                item["causal_only"] = bool(cls.causal_only)
            bias_view.append(item)
        return {
            "version": _version(),
            "schemes": schemes,
            "bias_schemes": bias_view,
            "limits": dataclasses.asdict(self.limits),
            "results": [{"index": i, "label": lab} for i, (lab, _) in enumerate(self.results)],
            "checkpoints": [
                {"index": i, "label": c.label, "scheme": getattr(c.config, "scheme", None),
                 "n_layers": getattr(c.config, "n_layers", None), "n_heads": getattr(c.config, "n_heads", None),
                 "max_len": getattr(c.config, "max_len", None), "causal": getattr(c.config, "causal", True)}
                for i, c in enumerate(self.checkpoints)
            ],
        }

    def _tokens(self, params: dict, noun: str) -> list[str]:
        """Tokens of ``params["text"]``, with the explorer's caps (``noun`` names it in errors)."""
        L = self.limits
        tokens = tokenize(_text(params, "text", "", L.max_text_chars))
        if not tokens:
            raise ApiError("type at least one word", code="empty", field="text")
        if len(tokens) > L.max_tokens:
            raise ApiError(f"the {noun} has {len(tokens)} tokens; the explorer shows at most {L.max_tokens}",
                           code="too_large", field="text", limit=L.max_tokens, unit="tokens")
        return tokens

    # ------------------------------------------------------------ view 1

    def offsets(self, params: dict) -> dict:
        """Tokens of ``text`` and their relative positions ``d[i][j]`` (``j - i`` or ``i - j``)."""
        L = self.limits
        tokens = self._tokens(params, "sentence")
        convention = _choice(params, "convention", "j-i", ("j-i", "i-j"))
        n = len(tokens)
        clip_raw = params.get("clip")
        clip = None if clip_raw in (None, "", "none") else _int(params, "clip", None, 0, L.max_tokens)
        d = distance.relative_positions(n, convention=convention)  # (N, N)
        out = {"tokens": tokens, "n": n, "convention": convention, "clip": clip, "offsets": d.tolist()}
        out["clipped"] = distance.clip_relative(d, clip).tolist() if clip is not None else None
        return out

    # ------------------------------------------------------------ view 2

    def _encoding(self, name: str, options: tuple, n_heads: int, head_dim: int, causal: bool, seed: int,
                  max_len: int = 512):
        return _build_encoding(name, options, n_heads, head_dim, causal, seed, max_len, self._lock)

    def bias(self, params: dict) -> dict:
        """The score term of one scheme over ``(i, j)``, for one head, with its curve and buckets."""
        L = self.limits
        keys = [e.key for e in BIAS_VIEW_SCHEMES]
        key = _choice(params, "scheme", "t5", keys)
        entry = BIAS_VIEW_SCHEMES[keys.index(key)]
        if not _available(entry.registry):
            raise ApiError(f"scheme {key!r} is not available in this build of relpos", code="unavailable",
                           field="scheme")
        if entry.kind == "content":
            return self._content_bias(entry, params)
        n = _int(params, "n", 32, 2, L.max_len, cap=True, unit="tokens")
        causal = _bool(params, "causal", False)
        offs = torch.arange(-(n - 1), 1 if causal else n)  # offsets d = j - i shown on the curve
        idx = torch.arange(n)[None]  # (1, N) positions 0..N-1
        delta = idx[0][None, :] - idx[0][:, None]  # (N, N): j - i
        out: dict = {"scheme": key, "n": n, "causal": causal, "offsets": offs.tolist(), "buckets": None}

        if entry.kind == "log2":
            m = _int(params, "opt.m", 8, 1, L.max_int_option)
            mb = _int(params, "opt.max_bucket", 0, 0, L.max_int_option)
            if mb and mb < m:
                raise ApiError(f"max_bucket must be 0 (none) or >= m = {m}, got {mb}", field="opt.max_bucket")
            kw = {"m": m, "bidirectional": not causal, "max_bucket": mb or None}
            mat = distance.log2_bucket(delta, **kw)
            ids = distance.log2_bucket(offs, **kw)
            out.update(n_heads=1, head=0, values="bucket", matrix=mat.tolist(), curves=[ids.tolist()],
                       buckets=_bucket_ranges(offs.tolist(), ids.tolist()),
                       params={"m": m, "max_bucket": mb or None, "bidirectional": not causal})
            return out

        n_heads, head, head_dim, seed, opts = self._scheme_args(entry, params)
        overrides = {}
        for name, lo, hi in entry.overrides:
            v = _float(params, "set." + name, None)
            if v is not None:
                if not lo <= v <= hi:
                    raise ApiError(f"{name} must be between {lo:g} and {hi:g}, got {v:g}", field="set." + name)
                overrides[name] = v
        enc = self._encoding(entry.registry, tuple(opts), n_heads, head_dim, causal, seed, max_len=n)
        if overrides:
            enc = _copy_module(enc)
            for name, v in overrides.items():
                _set_override(enc, entry, name, head, v)

        show = _choice(params, "show", "bias", ("bias", "bucket")) if entry.kind == "t5" else "bias"
        with torch.no_grad():
            if entry.kind == "t5" and show == "bucket":
                mat = enc.buckets(delta)
                curves = [enc.buckets(offs).tolist()]
                out["values"] = "bucket"
                out["matrix"] = mat.tolist()
            elif entry.kind == "shaw":
                norms = enc.key_table.float().norm(dim=-1)  # (R,) or (H, R)
                if norms.dim() == 1:
                    norms = norms[None].expand(n_heads, -1)
                rel = enc.rel_index(idx, idx)[0]  # (N, N) rows of the table
                mat = norms[head][rel]
                curves = _tolist(norms[:, offs.clamp(-enc.k, enc.k) + enc.k])
                out["values"] = "norm"
                out["matrix"] = _tolist(mat)
                out["k"] = enc.k
            else:
                b = enc.bias(idx, idx)[0]  # (H, N, N)
                out["values"] = "bias"
                out["matrix"] = _tolist(b[head])
                if enc.toeplitz:
                    curves = _tolist(enc.relative_bias(offs))  # (H, len(offs))
                else:  # e.g. FIRE: the term depends on i too; show the last query's row (d <= 0)
                    offs = torch.arange(-(n - 1), 1)
                    out["offsets"] = offs.tolist()
                    out["curve_row"] = n - 1
                    curves = _tolist(b[:, n - 1, :])
            if entry.kind == "t5":
                ids = enc.buckets(offs).tolist()
                out["buckets"] = _bucket_ranges(offs.tolist(), ids)
                if show == "bucket":
                    curves = [ids]
        desc = enc.describe()
        out.update(n_heads=n_heads, head=head, head_dim=head_dim, seed=seed, curves=curves,
                   options=dict(opts), overrides=overrides, relative=desc["relative"],
                   learned_params=desc["params"], paper=desc["paper"])
        if entry.key == "alibi":
            out["slopes"] = _tolist(enc.slopes)
        if entry.key.startswith("kerple"):
            out["r1"] = _tolist(enc.r1)
            out["r2"] = _tolist(enc.r2)
        if entry.kind == "t5":
            out["bidirectional"] = enc.bidirectional
        return out

    def _scheme_args(self, entry: BiasEntry, params: dict) -> tuple[int, int, int, int, list]:
        """Heads, shown head, head dimension, seed and constructor options of a request."""
        L = self.limits
        n_heads = _int(params, "n_heads", 4, 1, L.max_heads, cap=True, unit="heads")
        head = _int(params, "head", 0, 0, n_heads - 1)
        head_dim = _int(params, "head_dim", 64, 1, L.max_head_dim, cap=True, unit="dims")
        seed = _int(params, "seed", 0, 0, 2**31 - 1)
        opts = []
        for spec in option_specs(entry.registry, entry.hidden, entry.defaults):
            name = spec["name"]
            pname = "opt." + name
            if spec["type"] == "bool":
                v: Any = _bool(params, pname, spec["default"])
            elif spec["type"] == "int":
                v = _int(params, pname, spec["default"], -L.max_int_option, L.max_int_option, cap=True)
            else:
                v = _float(params, pname, spec["default"])
                if abs(v) > 1e6:
                    raise ApiError(f"{name} must be within +-1e6, got {v}", field=pname)
            opts.append((name, v))
        return n_heads, head, head_dim, seed, opts

    def _content_bias(self, entry: BiasEntry, params: dict) -> dict:
        """A content-dependent score term for the tokens of ``text`` (view 2, DeBERTa/CoPE/FoX).

        The tokens (:func:`tokenize`, as view 1) get fixed random vectors, seeded
        random projections make ``q`` and ``k`` (:func:`content_qk`), and the
        matrix is the scheme's own ``score(q, k, pos, pos, scale)``.
        """
        L = self.limits
        tokens = self._tokens(params, "text")
        n_heads, head, head_dim, seed, opts = self._scheme_args(entry, params)
        if n_heads * head_dim > L.max_content_width:
            raise ApiError(f"n_heads x head_dim = {n_heads * head_dim} is too large for this scheme: the explorer "
                           f"accepts at most {L.max_content_width}", code="too_large", field="head_dim",
                           limit=L.max_content_width, unit="dims")
        cls, _ = get_scheme(entry.registry)
        causal = True if cls.causal_only else _bool(params, "causal", False)
        enc = self._encoding(entry.registry, tuple(opts), n_heads, head_dim, causal, seed, max_len=L.max_tokens)
        n = len(tokens)
        q, k = content_qk(tokens, seed, n_heads, head_dim)  # (1, H, N, D) each
        pos = torch.arange(n)[None]  # (1, N)
        scale = float(enc.attention_scale(head_dim))
        desc = enc.describe()
        out: dict = {
            "scheme": entry.key, "content": True, "tokens": tokens, "n": n, "causal": causal,
            "causal_only": bool(cls.causal_only), "values": "score", "n_heads": n_heads, "head": head,
            "head_dim": head_dim, "seed": seed, "scale": _sig(scale), "content_dim": CONTENT_DIM,
            "options": dict(opts), "overrides": {}, "relative": desc["relative"], "learned_params": desc["params"],
            "paper": desc["paper"], "offsets": None, "curves": None, "buckets": None,
        }
        with torch.no_grad():
            s = enc.score(q, k, pos, pos, scale)[0]  # (H, N, N)
            out["matrix"] = _tolist(s[head])
            if entry.key == "cope":
                p = enc.positions(q, k, pos, pos, scale)[0]  # (H, N, N)
                out["positions"] = _tolist(p[head])
                out["npos_max"] = enc.npos_max
            elif entry.key == "fox":
                lg = enc.log_forget_gates(k)[0]  # (H, N)
                out["gates"] = _tolist(lg.exp())
                out["log_gates"] = _tolist(lg)
            elif entry.key == "deberta":
                out["rel_index"] = enc.position_index(pos, pos)[0].tolist()  # (N, N), from i - j
                out["span"] = enc.span
                out["terms"] = list(enc.terms)
        return out

    # ------------------------------------------------------------ view 3

    def shift(self, params: dict) -> dict:
        """Logits of fixed random content at positions ``0..N-1`` and ``c..c+N-1``, for two schemes."""
        L = self.limits
        names = scheme_names()
        n = _int(params, "n", 12, 2, L.max_shift_len, cap=True, unit="tokens")
        c = _int(params, "c", 5, 0, L.max_shift, cap=True, unit="positions")
        seed = _int(params, "seed", 0, 0, 2**31 - 1)
        head = _int(params, "head", 0, 0, _SHIFT_HEADS - 1)
        default_abs = next((s for s in ("sinusoidal", "learned") if s in names), "nope")
        default_rel = next((s for s in ("rope", "t5", "alibi") if s in names), "nope")
        out = {"n": n, "c": c, "seed": seed, "head": head, "n_heads": _SHIFT_HEADS, "head_dim": _SHIFT_HEAD_DIM}
        for slot, default in (("absolute", default_abs), ("relative", default_rel)):
            name = _choice(params, slot, default, names)
            out[slot] = self._shift_one(name, n, c, seed, head)
        return out

    def _shift_one(self, name: str, n: int, c: int, seed: int, head: int) -> dict:
        H, D = _SHIFT_HEADS, _SHIFT_HEAD_DIM
        cls, _ = get_scheme(name)
        opts = (("init_std", 1.0),) if "init_std" in inspect.signature(cls.__init__).parameters else ()
        enc = self._encoding(name, opts, H, D, False, seed, max_len=n + self.limits.max_shift)
        base = _logits(enc, n, 0, seed)[head]  # (N, N)
        moved = _logits(enc, n, c, seed)[head]
        diff = moved - base
        max_diff = float(diff.abs().max())
        # float32 rounding of position terms grows with the positions and the logits' size
        scale = max(1.0, float(base.abs().max()), float(moved.abs().max()))
        tol = max(1e-5, 1e-6 * (n + c) * scale)
        return {"scheme": name, "relative": enc.describe()["relative"], "acts_on": enc.describe()["acts_on"],
                "base": _tolist(base), "shifted": _tolist(moved), "diff": _tolist(diff),
                "max_abs_diff": _sig(max_diff, 4), "tolerance": _sig(tol, 3), "unchanged": max_diff <= tol}

    # ------------------------------------------------------------ view 4

    def results_view(self, params: dict) -> dict:
        """Extrapolation curves of one loaded results folder, one task and metric."""
        if not self.results:
            raise ApiError("no results loaded: start the explorer with --results DIR (a relpos compare folder), "
                           "or load a results.json file", code="no_results", field="source")
        src = _int(params, "source", 0, 0, len(self.results) - 1)
        label, data = self.results[src]
        out = aggregate_results(data, params.get("task") or None, params.get("metric") or None)
        out["source"] = label
        return out

    # ------------------------------------------------------------ view 5

    def attention(self, params: dict) -> dict:
        """Attention probabilities of every head of one layer, for the bytes of ``text``."""
        if not self.checkpoints:
            raise ApiError("no checkpoint loaded: start the explorer with --checkpoint DIR "
                           "(a folder written by relpos train)", code="no_checkpoint", field="checkpoint")
        L = self.limits
        ci = _int(params, "checkpoint", 0, 0, len(self.checkpoints) - 1)
        ck = self.checkpoints[ci]
        text = _text(params, "text", "", L.max_text_chars)
        data = text.encode("utf-8")
        if not data:
            raise ApiError("type some text", code="empty", field="text")
        cap = min(L.max_attention_bytes, int(getattr(ck.config, "max_len", L.max_attention_bytes)))
        if len(data) > cap:
            raise ApiError(f"the text is {len(data)} bytes; the explorer accepts at most {cap} for this model",
                           code="too_large", field="text", limit=cap, unit="bytes")
        n_layers = int(ck.config.n_layers)
        layer = _int(params, "layer", 0, 0, n_layers - 1)
        maps = _attention_maps(ck.model, data, self._lock)  # list of (H, N, N)
        m = maps[layer]
        return {"checkpoint": ck.label, "scheme": getattr(ck.config, "scheme", None), "n_layers": n_layers,
                "n_heads": int(m.shape[0]), "layer": layer, "bytes": list(data),
                "tokens": [byte_label(b) for b in data], "causal": bool(getattr(ck.config, "causal", True)),
                "maps": [_tolist(m[h], 5) for h in range(m.shape[0])]}


# ------------------------------------------------------------------ internals

_SHIFT_HEADS = 2
_SHIFT_HEAD_DIM = 16


def _version() -> str:
    from relpos import __version__

    return __version__


def _label(p) -> str:
    path = Path(p)
    return path.parent.name if path.name == "results.json" else path.name or str(path)


def _copy_module(enc):
    import copy

    return copy.deepcopy(enc)


@functools.lru_cache(maxsize=16)
def _build_cached(name, options, n_heads, head_dim, causal, seed, max_len):
    cls, _ = get_scheme(name)
    causal = causal or cls.causal_only
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        enc = make_encoding(name, n_heads=n_heads, head_dim=head_dim, causal=causal, max_len=max_len,
                            **dict(options))
    enc.eval()
    return enc


def _build_encoding(name, options, n_heads, head_dim, causal, seed, max_len, lock):
    try:
        with lock:
            return _build_cached(name, options, n_heads, head_dim, causal, seed, max_len)
    except (ValueError, TypeError) as e:
        raise ApiError(str(e), field="options") from None


def shift_content(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fixed random content for view 3: token vectors ``x (1, N, C)`` and projections ``W_Q, W_K (C, C)``."""
    C = _SHIFT_HEADS * _SHIFT_HEAD_DIM
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(1, n, C, generator=g)
    wq = torch.randn(C, C, generator=g) / math.sqrt(C)
    wk = torch.randn(C, C, generator=g) / math.sqrt(C)
    return x, wq, wk


def shift_qk(enc, x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, pos: torch.Tensor):
    """Queries and keys ``(1, H, N, D)`` of content ``x`` at positions ``pos (1, N)`` (embedding site applied)."""
    H, D = _SHIFT_HEADS, _SHIFT_HEAD_DIM
    n = x.shape[1]
    if "embedding" in enc.acts_on:
        x = enc.embed(x, pos)
    q = (x @ wq).view(1, n, H, D).transpose(1, 2)  # (1, H, N, D)
    k = (x @ wk).view(1, n, H, D).transpose(1, 2)
    return q, k


def _logits(enc, n: int, c: int, seed: int) -> torch.Tensor:
    """Attention logits ``(H, N, N)`` of fixed seeded content at positions ``c..c+N-1``.

    Content (token vectors ``x`` and projections ``W_Q, W_K``) is the same for
    every ``c``; only positions move. The terms are formed exactly as relpos's
    dense attention forms them: embedding site, rotation, bias and score.
    """
    from relpos.attention import Request
    from relpos.attention.dense import additive_terms, rotated_qk

    x, wq, wk = shift_content(n, seed)
    pos = torch.arange(c, c + n)[None]  # (1, N)
    with torch.no_grad():
        q, k = shift_qk(enc, x, wq, wk, pos)
        v = torch.zeros_like(k)
        scale = enc.attention_scale(_SHIFT_HEAD_DIM)
        req = Request(q, k, v, enc, False, None, 0, pos, pos, False, float(scale))
        q2, k2 = rotated_qk(req)
        logits = scale * (q2 @ k2.transpose(-1, -2))  # (1, H, N, N)
        add = additive_terms(req, q2, k2)
        if add is not None:
            logits = logits + add
    return logits[0].float()


def _attention_maps(model, data: bytes, lock) -> list[torch.Tensor]:
    return [m for m in _attention_cached(model, data, lock)]


_ATTN_CACHE: dict = {}


def _attention_cached(model, data: bytes, lock):
    key = (id(model), data)
    with lock:
        hit = _ATTN_CACHE.get(key)
    if hit is not None:
        return hit
    idx = torch.tensor([list(data)], dtype=torch.long)  # (1, N)
    with torch.no_grad():
        maps = model.attention_maps(idx)
    res = [m[0].float() for m in maps]  # each (H, N, N)
    with lock:
        if len(_ATTN_CACHE) > 32:
            _ATTN_CACHE.clear()
        _ATTN_CACHE[key] = res
    return res
