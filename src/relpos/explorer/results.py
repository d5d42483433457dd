"""View 4's data: reading, validating and aggregating ``relpos compare`` results.json files.

The format is documented in docs/results-format.md. :func:`parse_results`
reads untrusted bytes (an upload, or a file given to ``relpos explore
--results``) with bounded nesting and bounded numbers, and :func:`check_results`
holds every field the explorer reads to that format, so a hostile or broken
file gives one :class:`ApiError` that names the field (``runs[3].seed``),
never a crash.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from relpos.explorer.errors import ApiError
from relpos.explorer.params import sig
from relpos.validation import MAX_POSITIONS

__all__ = ["METRICS", "parse_results", "check_results", "load_results", "aggregate_results", "results_model"]

METRICS = ("bpb", "loss", "ppl", "accuracy", "token_accuracy")

#: Longest integer literal accepted (a seed or a count never needs more digits).
MAX_INT_DIGITS = 19
#: Longest float literal accepted.
MAX_FLOAT_CHARS = 40
#: Longest string the explorer reads from a results file (scheme, label, task, ...).
MAX_NAME_CHARS = 200
#: Largest results.json ``relpos explore --results`` reads.
MAX_FILE_BYTES = 256 * 1024 * 1024

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


def _bad(where: str, field: str, msg: str) -> ApiError:
    return ApiError(f"{where}: {field} {msg}", field=field)


def _depth(raw: bytes) -> int:
    """Deepest nesting of ``[`` / ``{`` in JSON text (strings removed first)."""
    skeleton = _STRING.sub(b"", raw)
    depth = deepest = 0
    for ch in skeleton.translate(None, delete=bytes(set(range(256)) - set(b"[]{}"))):
        if ch in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def _parse_int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer with {len(s)} digits (at most {MAX_INT_DIGITS})")
    return int(s)


def _parse_float(s: str) -> float:
    if len(s) > MAX_FLOAT_CHARS:
        raise ValueError(f"a number written with {len(s)} characters (at most {MAX_FLOAT_CHARS})")
    v = float(s)
    if not math.isfinite(v):
        raise ValueError(f"the number {s[:20]}... is outside the float range")
    return v


def _parse_constant(s: str):
    raise ValueError(f"{s} is not JSON (write null for a missing number)")


def parse_results(raw: bytes, where: str = "results.json", *, max_depth: int = 32) -> dict:
    """Parse and validate results.json bytes.

    Raises:
        ApiError: not UTF-8, not JSON, nested deeper than ``max_depth``, a number
            too long or out of range, or a field that breaks the documented format.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(f"{where} is not UTF-8 text", field="results") from None
    depth = _depth(raw)
    if depth > max_depth:
        raise ApiError(f"{where} is nested {depth} levels deep; a results.json is at most {max_depth}",
                       field="results", code="too_large", limit=max_depth, unit="levels")
    try:
        data = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except json.JSONDecodeError as e:
        raise ApiError(f"{where} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
                       field="results") from None
    except (ValueError, RecursionError, OverflowError) as e:
        raise ApiError(f"{where} cannot be read: {str(e)[:200]}", field="results") from None
    check_results(data, where)
    return data


def _type(v: Any) -> str:
    return "null" if v is None else "a list" if isinstance(v, list) else "an object" if isinstance(v, dict) \
        else "a boolean" if isinstance(v, bool) else type(v).__name__


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_int(where, obj, key, field, *, lo=None, hi=None, optional=True, nullable=True):
    if key not in obj:
        if optional:
            return
        raise _bad(where, field, "is missing")
    v = obj[key]
    if v is None and nullable:
        return
    if not _is_int(v):
        raise _bad(where, field, f"must be an integer, got {_type(v)}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _bad(where, field, f"must be between {lo} and {hi}, got {v}")


def _check_num(where, obj, key, field):
    v = obj.get(key)
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(where, field, f"must be a number or null, got {_type(v)}")
    if isinstance(v, int) and abs(v) > 2**63:
        raise _bad(where, field, "is out of range")


def _check_str(where, obj, key, field, *, optional=True, nullable=True):
    if key not in obj:
        if optional:
            return
        raise _bad(where, field, "is missing")
    v = obj[key]
    if v is None and nullable:
        return
    if not isinstance(v, str):
        raise _bad(where, field, f"must be a string, got {_type(v)}")
    if len(v) > MAX_NAME_CHARS:
        raise _bad(where, field, f"is {len(v)} characters long (at most {MAX_NAME_CHARS})")


def _check_list_of_objects(where, obj, key, field) -> list:
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise _bad(where, field, f"must be a list, got {_type(v)}")
    for n, item in enumerate(v):
        if not isinstance(item, dict):
            raise _bad(where, f"{field}[{n}]", f"must be an object, got {_type(item)}")
    return v


def check_results(data: Any, where: str = "results.json") -> None:
    """Raise :class:`ApiError` naming the field unless ``data`` follows docs/results-format.md."""
    if not isinstance(data, dict):
        raise ApiError(f"{where} is not a relpos compare results.json (the top level must be an object, "
                       f"got {_type(data)})", field="results")
    if not isinstance(data.get("runs"), list):
        raise ApiError(f"{where} is not a relpos compare results.json (no 'runs' list)", field="runs")
    version = data.get("version", 1)
    if not _is_int(version) or version != 1:
        raise ApiError(f"{where} has version {str(version)[:20]!r}; this explorer reads version 1", field="version")
    _check_str(where, data, "fingerprint", "fingerprint")
    if "config" in data and data["config"] is not None and not isinstance(data["config"], dict):
        raise _bad(where, "config", f"must be an object, got {_type(data['config'])}")
    for n, f in enumerate(_check_list_of_objects(where, data, "failures", "failures")):
        _check_str(where, f, "job", f"failures[{n}].job")
    for n, run in enumerate(data["runs"]):
        p = f"runs[{n}]"
        if not isinstance(run, dict):
            raise _bad(where, p, f"must be an object, got {_type(run)}")
        _check_str(where, run, "scheme", p + ".scheme", optional=False, nullable=False)
        for key in ("variant", "label", "task", "job"):
            _check_str(where, run, key, f"{p}.{key}")
        _check_int(where, run, "seed", p + ".seed", lo=-(2**63), hi=2**63 - 1)
        _check_int(where, run, "train_len", p + ".train_len", lo=1, hi=MAX_POSITIONS)
        if not isinstance(run.get("metrics"), list):
            raise _bad(where, p + ".metrics", f"must be a list, got {_type(run.get('metrics'))}")
        for k, m in enumerate(_check_list_of_objects(where, run, "metrics", p + ".metrics")):
            q = f"{p}.metrics[{k}]"
            _check_int(where, m, "eval_len", q + ".eval_len", lo=1, hi=MAX_POSITIONS, optional=False, nullable=False)
            for key in METRICS:
                _check_num(where, m, key, f"{q}.{key}")
            _check_int(where, m, "count", q + ".count", lo=0)
        for k, m in enumerate(_check_list_of_objects(where, run, "position_loss", p + ".position_loss")):
            q = f"{p}.position_loss[{k}]"
            for key in ("eval_len", "bucket_start", "bucket_end"):
                _check_int(where, m, key, f"{q}.{key}", lo=0, hi=MAX_POSITIONS)
            _check_num(where, m, "bpb", q + ".bpb")
        for k, m in enumerate(_check_list_of_objects(where, run, "fixed_target", p + ".fixed_target")):
            q = f"{p}.fixed_target[{k}]"
            _check_int(where, m, "context_len", q + ".context_len", lo=0, hi=MAX_POSITIONS)
            for key in ("bpb", "loss"):
                _check_num(where, m, key, f"{q}.{key}")
        if "train" in run and run["train"] is not None and not isinstance(run["train"], dict):
            raise _bad(where, p + ".train", f"must be an object, got {_type(run['train'])}")


def load_results(path: str | Path, *, max_depth: int = 32) -> dict:
    """Read a ``relpos compare`` results.json (a folder holding one, or the file itself).

    Raises:
        FileNotFoundError: no results.json there.
        ApiError (a ValueError): the file breaks the format; the message names the file and field.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    if not p.is_file():
        raise FileNotFoundError(f"no results.json at {p}")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ApiError(f"{p} is {size:,} bytes; the explorer reads at most {MAX_FILE_BYTES:,}", field="results")
    with p.open("rb") as f:
        raw = f.read(MAX_FILE_BYTES + 1)
    return parse_results(raw, str(p), max_depth=max_depth)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def results_model(data: dict):
    """The report's inputs of a checked results document (:class:`relpos.report.model.ResultsModel`: the fit
    gate of every row, computed once), or None when a row is too malformed for the gate over all rows (each
    row's gate is then read on its own, as :func:`_row_fitted` always did)."""
    from relpos.report.model import ResultsModel

    try:
        return ResultsModel.from_results(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def aggregate_results(data: dict, task: str | None, metric: str | None, *, model=None) -> dict:
    """Mean, min and max over seeds of one metric, per (scheme, variant), against eval_len (``model``: the
    :func:`results_model` of ``data`` when the caller keeps it; built here otherwise)."""
    runs = data["runs"]
    tasks = sorted({str(r.get("task") or "lm") for r in runs})
    if not tasks:
        return {"tasks": [], "metrics": [], "task": None, "metric": None, "series": [], "train_lens": []}
    if task is None:
        task = "lm" if "lm" in tasks else tasks[0]
    if task not in tasks:
        raise ApiError(f"task must be one of {', '.join(tasks)}; got {task[:40]!r}", field="task")
    truns = [r for r in runs if str(r.get("task") or "lm") == task]
    model = model if model is not None and model.results is data else results_model(data)
    have = [m for m in METRICS if any(_finite(x.get(m)) for r in truns for x in r["metrics"])]
    if metric is None:
        metric = have[0] if have else METRICS[0]
    if metric not in METRICS:
        raise ApiError(f"metric must be one of {', '.join(METRICS)}; got {metric[:40]!r}", field="metric")
    groups: dict[str, dict] = {}
    for r in truns:
        variant = r.get("variant")
        label = r.get("label") if isinstance(r.get("label"), str) and r.get("label") else (
            r["scheme"] if not variant else f"{r['scheme']} ({variant})")
        g = groups.setdefault(label, {"values": {}, "train_lens": set(), "seeds": set(), "scheme": r["scheme"],
                                      "variant": variant, "fitted": []})
        g["fitted"].append(_row_fitted(r, truns, model))
        if _is_int(r.get("train_len")):
            g["train_lens"].add(r["train_len"])
        g["seeds"].add(r.get("seed"))
        for x in r["metrics"]:
            v = x.get(metric)
            if _finite(v):
                g["values"].setdefault(x["eval_len"], []).append(float(v))
    series = []
    for label, g in groups.items():
        pts = []
        for L, vs in sorted(g["values"].items()):
            mean = math.fsum(v / len(vs) for v in vs)  # cannot overflow: |mean| <= max |v|
            pts.append({"eval_len": L, "mean": sig(mean, 6), "min": sig(min(vs), 6), "max": sig(max(vs), 6),
                        "n": len(vs)})
        known = [f for f in g["fitted"] if f is not None]
        series.append({"label": label, "scheme": g["scheme"], "variant": g["variant"], "points": pts,
                       "train_lens": sorted(g["train_lens"]), "seeds": len(g["seeds"]),
                       # fitted: every row of the line passed the fit gate; False: some did not; None: not recorded
                       "fitted": (all(known) if known else None), "fitted_rows": sum(bool(f) for f in known),
                       "rows": len(g["fitted"]), "family": _family(g["scheme"], g["variant"])})
    series.sort(key=lambda s: s["label"])
    train_lens = sorted({L for s in series for L in s["train_lens"]})
    return {"tasks": tasks, "metrics": have, "task": task, "metric": metric, "series": series,
            "train_lens": train_lens, "unit": length_unit(task, data.get("config") or {})}


def length_unit(task: str, config: dict) -> str:
    """What a task's lengths count: ``bytes`` (byte-level language modelling), ``tokens`` (with a
    tokenizer), ``pairs`` (key-value pairs: MQAR) or ``symbols`` (the other algorithmic tasks). Asks the task
    class (``length_unit``) first, then its kind."""
    try:
        from relpos.tasks import TASKS

        cls = TASKS.get(task)
    except (ImportError, AttributeError):
        cls = None
    unit = getattr(cls, "length_unit", None)
    if isinstance(unit, str):
        return unit
    if task == "lm" or getattr(cls, "kind", None) == "lm":
        lm = config.get("lm") if isinstance(config.get("lm"), dict) else {}
        return "tokens" if lm.get("tokenizer") else "bytes"
    if task == "mqar":
        return "pairs"
    return "symbols"


def _row_fitted(run: dict, runs: list, model=None) -> bool | None:
    """The fit gate of one results row (:func:`relpos.compare.fitting.view_fitted`; read from ``model`` when
    given), None if not recorded."""
    fit = (run.get("train") or {}).get("fit") if isinstance(run.get("train"), dict) else None
    if not isinstance(fit, dict) or "fitted" not in fit:
        return None
    if model is not None:
        return id(run) in model.ok
    try:
        from relpos.compare.fitting import view_fitted

        return bool(view_fitted(run, runs))
    except (KeyError, TypeError, ValueError):
        return bool(fit.get("fitted"))


def _family(scheme: str, variant) -> str:
    """``rope-scaling`` (a context-extension scaling or randomized positions of a rotary model), ``absolute``,
    ``none`` (no position), ``relative`` or ``mixed`` -- from the scheme's capabilities."""
    try:
        from relpos.encodings import get_scheme

        cls, _ = get_scheme(scheme)
    except (KeyError, ValueError):
        return "other"
    if variant:  # a view of a trained model: a scaling of its positions, or randomized positions
        return "rope-scaling" if "qk" in cls.acts_on else "relative"
    if not cls.acts_on:
        return "none"
    if "embedding" in cls.acts_on and not cls.relative:
        return "absolute"
    return "relative" if cls.relative else "mixed"
