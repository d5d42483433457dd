"""The inputs of the results page (:mod:`relpos.report.results_page`): read from results folders, or
read back from the files the page ships beside it (so the page is re-derivable from them alone).

Every time on the page is derived from a store (``results.sqlite``) that ships beside it: read back, the
times come from ``<json dir>/<name>/results.sqlite`` (:data:`STORE_DIRS`; ``benchmarks/store_snapshot.py``
puts a folder's store there), never from a figure typed or carried over from an earlier page. Results whose
store does not ship have no time on the page, and it says so."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from relpos.report.fit_curves import FIT_CURVES_PLOT  # the schemes that do not fit: their curves, when made

__all__ = ["PageInputs", "inputs_from_folders", "inputs_from_json_dir", "POSITION_PLOT", "ACCURACY_PLOT",
           "store_dir", "EXTEND_RESULTS", "EXTEND_PLOT", "REAL_CONTEXT"]

#: The per-position plot the page shows (written by ``relpos compare`` into each folder).
POSITION_PLOT = "lm_loss_by_position.png"
#: The algorithmic tasks' accuracy plot, shown when the folder has it.
ACCURACY_PLOT = "accuracy_vs_length.png"
#: The shipped names of an extend run's results and figure, and of the real-checkpoint section's data.
EXTEND_RESULTS, EXTEND_PLOT, REAL_CONTEXT = "extend-results.json", "extend.png", "real-context.json"

@dataclasses.dataclass
class PageInputs:
    """Everything the page reads. ``times``: preset -> {"cpu_seconds", "jobs", "fingerprint"} (and per scale cell)."""

    full: dict | None = None
    default: dict | None = None
    scale_cells: dict[str, dict] = dataclasses.field(default_factory=dict)
    scale_summary: dict | None = None
    times: dict = dataclasses.field(default_factory=dict)
    previous: dict | None = None
    plot: str | None = None  # file name of the per-position plot inside the JSON folder
    accuracy_plot: str | None = None  # and of the algorithmic accuracy plot
    fit_curves_plot: str | None = None  # and of the validation curves of the schemes that do not fit
    extend: dict | None = None  # the results.json of a `relpos extend --from` run (relpos.report.extension)
    extend_plot: str | None = None  # its figure, inside the JSON folder
    real_context: dict | None = None  # a real checkpoint past its context (relpos.report.real_context)
    #: task -> results.json of the unfitted schemes trained again on twice the budget (never ranked;
    #: benchmarks/protocol3_longer.py, one `relpos compare` folder per task)
    longer: dict[str, dict] = dataclasses.field(default_factory=dict)


# ------------------------------------------------------------------ reading


def _results(folder: str | Path | None) -> dict | None:
    if folder is None:
        return None
    f = Path(folder) / "results.json"
    return json.loads(f.read_text()) if f.is_file() else None


def job_interval(job: dict) -> tuple[float, float]:
    """``(start, end)`` in seconds since the epoch of one stored job's own training (every try) and evaluation.

    A job copied by ``--reuse`` keeps the time it was trained (``reused_from.finished_at``), not the copy's.
    """
    from datetime import datetime

    from relpos.compare.store import job_seconds

    info = job.get("info") or {}
    end = datetime.fromisoformat((info.get("reused_from") or {}).get("finished_at") or job["finished_at"]).timestamp()
    return end - job_seconds(info), end


def busy_seconds(jobs: list[dict]) -> float:
    """Wall seconds during which at least one job ran: the union of the jobs' intervals, so the gaps between
    working sessions (a folder filled across several) are not counted, and parallel jobs count once."""
    total, reach = 0.0, -math.inf
    for a, b in sorted(job_interval(j) for j in jobs):
        total += max(0.0, b - max(a, reach))  # the part of this interval past everything before it
        reach = max(reach, b)
    return total


def _read_jobs(db: Path, fingerprint: str) -> list[dict]:
    """The stored jobs of ``fingerprint`` in a store that ships beside the page, read without changing a byte of
    it (opened immutable: no journal-mode switch, no lock files), as :meth:`Store.jobs` gives them."""
    import sqlite3

    from relpos.compare.store import read_jobs, read_store_meta

    read_store_meta(db, create=False)  # a relpos store, or a clear error
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        return read_jobs(conn, fingerprint)
    finally:
        conn.close()


def _cpu(folder: Path, res: dict | None, *, shipped: bool = False) -> dict | None:
    """CPU seconds and job count of a folder's store (every training try and evaluation), or None
    (``shipped``: a store beside the page, read without changing it)."""
    from relpos.compare.scale import _cpu_seconds
    from relpos.compare.store import Store

    if not res or not (folder / "results.sqlite").is_file():
        return None
    if shipped:
        jobs = _read_jobs(folder / "results.sqlite", res["fingerprint"])
        cpu = float(sum((j["info"] or {}).get("cpu_seconds") or 0.0 for j in jobs))
    else:
        with Store(folder / "results.sqlite", create=False) as st:
            jobs = st.jobs(res["fingerprint"])
        cpu = _cpu_seconds(folder, res["fingerprint"])
    wall = busy_seconds(jobs) if jobs else None
    by_task: dict[str, dict] = {}
    for j in jobs:
        t = by_task.setdefault(j["task"], {"jobs": 0, "cpu_seconds": 0.0})
        t["jobs"] += 1
        t["cpu_seconds"] += float((j["info"] or {}).get("cpu_seconds") or 0.0)
    return {"cpu_seconds": cpu, "jobs": len(jobs), "fingerprint": res["fingerprint"],
            "wall_seconds": wall, "by_task": by_task}


def _extend_results(folder: str | Path) -> dict:
    f = Path(folder) / "results.json"
    data = json.loads(f.read_text()) if f.is_file() else None
    if not isinstance(data, dict) or data.get("version") != 2 or not {"meta", "rows"} <= set(data):
        raise ValueError(f"--extend {folder}: no results.json of `relpos extend --from` with every row (version 2); "
                         "rerun `relpos extend` on that folder (it only rewrites the report when every run is in)")
    return data


def _real_context(path: str | Path) -> dict:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not {"protocol", "cells"} <= set(data):
        raise ValueError(f"--real-context {path}: not a JSON written by benchmarks/smollm2_context_table.py --json")
    return {k: v for k, v in data.items() if k != "summary"}  # the page recomputes the summary


def _longer_folders(longer: str | Path) -> dict[str, Path]:
    """task -> folder of ``--longer``'s subfolders (one `relpos compare` folder per task, named after it)."""
    out = {}
    for d in sorted(Path(longer).iterdir()):
        res = _results(d) if d.is_dir() and not d.is_symlink() else None
        if res is None:
            continue
        tasks = sorted({r["task"] for r in res["runs"]})
        if tasks != [d.name]:
            raise ValueError(f"--longer {longer}: {d.name}/ holds runs of {', '.join(tasks) or 'no task'}; each "
                             "subfolder is the longer runs of the one task it is named after")
        out[d.name] = d
    if not out:
        raise ValueError(f"--longer {longer}: no subfolder with a results.json (benchmarks/protocol3_longer.py "
                         "writes one per task)")
    return out


def inputs_from_folders(full=None, scale=None, default=None, previous: dict | None = None, *, extend=None,
                        real_context=None, longer=None) -> tuple[PageInputs, dict]:
    """The page's inputs from results folders, and ``{name in the JSON folder: source path, bytes or object}``
    to ship.

    ``extend``: an extend run's ``--out`` folder; ``real_context``: the JSON of
    ``benchmarks/smollm2_context_table.py``; ``longer``: the folder of ``benchmarks/protocol3_longer.py`` (the
    unfitted schemes on twice the budget; the curves figure is then drawn here with them). A source not given
    is not shipped (what the JSON folder already holds for it stays, and the page reads it)."""
    from relpos.compare.scale import cell_dir, cells, scale_summary

    inp, ship = PageInputs(previous=previous), {}
    if longer is not None:
        for task, d in _longer_folders(longer).items():
            inp.longer[task] = json.loads((d / "results.json").read_text())
            ship[f"longer-{task}-results.json"] = d / "results.json"
            if (t := _cpu(d, inp.longer[task])) is not None:
                inp.times[f"longer/{task}"] = t
    if extend is not None:
        inp.extend = _extend_results(extend)
        ship[EXTEND_RESULTS] = Path(extend) / "results.json"  # copied byte for byte (compact)
        if (Path(extend) / "extend.png").is_file():
            inp.extend_plot = EXTEND_PLOT
            ship[EXTEND_PLOT] = Path(extend) / "extend.png"
    if real_context is not None:
        inp.real_context = _real_context(real_context)
        ship[REAL_CONTEXT] = inp.real_context
    for name, folder in (("full", full), ("default", default)):
        res = _results(folder)
        if res is None:
            continue
        setattr(inp, name, res)
        ship[f"{name}-results.json"] = Path(folder) / "results.json"
        if (t := _cpu(Path(folder), res)) is not None:
            inp.times[name] = t
    for attr, name in (("plot", POSITION_PLOT), ("accuracy_plot", ACCURACY_PLOT),
                       ("fit_curves_plot", FIT_CURVES_PLOT)):
        if inp.full is not None and (Path(full) / name).is_file():
            setattr(inp, attr, f"full-{name}")
            ship[f"full-{name}"] = Path(full) / name
    if inp.full is not None and inp.longer:  # the curves figure with the longer runs drawn in
        import tempfile

        from relpos.report.fit_curves import fit_curves_figure

        with tempfile.TemporaryDirectory() as tmp:
            if fit_curves_figure(inp.full, Path(tmp) / FIT_CURVES_PLOT, inp.longer):
                inp.fit_curves_plot = f"full-{FIT_CURVES_PLOT}"
                ship[inp.fit_curves_plot] = (Path(tmp) / FIT_CURVES_PLOT).read_bytes()
    if scale is not None and Path(scale).is_dir():
        for d, L in cells():
            cd = cell_dir(scale, d, L)
            res = _results(cd)
            if res is None:
                continue
            inp.scale_cells[cd.name] = res
            ship[f"scale-{cd.name}-results.json"] = cd / "results.json"
            if (t := _cpu(cd, res)) is not None:
                inp.times[f"scale/{cd.name}"] = t
        if inp.scale_cells:
            inp.scale_summary = json.loads(json.dumps(scale_summary(scale)))  # tuples as lists, as when read back
            ship["scale-summary.json"] = inp.scale_summary
    ship["times.json"] = inp.times
    if previous is not None:
        ship["protocol2-verdict.json"] = previous
    return inp, ship


def store_dir(json_dir: str | Path, key: str) -> Path:
    """Where the store behind the results ``key`` (``full``, ``default``, ``scale/<cell>``) ships in the JSON
    folder: ``<json dir>/full``, ``<json dir>/default``, ``<json dir>/scale-<cell>``."""
    return Path(json_dir) / key.replace("/", "-")


def inputs_from_json_dir(json_dir: str | Path) -> PageInputs:
    """The page's inputs from the files :func:`write_page` shipped (the page re-derived from them alone)."""
    d = Path(json_dir)
    read = lambda n: json.loads((d / n).read_text()) if (d / n).is_file() else None  # noqa: E731
    cells = {}
    for f in sorted(d.glob("scale-*-results.json")):
        cells[f.name[len("scale-"):-len("-results.json")]] = json.loads(f.read_text())
    from relpos.compare.scale import cell_dir, cells as all_cells

    order = [cell_dir("", a, b).name for a, b in all_cells()]
    cells = {k: cells[k] for k in sorted(cells, key=lambda k: order.index(k) if k in order else len(order))}
    full, default = read("full-results.json"), read("default-results.json")
    longer = {f.name[len("longer-"):-len("-results.json")]: json.loads(f.read_text())
              for f in sorted(d.glob("longer-*-results.json"))}
    times = {}  # from the stores shipped here only (times.json records them; the page re-derives them)
    for key, res in (("full", full), ("default", default), *((f"scale/{k}", v) for k, v in cells.items()),
                     *((f"longer/{k}", v) for k, v in longer.items())):
        if res and (t := _cpu(store_dir(d, key), res, shipped=True)) is not None:
            times[key] = t
    return PageInputs(full=full, default=default, scale_cells=cells,
                      scale_summary=read("scale-summary.json"), times=times,
                      previous=read("protocol2-verdict.json"),
                      plot=f"full-{POSITION_PLOT}" if (d / f"full-{POSITION_PLOT}").is_file() else None,
                      accuracy_plot=f"full-{ACCURACY_PLOT}" if (d / f"full-{ACCURACY_PLOT}").is_file() else None,
                      fit_curves_plot=f"full-{FIT_CURVES_PLOT}" if (d / f"full-{FIT_CURVES_PLOT}").is_file() else None,
                      extend=read(EXTEND_RESULTS), extend_plot=EXTEND_PLOT if (d / EXTEND_PLOT).is_file() else None,
                      real_context=read(REAL_CONTEXT), longer=longer)
