"""The PNG plots of a ``relpos compare`` report: loss and accuracy against length, per seed-averaged label.

Like the tables, the plots average the seeds that passed the fit gate (every seed where none did), see
:attr:`relpos.report.model.ResultsModel.shown`.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import defaultdict
from pathlib import Path

from relpos.report.model import ResultsModel, as_model, results_of
from relpos.report.tables import _order, _stats, _tasks, _train_len, aggregate
from relpos.outdir import save_figure

__all__ = ["make_plots"]


def _style(labels: list[str], results: dict):
    """Colour per scheme (dark tab20 shades first), line style and marker per variant (from the runs, not the label)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    palette = [cmap(i) for i in range(0, 20, 2)] + [cmap(i) for i in range(1, 20, 2)]
    of = {r["label"]: (r["scheme"], r["variant"]) for r in results["runs"]}
    base_order: list[str] = []
    for lab in labels:
        b = of.get(lab, (lab, None))[0]
        if b not in base_order:
            base_order.append(b)
    variant = {"pi": ((0, (4, 2)), "^"), "ntk": ((0, (1, 1)), "v"), "dynamic": ((0, (4, 1, 1, 1)), "s"),
               "yarn": ((0, (6, 2, 1, 2)), "D"), "randomized": ((0, (2, 3)), "x"),
               "randomized-sampled": ((0, (1, 2)), "P")}
    styles = {}
    for lab in labels:
        b, v = of.get(lab, (lab, None))
        ls, marker = variant.get(v, ("--", "o")) if v else ("-", "o")
        styles[lab] = {"color": palette[base_order.index(b) % len(palette)], "linestyle": ls, "marker": marker}
    return styles


def _line_plot(ax, agg, results, styles, *, logx=True, cap: float | None = None):
    """One line per label (mean over seeds, band = std); labels exceeding ``cap`` get no band."""
    for lab in _order(agg, results):
        d = agg[lab]
        xs = [x for x in d if d[x][2] > 0 and math.isfinite(d[x][0])]
        if not xs:
            continue
        ys = [d[x][0] for x in xs]
        ax.plot(xs, ys, ms=3.5, lw=1.4, label=lab, **styles[lab])
        sd = [d[x][1] for x in xs]
        if any(s > 0 for s in sd) and (cap is None or max(ys) <= cap):
            ax.fill_between(xs, [y - s for y, s in zip(ys, sd)], [y + s for y, s in zip(ys, sd)],
                            color=styles[lab]["color"], alpha=0.12, lw=0)
    if logx:
        ax.set_xscale("log", base=2)


def _cap(agg) -> tuple[float, float] | None:
    """``(low, cap)`` y-limits that keep the bulk readable when a few schemes explode, else None."""
    allv = sorted(v[0] for d in agg.values() for v in d.values() if math.isfinite(v[0]))
    if len(allv) < 5:
        return None
    lo, hi = allv[0], allv[-1]
    p80 = allv[int(0.8 * (len(allv) - 1))]
    cap = p80 + 0.6 * (p80 - lo) + 0.05
    return (lo - 0.05 * (cap - lo), cap) if hi > cap else None


def _plot_capped(ax, agg, results, styles, *, logx=True) -> None:
    lim = _cap(agg)
    _line_plot(ax, agg, results, styles, logx=logx, cap=lim[1] if lim else None)
    if lim:
        ax.set_ylim(*lim)
        above = lambda v: math.isfinite(v[0]) and v[0] > lim[1]  # noqa: E731
        whole = sorted(lab for lab, d in agg.items() if d and all(above(v) for v in d.values()))
        part = sorted(lab for lab, d in agg.items() if any(above(v) for v in d.values()) and lab not in whole)
        notes = ([f"above the plot (see the tables): {', '.join(whole)}"] if whole else []) + \
                ([f"partly above the plot: {', '.join(part)}"] if part else [])
        ax.text(0.99, 0.01, "\n".join(notes), transform=ax.transAxes, ha="right", va="bottom", fontsize=7,
                color="dimgrey")


def _smooth(series: dict) -> dict:
    """Moving mean of 3 neighbouring points (the ends use 2): position buckets are noisy text."""
    xs = list(series)
    out = {}
    for i, x in enumerate(xs):
        win = [series[xs[j]] for j in range(max(0, i - 1), min(len(xs), i + 2)) if math.isfinite(series[xs[j]][0])]
        if not win:
            out[x] = series[x]
            continue
        out[x] = (statistics.fmean(w[0] for w in win), statistics.fmean(w[1] for w in win), min(w[2] for w in win))
    return out


def make_plots(results: dict | ResultsModel, out_dir: str | os.PathLike) -> list[str]:
    """Write the PNG plots; returns their file names (relative to ``out_dir``). ``results``: a results document
    or its :class:`~relpos.report.model.ResultsModel`."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    made = []
    from relpos.report.fit_curves import FIT_CURVES_PLOT, fit_curves_figure

    if fit_curves_figure(results_of(results), out_dir / FIT_CURVES_PLOT):  # every seed of the schemes that do not fit
        made.append(FIT_CURVES_PLOT)
    results = as_model(results).shown[0]  # fitted seeds only, as in the tables
    tasks = _tasks(results)
    labels = sorted({r["label"] for r in results["runs"]})
    styles = _style(_order(labels, results), results)

    def save(fig, name):
        fig.tight_layout()
        save_figure(fig, out_dir / name, dpi=100, pil_kwargs={"optimize": True})
        plt.close(fig)
        made.append(name)

    if "lm" in tasks:
        tl = _train_len(results, "lm")

        def lm_plot(agg, name: str, xlabel: str, ylabel: str, title: str, logx: bool = True) -> None:
            fig, ax = plt.subplots(figsize=(9.5, 5))
            _plot_capped(ax, agg, results, styles, logx=logx)
            ax.axvline(tl, color="grey", lw=0.8, ls="--")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
            ax.grid(alpha=0.3)
            save(fig, name)

        lm_plot(aggregate(results, "lm", "bpb"), "lm_loss_vs_length.png",
                "evaluation length (bytes; dashed line: training length)", "bits per byte (test split)",
                "Language modelling (stdlib bytes): bits per byte against evaluation length")

        lens = sorted({m["eval_len"] for r in results["runs"] if r["task"] == "lm" for m in r["position_loss"]})
        if lens:  # one panel per evaluation length: where in the window each scheme's loss goes
            fig, axes = plt.subplots(1, len(lens), figsize=(3.2 * len(lens) + 2.5, 4.2), sharey=True, squeeze=False)
            for ax, n in zip(axes[0], lens):
                acc: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
                for r in results["runs"]:
                    if r["task"] != "lm":
                        continue
                    for m in r["position_loss"]:
                        if m["eval_len"] == n and m["bpb"] is not None:  # untrained table rows: no point
                            acc[r["label"]][(m["bucket_start"] + m["bucket_end"]) / 2].append(m["bpb"])
                pagg = {lab: _smooth({x: _stats(v) for x, v in sorted(d.items())}) for lab, d in acc.items()}
                _plot_capped(ax, pagg, results, styles, logx=False)
                if n > tl:
                    ax.axvline(tl, color="grey", lw=0.8, ls="--")
                ax.axvspan(0.75 * n, n, color="grey", alpha=0.08, lw=0)  # the far quarter
                ax.set_title(f"windows of {n} bytes", fontsize=9)
                ax.set_xlabel("position in the window")
                ax.grid(alpha=0.3)
            axes[0][0].set_ylabel("bits per byte (test; moving mean of 3 buckets)")
            seen: dict[str, object] = {}
            for ax in axes[0]:  # every label once, even one with points in some panels only
                for h, lab in zip(*ax.get_legend_handles_labels()):
                    seen.setdefault(lab, h)
            order = _order(list(seen), results)
            axes[0][-1].legend([seen[k] for k in order], order, fontsize=7, ncol=1, loc="upper left",
                               bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
            fig.suptitle("Language modelling: bits per byte by position at every evaluation length (dashed: training "
                         "length; shaded: the far quarter the verdict reads; the text makes the bumps)", fontsize=9)
            save(fig, "lm_loss_by_position.png")

        fagg = aggregate(results, "lm", "bpb", "fixed_target", "context_len")
        if fagg:
            lm_plot(fagg, "lm_fixed_target.png", "context length (bytes) before the same target bytes",
                    "bits per byte on the fixed targets",
                    "Language modelling: bits per byte on fixed targets given a growing context")

    algo = [t for t in tasks if t != "lm"]
    multi = [t for t in algo if any(m.get("token_accuracy") != m.get("accuracy") for r in results["runs"]
                                    if r["task"] == t for m in r["metrics"])]
    for field, names, fname, ylabel in (
        ("accuracy", algo, "accuracy_vs_length.png", "exact-match accuracy (greedy)"),
        ("token_accuracy", multi, "token_accuracy_vs_length.png", "per-token accuracy (greedy)"),
    ):
        if not names:
            continue
        fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names) + 1.5, 4.2), squeeze=False)
        for ax, task in zip(axes[0], names):
            agg = aggregate(results, task, field)
            _line_plot(ax, agg, results, styles, logx=False)
            tl = _train_len(results, task)
            if tl:
                ax.axvline(tl, color="grey", lw=0.8, ls="--")
            ax.set_ylim(-0.03, 1.03)
            ax.set_yticks([i / 10 for i in range(11)])
            ax.set_title(f"{task}: {'exact match' if field == 'accuracy' else 'per-token accuracy'}")
            ax.set_xlabel("problem length (dashed: longest trained)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(ylabel)
        handles, labs = axes[0][-1].get_legend_handles_labels()
        fig.legend(handles, labs, fontsize=7, loc="center right")
        fig.tight_layout(rect=(0, 0, 1 - 1.4 / (4.2 * len(names) + 1.5), 1))
        save_figure(fig, out_dir / fname, dpi=100, pil_kwargs={"optimize": True})
        plt.close(fig)
        made.append(fname)
    return made
