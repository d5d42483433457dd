"""The explorer's JSON API: every number the page shows is computed here, by relpos.

Nothing in this module knows about HTTP. :class:`Explorer` maps a route name and
a dict of string parameters to a JSON-able dict, or raises :class:`ApiError`
with a message the page shows as is. The HTTP server (:mod:`relpos.explorer.server`)
and the static export (:mod:`relpos.explorer.export`) both call it, so a live
page and an exported snapshot show the same numbers.

Routes (all ``GET`` unless noted), one module each under :mod:`relpos.explorer.views`:

* ``info`` -- schemes, limits, loaded results and checkpoints.
* ``offsets`` -- view 1: tokens of a sentence and the relative-position matrix
  from :func:`relpos.distance.relative_positions` (optionally clipped).
* ``bias`` -- view 2: a scheme's score term over ``(i, j)``, its curve against
  the offset and bucket boundaries; for content-dependent schemes the term
  ``enc.score(q, k, ...)`` for the tokens of a typed text.
* ``shift`` -- view 3: attention logits of fixed content at positions
  ``0..N-1`` and ``c..c+N-1`` for an absolute and a relative scheme.
* ``results`` -- view 4: extrapolation curves from a ``relpos compare`` folder
  (``POST`` with a results.json body aggregates an uploaded file instead).
* ``attention`` -- view 5: attention maps of a loaded checkpoint on some text.

Parameter parsing lives in :mod:`~relpos.explorer.params`, content helpers in
:mod:`~relpos.explorer.content`, per-scheme display metadata in
:mod:`~relpos.explorer.adapters`, results files in :mod:`~relpos.explorer.results`
and the byte-bounded caches with the cost check in :mod:`~relpos.explorer.cache`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from relpos.encodings import SCHEMES, get_scheme, scheme_names
from relpos.explorer import adapters
from relpos.explorer.adapters import BiasEntry, bias_entries, option_specs, uses_head_dim
from relpos.explorer.cache import ByteLRU, EncodingCache
from relpos.explorer.content import (CONTENT_DIM, byte_label, content_projections, content_qk, shift_content,
                                     shift_logits, shift_qk, token_vector, tokenize)
from relpos.explorer.errors import ApiError, Limits
from relpos.explorer.results import aggregate_results, check_results, load_results, parse_results, results_model
from relpos.explorer import models as models_mod
from relpos.explorer import trained as trained_mod
from relpos.explorer.views import VIEW_MODULES
from relpos.explorer.views import compose
from relpos.explorer.views.shift import default_pair, kind_of

__all__ = ["ApiError", "Explorer", "Limits", "tokenize", "BIAS_VIEW_SCHEMES", "CONTENT_DIM", "token_vector",
           "content_projections", "content_qk", "BiasEntry", "option_specs", "load_results", "check_results",
           "aggregate_results", "byte_label", "shift_content", "shift_qk", "shift_logits"]

#: The bias view's choices, derived from the registry and each scheme's capabilities.
BIAS_VIEW_SCHEMES: tuple[BiasEntry, ...] = bias_entries()


#: Results that ship with the package (package data), offered in view 4 after the user's own.
BUNDLED_RESULTS = ("explorer/static/results-full.json", "data/results-documented.json", "data/results-full.json")


def bundled_results() -> tuple[str, dict] | None:
    """``(label, results)`` of the documented results (docs/results.md) if the package ships them, else None."""
    from importlib import resources

    root = resources.files("relpos")
    for rel in BUNDLED_RESULTS:
        node = root
        for part in rel.split("/"):
            node = node.joinpath(part)
        try:
            if node.is_file():
                res = parse_results(node.read_bytes(), rel)
                preset = (res.get("config") or {}).get("preset", "?")
                return f"relpos compare --preset {preset} (documented in docs/results.md, bundled)", res
        except (OSError, FileNotFoundError):
            continue
    return None


def _version() -> str:
    from relpos import __version__

    return __version__


def _label(p) -> str:
    path = Path(p)
    return path.parent.name if path.name == "results.json" else path.name or str(path)


@dataclasses.dataclass
class _Checkpoint:
    label: str
    path: str
    model: Any
    config: Any
    shipped: bool = False  # one of the package's trained models (relpos.explorer.models)
    extra: dict = dataclasses.field(default_factory=dict)  # config.json's "extra": trained on, fitted, ...


class Explorer:
    """State (loaded results and checkpoints, caps, caches) and the routes of the JSON API.

    Args:
        results: ``relpos compare`` output folders (or results.json files) to offer.
        checkpoints: checkpoint folders, loaded now through
            :func:`relpos.training.checkpoint.load` (the safe loader; nothing is unpickled).
        limits: size caps, :class:`Limits` by default.

    Raises:
        FileNotFoundError / ValueError: a results folder or checkpoint that
            cannot be read (the message names it, and the field for a results file).
    """

    def __init__(self, results=(), checkpoints=(), limits: Limits | None = None, *, shipped_models: bool = True) -> None:
        self.limits = limits or Limits()
        self.encodings = EncodingCache(self.limits)
        self.attention_cache = ByteLRU(self.limits.attention_cache_bytes)
        self.results: list[tuple[str, dict]] = []
        self._models: dict[int, object] = {}  # results index -> its ResultsModel (or None), built on first use
        for r in results:
            self.results.append((_label(r), load_results(r, max_depth=self.limits.max_json_depth)))
        # documented results that ship with relpos are offered too, labelled as such (view 4 is never empty)
        bundled = bundled_results()
        self.bundled_index: int | None = None
        if bundled is not None:
            self.bundled_index = len(self.results)
            self.results.append(bundled)
        self.checkpoints: list[_Checkpoint] = []
        for c in checkpoints:
            from relpos.training import checkpoint as ckpt
            model, cfg = ckpt.load(c)
            if getattr(cfg, "vocab_size", 256) != 256:  # views 0 and 5 feed it the bytes of a text
                raise ValueError(f"--checkpoint {c}: a model over {cfg.vocab_size} tokens; the explorer reads text "
                                 "as bytes and needs vocab_size 256 (a byte-level language model, e.g. from "
                                 "relpos compare's lm task or relpos train)")
            model.eval()
            self.checkpoints.append(_Checkpoint(_label(c), str(c), model, cfg, extra=models_mod.read_extra(c)))
        # the trained models relpos ships come after the user's own: views 0 and 5 open on one of them ...
        self.default_model: int | None = None
        for d in (models_mod.shipped_model_dirs() if shipped_models else []):
            from relpos.training import checkpoint as ckpt
            model, cfg = ckpt.load(d)
            model.eval()
            if d.name == models_mod.DEFAULT_MODEL or self.default_model is None:
                self.default_model = len(self.checkpoints)
            self.checkpoints.append(_Checkpoint(d.name, str(d), model, cfg, shipped=True,
                                                extra=models_mod.read_extra(d)))
        # ... unless the user gave their own (``relpos explore --checkpoint``): then views 0 and 5 open on the
        # first of those. Without shipped models view 0 opens on initial values (None) and view 5 on checkpoint 0.
        if self.default_model is not None and any(not c.shipped for c in self.checkpoints):
            self.default_model = 0
        self._routes: dict[str, Callable[[dict], dict]] = {"info": self.info}
        for mod in VIEW_MODULES:
            self._routes[mod.ROUTE] = (lambda m: lambda params: m.answer(self, params))(mod)

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
        data = parse_results(body, "the uploaded file", max_depth=self.limits.max_json_depth)
        out = aggregate_results(data, params.get("task") or None, params.get("metric") or None)
        out["source"] = "upload"
        return out

    def results_model(self, index: int):
        """The report's inputs of loaded results ``index`` (:func:`relpos.explorer.results.results_model`),
        built once on first use and kept for every later request."""
        if index not in self._models:
            self._models[index] = results_model(self.results[index][1])
        return self._models[index]

    # ------------------------------------------------------------ the views, by name

    def offsets(self, params: dict) -> dict:
        """View 1 (:mod:`relpos.explorer.views.offsets`)."""
        return self.get("offsets", params)

    def bias(self, params: dict) -> dict:
        """View 2 (:mod:`relpos.explorer.views.bias`)."""
        return self.get("bias", params)

    def shift(self, params: dict) -> dict:
        """View 3 (:mod:`relpos.explorer.views.shift`)."""
        return self.get("shift", params)

    def results_view(self, params: dict) -> dict:
        """View 4 (:mod:`relpos.explorer.views.extrapolation`)."""
        return self.get("results", params)

    def attention(self, params: dict) -> dict:
        """View 5 (:mod:`relpos.explorer.views.attention`)."""
        return self.get("attention", params)

    # ------------------------------------------------------------ info

    def info(self, params: dict) -> dict:
        """Schemes, caps, the bias view's choices with their display metadata, and what is loaded."""
        schemes = []
        for name in SCHEMES:
            avail = name in scheme_names()
            item = {"name": name, "available": avail, "summary": SCHEMES[name].summary}
            if avail:
                try:
                    enc = self.encodings.get(name, (), 2, 8, True, 0, 512)
                    d = enc.describe()
                    item.update(acts_on=d["acts_on"], relative=bool(enc.relative), kind=kind_of(enc), paper=d["paper"],
                                params=d["params"])
                except (ValueError, TypeError) as e:  # a scheme that cannot be built small
                    item.update(available=False, reason=str(e))
            schemes.append(item)
        bias_view = []
        for e in bias_entries():  # read live, so a scheme registered after import is shown too
            item = {"key": e.key, "available": True, "kind": e.kind,
                    "overrides": [{"name": n, "min": lo, "max": hi} for n, lo, hi in e.overrides]}
            if e.kind == "log2":
                item["options"] = [{"name": "m", "type": "int", "default": 8},
                                   {"name": "max_bucket", "type": "int", "default": 0}]
                item["head_dim"] = False
                item["per_head"] = False
                item["summary"] = "log2 buckets of the offset (relpos.distance.log2_bucket)"
            else:
                cls = get_scheme(e.registry)[0]
                item["options"] = option_specs(e.registry, e.hidden, e.defaults)
                item["head_dim"] = uses_head_dim(e.registry)
                item["per_head"] = True
                item["paper"] = cls.paper
                item["causal_only"] = bool(cls.causal_only)
                item["summary"] = adapters.label_of(e.registry)
                built = next((x for x in schemes if x["name"] == e.registry), {})
                item["learned"] = bool(built.get("params", 1))  # False: nothing random to seed
                tr = trained_mod.trained_entry(e.registry)
                item["trained"] = tr is not None
                item["trained_causal"] = trained_mod.shown_causally(tr)
            bias_view.append(item)
        absolute, relative = default_pair()
        return {
            "version": _version(),
            "schemes": schemes,
            "bias_schemes": bias_view,
            "shift_defaults": {"absolute": absolute, "relative": relative},
            "compose_schemes": compose.schemes(),
            "limits": dataclasses.asdict(self.limits),
            "results": [{"index": i, "label": lab, "bundled": i == self.bundled_index,
                         "preset": (res.get("config") or {}).get("preset")} for i, (lab, res) in enumerate(self.results)],
            "checkpoints": [
                {"index": i, "label": c.label, "scheme": getattr(c.config, "scheme", None),
                 "n_layers": getattr(c.config, "n_layers", None), "n_heads": getattr(c.config, "n_heads", None),
                 "max_len": getattr(c.config, "max_len", None), "causal": getattr(c.config, "causal", True),
                 "options": dict(getattr(c.config, "scheme_options", None) or {}),
                 "shipped": c.shipped, "fitted": c.extra.get("fitted"), "trained_on": c.extra.get("trained_on"),
                 "trained_on_parts": models_mod.training_parts(c.extra),
                 "steps": c.extra.get("steps"), "seconds": c.extra.get("seconds"), "val_bpb": c.extra.get("val_bpb"),
                 "recipe": c.extra.get("recipe")}
                for i, c in enumerate(self.checkpoints)
            ],
            # views 0 and 5 open on this checkpoint (the user's first --checkpoint, else the shipped default
            # model), or None (no model ships): view 0 on initial values
            "default_model": self.default_model,
        }
