"""Merge ``relpos compare`` folders into one report, task by task.

A sweep is sometimes rerun for one task only (a longer step budget for
``reverse``, say). The rerun has its own configuration fingerprint, so it lives
in its own folder. This module writes one report from several folders: each
task's settings come from the **last** folder given that holds that task, and so
do its runs, joined by the runs of that task in earlier folders whose settings
for it are identical (more seeds or schemes of the same task; where two folders
hold the same training job, the later one wins). The report names, for every
task, the folders and fingerprints it came from.

Only folders that trained the same model can be merged: the settings every task
shares (width, depth, heads, embedding scale, scheme ranges, the fit gate, the
algorithmic lengths, weight decay) must agree, or the merge is refused with the
differences listed. Task-specific settings are taken from the folder the task
came from: ``task_train[task]``, ``task_options[task]``, ``task_model[task]``;
the steps, batch size, learning rate and warmup a task took from the top level
(language modelling); for ``lm`` the LM fit rule ``fit.lm_*``; and for every
task, language modelling included (protocol 3), the learning rates it tried (its
own ``lr_grid``, else ``fit.lr_grid``). The merged configuration writes these into each task's
``task_train`` where they differ from the first folder's.

Nothing in the source folders is changed; the output folder follows the
``--out`` rule of :mod:`relpos.outdir` (new, empty, or an earlier merge).

Command line::

    python -m relpos.compare.merge OUT FOLDER [FOLDER ...] [--no-plots]

Example:
    >>> a = {"fingerprint": "a", "config": {"d_model": 64, "task_train": {"reverse": {"steps": 4000}}},
    ...      "runs": [{"task": "copy", "job": "copy/rope/seed0"}, {"task": "reverse", "job": "reverse/rope/seed0"}]}
    >>> b = {"fingerprint": "b", "config": {"d_model": 64, "task_train": {"reverse": {"steps": 16000}}},
    ...      "runs": [{"task": "reverse", "job": "reverse/rope/seed0"}, {"task": "copy", "job": "copy/rope/seed1"}]}
    >>> m = merge_results([("A", a), ("B", b)])
    >>> [(r["job"], m["fingerprint"]) for r in m["runs"]]  # copy: both folders' seeds; reverse: B's settings
    [('copy/rope/seed0', 'a+b'), ('reverse/rope/seed0', 'a+b'), ('copy/rope/seed1', 'a+b')]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from relpos.compare.config import config_diff
from relpos.outdir import prepare_output_dir, write_json_atomic

__all__ = ["SHARED_KEYS", "TASK_KEYS", "TRAIN_KEYS", "LM_FIT_KEYS", "merge_results", "merge_folders", "main"]

#: Settings of one task, taken from the folder the task came from.
TASK_KEYS = ("task_train", "task_options", "task_model")
#: Training settings a task takes from the top level of its folder's configuration unless its ``task_train``
#: entry overrides them (language modelling, usually): part of the task's settings.
TRAIN_KEYS = ("steps", "batch_size", "lr", "warmup")
#: Fit settings that concern language modelling only: part of the ``lm`` task's settings, not shared.
LM_FIT_KEYS = ("lm_patience", "lm_tol", "lm_schedule", "lm_cooldown")
#: Configuration keys every merged folder must agree on (they change every task's model or gate).
SHARED_KEYS = ("d_model", "n_layers", "n_heads", "weight_decay", "embed_scale", "scheme_ranges", "fit",
               "algorithmic", "lm", "corpus", "random_positions_factor", "scheme_options")

_MANIFEST = "merged.json"


def merge_results(sources: list[tuple[str, dict]]) -> dict:
    """One ``results.json`` document from several: each task from the last source that holds it.

    Args:
        sources: ``(name, results document)`` pairs, in order of precedence (later wins).

    Returns:
        A results document whose ``fingerprint`` joins the sources' (``a+b``) and whose
        ``sources`` lists, per source, its name, fingerprint and the tasks taken from it.

    Raises:
        ValueError: no sources, or sources whose shared settings differ.
    """
    if not sources:
        raise ValueError("merge needs at least one results folder")
    base_name, base = sources[0]
    cfgs = [res.get("config") or {} for _, res in sources]
    base_cfg = cfgs[0]
    for (name, _), cfg in zip(sources[1:], cfgs[1:]):
        diff = config_diff(_shared(base_cfg), _shared(cfg))
        if diff:
            raise ValueError(f"cannot merge {name} into {base_name}: their models or fit gates differ ("
                             + "; ".join(diff) + ")")
    owner: dict[str, int] = {}
    for i, (_, res) in enumerate(sources):
        for r in res.get("runs") or []:
            owner[r["task"]] = i

    def setting(i: int, key: str, task: str):
        return (cfgs[i].get(key) or {}).get(task)

    def settings(i: int, task: str) -> tuple:
        lm_fit = _lm_fit(cfgs[i]) if task == "lm" else None
        return tuple(json.dumps(v, sort_keys=True)
                     for v in [setting(i, k, task) for k in TASK_KEYS]
                     + [lm_fit, _task_grid(cfgs[i], task), _train_of(cfgs[i], task)])

    # folders that contribute each task: its owner and every earlier folder with the same task settings
    contributes = {t: [i for i in range(o + 1) if settings(i, t) == settings(o, t)] for t, o in owner.items()}
    cfg = copy.deepcopy(base_cfg)
    for key in TASK_KEYS:
        cfg[key] = {t: copy.deepcopy(setting(i, key, t)) for t, i in owner.items() if setting(i, key, t) is not None}
    for t, i in owner.items():  # each task's training settings and learning-rate grid travel with the task
        for k, v in _train_of(cfgs[i], t).items():
            if v != base_cfg.get(k):
                cfg["task_train"].setdefault(t, {})[k] = v
        grid = _task_grid(cfgs[i], t)
        if grid:
            cfg["task_train"].setdefault(t, {})["lr_grid"] = grid
    if isinstance(cfg.get("fit"), dict) and "lr_grid" in cfg["fit"]:
        cfg["fit"]["lr_grid"] = []
    if "lm" in owner:  # the LM fit rule of the folder language modelling came from
        cfg["fit"] = {**{k: v for k, v in (cfg.get("fit") or {}).items() if k not in LM_FIT_KEYS},
                      **_lm_fit(cfgs[owner["lm"]])}
    cfg["tasks"] = [t for t in dict.fromkeys(t for c in cfgs for t in c.get("tasks", [])) if t in owner]
    by_job: dict[str, list[dict]] = {}  # job -> its runs (variants), from the last contributing folder
    failures, listed = [], []
    for i, (name, res) in enumerate(sources):
        held = {r["task"] for r in res.get("runs") or []}
        held |= {_task_of(f) for f in res.get("failures") or []}
        # tasks this folder contributes runs (or failures) to; a folder that merely shares a task's
        # settings without holding any of its jobs is not named as a source of that task
        mine = sorted(t for t, js in contributes.items() if i in js and t in held)
        jobs: dict[str, list[dict]] = {}
        for r in res.get("runs") or []:
            if r["task"] in mine:
                jobs.setdefault(r["job"], []).append(r)
        by_job.update(jobs)
        failures = [f for f in failures if f.get("job") not in jobs]
        failures += [f for f in res.get("failures") or [] if _task_of(f) in mine
                     and f.get("job") not in by_job]
        listed.append({"folder": name, "fingerprint": res.get("fingerprint"), "tasks": mine})
    runs = [r for rs in by_job.values() for r in rs]
    fps = list(dict.fromkeys(s["fingerprint"] for s in listed if s["tasks"]))
    return {**{k: v for k, v in base.items() if k not in ("runs", "failures", "config", "fingerprint")},
            "fingerprint": "+".join(str(f) for f in fps), "config": cfg, "runs": runs, "failures": failures,
            "sources": listed}


def _task_of(failure: dict) -> str:
    """The task of a recorded failure (its job is ``task/label/seedN``)."""
    return failure.get("job", "").split("/")[0]


def _lm_fit(cfg: dict) -> dict:
    """A folder's language-modelling fit rule (folders from before ``lm_schedule`` trained on a cosine)."""
    fit = cfg.get("fit") or {}
    return {"lm_schedule": "cosine", **{k: fit[k] for k in LM_FIT_KEYS if k in fit}}


def _train_of(cfg: dict, task: str) -> dict:
    """A task's steps, batch size, peak learning rate and warmup in a folder (its overrides, else the top level)."""
    own = (cfg.get("task_train") or {}).get(task) or {}
    return {k: own.get(k, cfg.get(k)) for k in TRAIN_KEYS}


def _task_grid(cfg: dict, task: str) -> list:
    """The learning rates a task's runs tried, in order: the task's own grid (``task_train``), else the preset's
    (``fit.lr_grid``); ``[]`` for its one rate. Protocol 3: every task, language modelling included."""
    own = ((cfg.get("task_train") or {}).get(task) or {}).get("lr_grid")
    return list(own if own is not None else (cfg.get("fit") or {}).get("lr_grid") or [])


def _shared(cfg: dict) -> dict:
    """The settings of a folder that every task shares (the LM-only fit keys and the grid excluded)."""
    out = {k: copy.deepcopy(cfg.get(k)) for k in SHARED_KEYS}
    if isinstance(out.get("fit"), dict):
        out["fit"] = {k: v for k, v in out["fit"].items() if k not in (*LM_FIT_KEYS, "lr_grid")}
    return out


def _load(folder: Path) -> dict:
    path = folder / "results.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{folder} holds no results.json (run `relpos compare --out {folder} "
                                f"--report-only` to write it from results.sqlite)") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a relpos results file: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list) or "fingerprint" not in data:
        raise ValueError(f"{path} is not a relpos results file (no fingerprint or runs)")
    return data


def _owns(path: Path) -> bool:
    return (path / _MANIFEST).is_file()


def merge_folders(out: str | Path, folders: list[str | Path], *, plots: bool = True) -> dict:
    """Merge compare folders into ``out``: ``results.json``, ``report.md``, plots and a ``merged.json`` manifest.

    Returns:
        The merged results document.
    """
    from relpos.report.plots import make_plots
    from relpos.report.tables import write_report

    srcs = [(str(f), _load(Path(f))) for f in folders]
    merged = merge_results(srcs)
    dest = prepare_output_dir(out, owns=_owns, what="merged compare report", flag="OUT")
    write_json_atomic(dest / _MANIFEST, {"sources": merged["sources"]})
    write_json_atomic(dest / "results.json", merged)
    names = make_plots(merged, dest) if plots and merged["runs"] else []
    write_report(merged, dest, names, command="python -m relpos.compare.merge " + " ".join(
        [str(out)] + [str(f) for f in folders]))
    return merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m relpos.compare.merge",
                                 description="merge relpos compare folders into one report (each task from the "
                                             "last folder that holds it)")
    ap.add_argument("out", help="output folder (new, empty, or an earlier merge)")
    ap.add_argument("folders", nargs="+", help="compare folders, in order of precedence (later wins)")
    ap.add_argument("--no-plots", action="store_true", help="write results.json and report.md only")
    a = ap.parse_args(argv)
    try:
        merged = merge_folders(a.out, a.folders, plots=not a.no_plots)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for s in merged["sources"]:
        print(f"{s['folder']} ({s['fingerprint']}): {', '.join(s['tasks']) or 'nothing taken'}")
    print(f"wrote {a.out}/report.md ({len(merged['runs'])} evaluated models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
