"""What a sweep leaves behind: ``results.json``, PNG plots, ``report.md``, terminal tables.

Everything here reads the database (:class:`~relpos.compare.store.Store`)
and is pure reporting: it can be rerun at any time (``relpos compare
--report-only``) and never changes results. The format of ``results.json`` is
documented in ``docs/results-format.md``.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import defaultdict
from pathlib import Path

from relpos.compare.fitting import lr_choices
from relpos.report.model import ResultsModel, as_model
from relpos.report.results_doc import (  # re-exported: report.py was their home
    RESULTS_VERSION,
    UNTRAINED,
    label,
    label_order as _order,
    learned_table,
    results_dict,
    untrained_from,
)
from relpos.compare.store import error_line
from relpos.outdir import write_json_atomic  # re-exported: one atomic JSON writer (0644, cleans leftovers)

__all__ = [
    "RESULTS_VERSION",
    "UNTRAINED",
    "label",
    "learned_table",
    "untrained_from",
    "results_dict",
    "write_json_atomic",
    "aggregate",
    "text_tables",
    "markdown_tables",
    "write_report",
]

def _stats(xs: list[float]) -> tuple[float, float, int]:
    xs = [x for x in xs if x is not None]
    if not xs:
        return math.nan, math.nan, 0
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0), len(xs)


def aggregate(results: dict, task: str, field: str, section: str = "metrics", x: str = "eval_len",
              where: dict | None = None) -> dict[str, dict[int, tuple[float, float, int]]]:
    """``label -> {x: (mean, std, n seeds)}`` of one field of one task over seeds."""
    acc: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results["runs"]:
        if r["task"] != task:
            continue
        for m in r[section]:
            if where and any(m.get(k) != v for k, v in where.items()):
                continue
            acc[r["label"]][m[x]].append(m.get(field))
    return {lab: {k: _stats(v) for k, v in sorted(d.items())} for lab, d in acc.items()}


def _tasks(results: dict) -> list[str]:
    order = ["lm", "copy", "copy-hints", "copy-distinct", "reverse", "mqar", "recall", "parity"]
    present = {r["task"] for r in results["runs"]}
    return [t for t in order if t in present] + sorted(present - set(order))


def _train_len(results: dict, task: str) -> int | None:
    for r in results["runs"]:
        if r["task"] == task:
            return r["train_len"]
    return None


def _fmt(mean: float, std: float, n: int, digits: int) -> str:
    if n == 0 or not math.isfinite(mean):
        return "-"
    s = f"{mean:.{digits}f}"
    if n > 1:
        s += f"±{std:.{digits}f}"
    return s


def _fit_cell(results: dict, task: str, lab: str, ok: set[int]) -> str:
    """In-distribution score beside a row: fitted seeds / seeds and the mean validation score at L over all seeds
    (``val``: exact match, or for language modelling bits per byte -- the fit record keeps nats)."""
    rs = [r for r in results["runs"] if r["task"] == task and r["label"] == lab and (r.get("train") or {}).get("fit")]
    if not rs:
        return "-"
    n_ok = sum(id(r) in ok for r in rs)  # the run's gate, and this view at L too
    scores = [s for r in rs if isinstance(s := r["train"]["fit"].get("score"), (int, float))]
    if task == "lm":
        sc = f" (val {statistics.fmean(scores) / math.log(2):.3f} bpb)" if scores else ""
    else:
        sc = f" (val {statistics.fmean(scores):.2f})" if scores else ""
    return f"{n_ok}/{len(rs)}{sc}" + ("" if n_ok else " not fitted")


def shown_runs(results: dict | ResultsModel) -> tuple[dict, frozenset[int]]:
    """What the tables and plots average: ``results`` without the rows that missed the fit gate where another
    seed of the same (task, label) passed it (all seeds where none did), and the ids of the fitted rows
    (:attr:`~relpos.report.model.ResultsModel.shown`)."""
    return as_model(results).shown


def _untrained_cells(results: dict, task: str, section: str, x: str) -> set[tuple[str, int]]:
    """``(label, x)`` whose every row was read through untrained table rows (shown as :data:`UNTRAINED`);
    for position rows, ``x`` is the window length and any flagged bucket of it counts."""
    flagged: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for r in results["runs"]:
        if r["task"] == task:
            for m in r.get(section) or []:
                flagged[(r["label"], m[x])].append(bool(m.get("untrained_rows")))
    if section == "position_loss":
        return {k for k, v in flagged.items() if any(v)}
    return {k for k, v in flagged.items() if v and all(v)}


def far_table(results: dict, task: str = "lm", *, model: ResultsModel | None = None):
    """Far-position numbers of language-modelling runs, over seeds: ``(lengths, ratios, far)`` with
    ``far[label][n] = (mean, sd, seeds)`` of the bits per byte on the last quarter of windows of ``n``
    (:func:`relpos.tasks.lm.far_loss`) and ``ratios[label][k]`` for ``k`` in ``far`` (that quarter at the
    longest length over the same relative positions at the training length), ``window`` (whole windows)
    and ``fixed`` (fixed targets, longest context over the training length); None without position rows.
    ``results``: these rows (the shown ones, for the tables); ``model``: the model they belong to, whose
    far-position losses are read (:meth:`~relpos.report.model.ResultsModel.far_losses`, each computed once)."""
    from relpos.report.ranking import lm_far_losses

    losses = model.far_losses if model is not None else lm_far_losses
    far: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    rat: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    lengths: set[int] = set()
    for r in results["runs"]:
        if r["task"] != task or not r.get("position_loss"):
            continue
        L = r["train_len"]
        ns = sorted({m["eval_len"] for m in r["position_loss"]})
        lengths.update(ns)
        for n in ns:  # the last quarter at n alone: losses of n against itself, never the whole-window fallback
            f, _, is_far = losses(r, n, n)
            far[r["label"]][n].append(f if is_far else None)
        top = ns[-1]
        a, b, is_far = losses(r, L, top)  # far positions only: None where either length has no buckets
        rat[r["label"]]["far"].append(a / b if is_far and b else None)
        win = {m["eval_len"]: m.get("bpb") for m in r.get("metrics") or []}
        fix = {m["context_len"]: m.get("bpb") for m in r.get("fixed_target") or []}
        for k, d, lo in (("window", win, L), ("fixed", fix, L)):
            a, b = d.get(top), d.get(lo)
            rat[r["label"]][k].append(a / b if a is not None and b else None)
    if not lengths:
        return None
    return (sorted(lengths), {lab: {k: _stats(v) for k, v in d.items()} for lab, d in rat.items()},
            {lab: {n: _stats(v) for n, v in sorted(d.items())} for lab, d in far.items()})


def span_table(results: dict, task: str = "lm"):
    """``(lengths, agg)``: ``agg[label][(n, "median" | "max")] = (mean, sd, seeds)`` of the effective span over
    heads at window length ``n``; None when no run has one."""
    acc: dict[str, dict[tuple[int, str], list]] = defaultdict(lambda: defaultdict(list))
    for r in results["runs"]:
        if r["task"] == task and isinstance(r.get("span"), dict):
            cut = untrained_from(r)
            for n, sp in r["span"].items():
                for k in ("median", "max"):  # through untrained table rows: no number (shown n/a)
                    acc[r["label"]][(int(n), k)].append(None if cut is not None and int(n) > cut else sp.get(k))
    if not acc:
        return None
    ns = sorted({n for d in acc.values() for n, _ in d})
    return ns, {lab: {key: _stats(v) for key, v in d.items()} for lab, d in acc.items()}


def _table_rows(model: ResultsModel, task: str):
    """(title, header, rows) tables for a task; each row carries its fit column. Kept in the model: the
    terminal, ``report.md`` and the results page read the same tables."""
    key = ("tables", task)
    if key not in model.kept:
        model.kept[key] = _make_table_rows(model, task)
    return model.kept[key]


def _make_table_rows(model: ResultsModel, task: str):
    results = model.results
    tl = _train_len(results, task)
    tables = []
    shown, ok = model.shown
    if task == "lm":
        for field, section, xname, title in (
            ("bpb", "metrics", "eval_len", f"Language modelling: bits per byte at each evaluation length "
                                           f"(trained at {tl} bytes; lower is better)"),
            ("bpb", "fixed_target", "context_len", "Language modelling, fixed targets: bits per byte on the same "
                                                   "final bytes given contexts of each length"),
        ):
            agg = aggregate(shown, task, field, section, xname)
            xs = sorted({x for d in agg.values() for x in d})
            na = _untrained_cells(shown, task, section, xname)
            rows = [[lab, _fit_cell(results, task, lab, ok)]
                    + [UNTRAINED if (lab, x) in na else _fmt(*agg[lab].get(x, (math.nan, 0, 0)), 3) for x in xs]
                    for lab in _order(agg, results)]
            tables.append((title, ["scheme", "fitted"] + [f"{x}{'*' if tl and x > tl else ''}" for x in xs], rows))
        far = far_table(shown, task, model=model)
        if far:
            xs, ratios, agg = far
            na = _untrained_cells(shown, task, "position_loss", "eval_len")
            rows = [[lab, _fit_cell(results, task, lab, ok)]
                    + [UNTRAINED if (lab, x) in na else _fmt(*agg[lab].get(x, (math.nan, 0, 0)), 3) for x in xs]
                    + [UNTRAINED if (lab, xs[-1]) in na else
                       _fmt(*ratios[lab].get(k, (math.nan, 0, 0)), 2) for k in ("far", "window", "fixed")]
                    for lab in _order(agg, results)]
            tables.append((f"Language modelling, far positions: bits per byte on the last quarter of each window "
                           f"(positions 3n/4 to n-1 of a window of n bytes), and the ratios at {xs[-1]} against "
                           f"{tl} bytes: far positions (the verdict's number), whole windows, fixed targets",
                           ["scheme", "fitted"] + [f"{x}{'*' if tl and x > tl else ''}" for x in xs]
                           + ["far ratio", "window ratio", "fixed-target ratio"], rows))
        spans = span_table(shown, task)
        if spans:
            ns, agg = spans
            na = {(r["label"], n) for r in shown["runs"] if r["task"] == task and (c := untrained_from(r)) is not None
                  for n in ns if n > c}
            rows = [[lab, _fit_cell(results, task, lab, ok)]
                    + [UNTRAINED if (lab, n) in na else _fmt(*agg[lab].get((n, k), (math.nan, 0, 0)), 0)
                       for n in ns for k in ("median", "max")]
                    for lab in _order(agg, results)]
            from relpos.compare.job import SPAN_WINDOWS

            tables.append(("Effective attention span (bytes back that hold 99 % of the attention mass, first key "
                           f"left out), median and maximum over every head, measured on {SPAN_WINDOWS} test "
                           "windows per run",
                           ["scheme", "fitted"] + [f"{n}{'*' if tl and n > tl else ''} {k}" for n in ns
                                                   for k in ("median", "max")], rows))
    else:
        redundant = all(m.get("token_accuracy") == m.get("accuracy") for r in results["runs"] if r["task"] == task
                        for m in r["metrics"])  # single-token answers: per-token = exact match
        fields = [("accuracy", "exact-match accuracy")] + ([] if redundant else
                                                           [("token_accuracy", "per-token accuracy")])
        for field, what in fields:
            agg = aggregate(shown, task, field)
            xs = sorted({x for d in agg.values() for x in d})
            rows = [[lab, _fit_cell(results, task, lab, ok)] + [_fmt(*agg[lab].get(x, (math.nan, 0, 0)), 2) for x in xs]
                    for lab in _order(agg, results)]
            tables.append((f"{task}: {what} by length (trained on lengths <= {tl})",
                           ["scheme", "fitted"] + [f"{x}{'*' if tl and x > tl else ''}" for x in xs], rows))
    return tables


def text_tables(model: ResultsModel) -> str:
    """Plain-text tables for the terminal, from the report's one model (``ResultsModel.from_results(results)``)."""
    _need_model(model, "text_tables")
    out = []
    for task in _tasks(model.results):
        for title, header, rows in _table_rows(model, task):
            widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
            out.append(title)
            out.append("  ".join(h.ljust(widths[i]) if i < 2 else h.rjust(widths[i]) for i, h in enumerate(header)))
            for r in rows:
                out.append("  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(r)))
            out.append("")
    return "\n".join(out)


def _need_model(model, fn: str) -> None:
    if not isinstance(model, ResultsModel):
        raise TypeError(f"{fn}() takes a ResultsModel, got {type(model).__name__}: pass "
                        "ResultsModel.from_results(results)")


def markdown_tables(results: dict | ResultsModel, task: str) -> str:
    out = []
    for title, header, rows in _table_rows(as_model(results), task):
        out.append(f"**{title}**\n")
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|")
        for r in rows:
            out.append("| " + " | ".join(r) + " |")
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------ report


#: How the report names a task's model overrides.
_MODEL_WORDS = {("d_ff", 0): "attention-only (no MLP)", ("init", "fan_in"): "PyTorch fan-in initialisation"}
_EMBED_WORDS = {"sqrt_d": "sqrt(d_model)", "none": "1",
                "auto": "sqrt(d_model) for absolute-position schemes, 1 for the others"}


def _fit_rule(cfg: dict) -> str:
    from relpos.compare.fitting import FitConfig

    fit = FitConfig(**(cfg.get("fit") or {}))
    grid = (f"; every rate of {fit.lr_grid} tried by every scheme, the best by validation kept" if fit.lr_grid
            else "")
    return (f"algorithmic runs fitted when validation exact match at L >= {fit.target} ({fit.criterion('algorithmic')}); "
            f"LM runs fitted when the {fit.criterion('lm')}{grid}")


def corpus_lines(results: dict) -> list[str]:
    """Report lines naming the language-modelling text: hash, sizes per split, what leak removal cut."""
    idents = results.get("corpus")
    if not idents:
        return []
    out = []
    for ident in idents if isinstance(idents, list) else [idents]:
        unit = ident.get("unit", "bytes")
        sp = ident.get("splits") or {}
        size = lambda s: sp.get(s, {}).get("bytes" if unit == "bytes" else "tokens")  # noqa: E731
        cut = "; ".join(f"{name}: {sp[s].get('leaked_windows', 0):,} windows, "
                        f"{sp[s].get('removed_bytes', sp[s].get('removed_tokens', 0)):,} {unit} cut"
                        for s, name in (("val", "validation"), ("test", "test")) if s in sp)
        who = ident.get("name", "?") + (f" of Python {ident['python']}" if ident.get("python") else "")
        out.append(
            f"- language-modelling text: {who}, content sha256 `{ident.get('sha256', '?')[:16]}`; split by document "
            f"into train / validation / test of {size('train') or 0:,} / {size('val') or 0:,} / {size('test') or 0:,} "
            f"{unit} ({' / '.join(str(sp.get(s, {}).get('documents', '?')) for s in ('train', 'val', 'test'))} "
            f"documents); every span of validation and test text covered by a {ident.get('leak_window')}-{unit[:-1]} "
            f"window that occurs in training was cut out ({cut}), so 0 windows leak. Early stopping, the fit gate "
            f"and the learning-rate choice read validation; every number below reads test")
    return out


def write_report(results: dict | ResultsModel, out_dir: str | os.PathLike, plots: list[str], *, command: str = "",
                 wall_seconds: float | None = None) -> Path:
    """``report.md``: configuration, tables, links to the plots, failures (``results``: a results document,
    or its :class:`~relpos.report.model.ResultsModel` when the caller reports it elsewhere too)."""
    model = as_model(results)
    results = model.results
    out_dir = Path(out_dir)
    cfg = results.get("config", {})
    runs = results["runs"]
    train_s = sum((r.get("train") or {}).get("seconds") or 0 for r in runs if not r["variant"]
                  or r["variant"] == "randomized")
    from relpos.report.verdict import verdict_markdown

    lines = [f"# relpos compare: preset `{cfg.get('preset', '?')}`", ""]
    lines += [verdict_markdown(model), "## Setup", ""]
    if command:
        lines += ["Command:", "", f"    {command}", ""]
    lines += [
        f"- configuration fingerprint `{results['fingerprint']}`; {len(runs)} evaluated models "
        f"({len({r['job'] for r in runs})} trainings)",
        *[f"- merged: {', '.join(s['tasks'])} from `{s['folder']}` (fingerprint `{s['fingerprint']}`)"
          for s in results.get("sources") or [] if s.get("tasks")],
        f"- model: d_model {cfg.get('d_model')}, {cfg.get('n_layers')} layers, {cfg.get('n_heads')} heads; "
        f"{cfg.get('steps')} steps of batch {cfg.get('batch_size')}, peak learning rate {cfg.get('lr')}"
        + "".join(f"; {t}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in o.items())
                  for t, o in (cfg.get("task_train") or {}).items())
        + "".join(f"; {t} model: " + ", ".join(_MODEL_WORDS.get((k, v), f"{k.replace('_', ' ')} {v}")
                                               for k, v in o.items())
                  for t, o in (cfg.get("task_model") or {}).items()),
        f"- seeds {sorted({r['seed'] for r in runs}) or cfg.get('seeds')}; RoPE scalings evaluated on the trained RoPE model: "
        f"{', '.join(cfg.get('rope_variants') or []) or 'none'}; randomized positions for: "
        f"{', '.join(cfg.get('randomized') or []) or 'none'}",
        *corpus_lines(results),
        f"- total training time {train_s / 60:.1f} min (summed over runs)"
        + (f"; wall time of the last invocation {wall_seconds / 60:.1f} min" if wall_seconds else ""),
        "",
        f"- fit gate: {_fit_rule(cfg)}; token embeddings scaled by "
        f"{_EMBED_WORDS.get(cfg.get('embed_scale'), '1')}; scheme ranges: "
        f"{'set from the training length (T5 max_distance, Shaw k, FIRE init_L)' if cfg.get('scheme_ranges') == 'train_len' else 'paper defaults'}",
        *[f"- learning rate kept (runs per rate), {line}" for line in lr_choices(runs)],
        "",
        "Labels: `rope-pi`, `rope-ntk`, `rope-dynamic`, `rope-yarn` are the trained `rope` model evaluated with "
        "that scaling (no retraining); `X+rand` was trained with randomized positions and is evaluated at positions "
        "0..N-1, `X+rand-sampled` at sampled positions (mean of several draws). Lengths marked `*` are "
        "longer than anything seen in training. Cells and plots average the seeds that passed the fit gate (every "
        "seed where none did); `±` is their standard deviation. The `fitted` column gives fitted seeds / seeds "
        "and the mean in-distribution score of all seeds (`val`: validation exact match at L, or the LM validation loss at L in bits per byte); a view "
        "evaluated otherwise than validated (`X+rand` at 0..N-1) counts as fitted only if it also passes at L.",
        "",
    ]
    plot_for = {
        "lm": ["lm_loss_vs_length.png", "lm_loss_by_position.png", "lm_fixed_target.png"],
    }
    for task in _tasks(results):
        lines += [f"## {task}", "", markdown_tables(model, task)]
        for p in plot_for.get(task, []):
            if p in plots:
                lines += [f"![{p}]({p})", ""]
    if "accuracy_vs_length.png" in plots:
        lines += ["## Accuracy against length", "", "![accuracy_vs_length.png](accuracy_vs_length.png)", ""]
    if "token_accuracy_vs_length.png" in plots:
        lines += ["![token_accuracy_vs_length.png](token_accuracy_vs_length.png)", ""]
    if "fit_curves.png" in plots:  # every seed of the schemes that do not fit, in words and as a figure
        from relpos.report.fit_curves import fit_curves_markdown

        lines += [x[1:] if x.startswith("### ") else x for x in fit_curves_markdown(results, "fit_curves.png")]
    if results.get("failures"):
        lines += ["## Failed runs (retried on the next invocation)", ""]
        for f in results["failures"]:
            lines.append(f"- `{f['job']}`: {error_line(f['error'])}")
        lines.append("")
    path = out_dir / "report.md"
    from relpos.outdir import write_text_atomic

    write_text_atomic(path, "\n".join(lines))  # never through a link; the temporary file created exclusively
    return path
