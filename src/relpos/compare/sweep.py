"""The ``relpos compare`` sweep: plan the jobs, skip what is done, run the rest, report.

Output folder layout::

    OUT/results.sqlite   every run and measurement (the source of truth)
    OUT/config.json      the configuration of the latest invocation
    OUT/results.json     summary of every stored run (rewritten after each job)
    OUT/report.md        tables and links to the plots
    OUT/*.png            plots
    OUT/models/          each job's trained model (unless --no-keep-models)
    OUT/inflight/        the checkpoints of jobs still training (relpos.compare.inflight; removed when done)

Resuming: jobs already in the database are skipped, so rerunning a command
that was interrupted (Ctrl-C, SIGKILL, a crash) continues where it stopped.
A folder bound to a different configuration fingerprint is refused with a
clear error; ``force=True`` first moves its results into
``OUT/previous-<fingerprint>-<time>/`` (nothing is deleted). A folder whose
runs were trained exactly as asked and that differs only in what is evaluated
(``--passkey``, ``--rope-variants``) keeps its evaluations and takes the new ones
on its saved models, without training (:mod:`relpos.compare.additions`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from relpos.compare.config import ExperimentConfig, config_diff, read_saved_config
from relpos.report.model import ResultsModel
from relpos.report.plots import make_plots
from relpos.report.tables import results_dict, text_tables, write_json_atomic, write_report
from relpos.compare.runner import Job, LocalRunner, SerialRunner
from relpos.compare.store import ConfigMismatchError, Store, error_line, job_seconds, read_store_meta

__all__ = ["plan", "compare", "rebuild_report", "summary_text", "CompareSummary", "prepare_output", "build_results",
           "folder_config", "OUTPUT_FILES"]

#: The folder of the jobs' checkpoints while they train (:mod:`relpos.compare.inflight`).
INFLIGHT = "inflight"
#: Files a sweep writes (moved aside by ``force``, with an ``--hf-model`` evaluation's report: a folder taken over
#: keeps none of the old results beside the new ones).
OUTPUT_FILES = ("results.sqlite", "results.sqlite-wal", "results.sqlite-shm", "results.json", "config.json",
                "report.md", "hf_report.md")


def check_output_files(out: str | Path) -> Path:
    """The ``--out`` rule (:func:`relpos.outdir.check_output_dir`) and, in a folder that exists, every file a
    sweep writes there a regular file and ``models/`` (at any depth) real folders and regular files: nothing
    is followed through a link. Changes nothing.

    Raises:
        relpos.outdir.OutputDirError: naming the path."""
    from relpos.outdir import check_output_dir, refuse_links_below

    real = check_output_dir(out, owns=_owns, what="compare results",
                            files=OUTPUT_FILES + ("results.sqlite-journal",))
    if Path(out).is_dir():
        refuse_links_below(Path(out) / "models", root=out)
        refuse_links_below(Path(out) / INFLIGHT, root=out)
    return real


def plan(cfg: ExperimentConfig) -> list[Job]:
    """Every job of a configuration, in running order (seed, task, scheme)."""
    jobs = []
    for seed in cfg.seeds:
        for task in cfg.tasks:
            for s in cfg.schemes:
                jobs.append(Job(task, s, seed))
            for s in cfg.randomized:
                jobs.append(Job(task, s, seed, randomized=True))
    return jobs


@dataclass
class CompareSummary:
    out_dir: Path
    fingerprint: str
    total: int
    skipped: int
    finished: int = 0
    failed: list[str] = field(default_factory=list)
    interrupted: bool = False
    results: dict | None = None
    #: the report's inputs of ``results``, computed once (:class:`relpos.report.model.ResultsModel`): the plots,
    #: report.md and the terminal tables all read it
    model: ResultsModel | None = None
    plots: list[str] = field(default_factory=list)
    seconds: float = 0.0
    report_only: bool = False

    def __post_init__(self) -> None:
        if self.results is not None and self.model is None:  # a summary built with its results has their model
            self.model = ResultsModel.from_results(self.results)


def _archive(out: Path, old_fp: str | None) -> Path:
    from relpos.outdir import move_aside

    return move_aside(out, old_fp, [*(out / n for n in OUTPUT_FILES if (out / n).exists()), *out.glob("*.png"),
                                    *(out / d for d in ("models", INFLIGHT) if (out / d).is_dir())])


def _folder_meta(out: Path) -> tuple[str | None, dict | None]:
    """``(fingerprint, protocol)`` recorded in an existing folder, read-only
    (the database first, then results.json); ``(None, None)`` if there is none."""
    db = out / "results.sqlite"
    if db.exists():
        # read-only, creates nothing beside the file; refuses a foreign, damaged or special file with the
        # store's own message; an SQLite file still being created by a concurrent compare counts as fresh
        rows = read_store_meta(db) or {}
        if rows.get("fingerprint"):
            try:
                proto = json.loads(rows.get("protocol") or "null")
            except ValueError:
                proto = None
            return rows["fingerprint"], proto
    rj = out / "results.json"
    if rj.exists():
        try:
            return json.loads(rj.read_text()).get("fingerprint") or "unknown", None
        except (ValueError, AttributeError):
            return "unknown", None
    return None, None


def _owns(folder: Path) -> bool:
    """Whether ``folder`` holds ``relpos compare`` output (its database or its config.json)."""
    if (folder / "results.sqlite").is_file():
        return True
    try:
        cj = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(cj, dict) and "fingerprint" in cj and "protocol" in cj


#: The lists that say which jobs an invocation runs: a folder's config.json keeps their union.
_PLAN_LISTS = ("schemes", "tasks", "seeds", "randomized")


def folder_config(cfg: ExperimentConfig, out_dir: str | Path) -> ExperimentConfig:
    """``cfg`` as the record of a folder that already holds runs of its configuration: the schemes, tasks,
    seeds and randomized schemes joined with those of the folder's config.json, earlier ones first, so that
    an invocation that runs a slice (``--schemes fire``) does not narrow what the folder's results.json,
    report and config.json describe (nor their order). A folder of another configuration: ``cfg``."""
    try:
        old = json.loads((Path(out_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return cfg
    if not isinstance(old, dict) or old.get("fingerprint") != cfg.fingerprint():
        return cfg
    joined = {k: list(dict.fromkeys([*old[k], *getattr(cfg, k)])) for k in _PLAN_LISTS if isinstance(old.get(k), list)}
    return cfg.replace(**joined) if joined else cfg


def prepare_output(cfg: ExperimentConfig, out_dir: str | Path, *, force: bool = False,
                   log: Callable[[str], None] = lambda s: None) -> Store:
    """Create or reopen the output folder for ``cfg`` and return its bound store.

    Raises:
        ConfigMismatchError: the folder holds results of another configuration
            (and ``force`` is False); nothing in it is changed.
        relpos.outdir.OutputDirError: ``out_dir`` is a file, a folder with other
            content, or the current folder (nothing is written).
    """
    out = Path(out_dir)
    # a new folder, an empty one, or one with compare's own earlier output -- never a foreign folder
    check_output_files(out)
    fp = cfg.fingerprint()
    old, old_proto = _folder_meta(out) if out.exists() else (None, None)
    if old is not None and old != fp:
        if not force:
            from relpos.tasks.lm import corpus_mismatch

            if (why := corpus_mismatch(old_proto, cfg.protocol())) is not None:  # one line naming both hashes
                raise ConfigMismatchError(f"output folder {out} holds results {why}; nothing was changed: use another "
                                          f"--out folder, or pass --force to move the old results aside")
            diff = config_diff(old_proto, cfg.protocol()) if isinstance(old_proto, dict) else []
            detail = ("; it differs in " + ", ".join(diff[:8]) + (" ..." if len(diff) > 8 else "")) if diff else ""
            raise ConfigMismatchError(
                f"output folder {out} holds results of a different configuration (fingerprint {old}, this "
                f"configuration {fp}){detail}. Nothing was changed. Use another --out folder, or pass --force to "
                f"move the old results into {out}/previous-{old}-<time>/ and start afresh."
            )
        dest = _archive(out, old)
        log(f"moved the results of configuration {old} to {dest}")
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "results.sqlite").exists():
        _refuse_to_shrink(out / "results.json", {"runs": []})  # its runs would be lost: before creating anything
    store = Store(out / "results.sqlite")
    try:
        store.bind(fp, cfg.protocol())
        record = folder_config(cfg, out)
        # before any training; the database is read after results.json, so a compare running beside this one
        # that stores a run in between is never taken for a lost run
        _refuse_to_shrink(out / "results.json", lambda: build_results(store, record))
    except BaseException:
        store.close()
        raise
    write_json_atomic(out / "config.json", {"fingerprint": fp, **record.to_dict(), "protocol": cfg.protocol()})
    return store


def build_results(store: Store, cfg: ExperimentConfig) -> dict:
    fp = cfg.fingerprint()
    return results_dict(cfg.to_dict(), fp, store.runs(fp), store.jobs(fp), store.failures(fp))


class _Progress:
    """One progress bar over jobs; shows which jobs run, their step, and the ETA.

    A bar on a terminal; otherwise one log line per finished job.
    """

    def __init__(self, total: int, initial: int, workers: int, enabled: bool | None,
                 log: Callable[[str], None]) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.log = log
        self.total, self.done, self.workers = total, initial, workers
        self.running: dict[str, str] = {}
        self.durations: list[float] = []
        self.started: dict[str, float] = {}
        self.lock = threading.Lock()
        self.bar = None
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="run", dynamic_ncols=True, file=sys.stderr,
                            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} runs [{elapsed}<{remaining}]{postfix}")
        self._last = 0.0

    def _postfix(self, force: bool = True) -> None:
        if self.bar is None:
            return
        now = time.monotonic()
        if force or now - self._last > 0.5:
            self._last = now
            text = ", ".join(f"{k} {v}".strip() for k, v in self.running.items())
            self.bar.set_postfix_str(f"running: {text}" if text else "", refresh=True)

    def start(self, job: Job) -> None:
        with self.lock:
            self.running[job.key] = ""
            self.started[job.key] = time.perf_counter()
            self._postfix()

    def step(self, key: str, step: int, steps: int) -> None:
        with self.lock:
            if key in self.running:
                self.running[key] = f"step {step}/{steps}"
                self._postfix(force=False)

    def finish(self, job: Job, ok: bool, seconds: float | None, note: str = "") -> None:
        with self.lock:
            self.running.pop(job.key, None)
            t0 = self.started.pop(job.key, None)
            dur = seconds if seconds is not None else (time.perf_counter() - t0 if t0 else None)
            if ok and dur:
                self.durations.append(dur)
            self.done += 1
            if self.bar is not None:
                if not ok:
                    self.bar.write(f"FAILED {job.key}: {note}")
                self.bar.update(1)
                self._postfix()
            else:
                left = self.total - self.done
                eta = ""
                if self.durations and left:
                    mean = sum(self.durations) / len(self.durations)
                    eta = f"; about {(left + self.workers - 1) // self.workers * mean / 60:.1f} min left"
                status = f"done in {dur:.1f} s" if ok and dur else f"FAILED: {note}"
                self.log(f"[{self.done}/{self.total}] {job.key} {status}{eta}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def compare(
    cfg: ExperimentConfig,
    out_dir: str | Path,
    *,
    runner=None,
    force: bool = False,
    progress: bool | None = None,
    plots: bool = True,
    log: Callable[[str], None] | None = None,
    command: str = "",
    keep_models: bool = True,
    reuse: list[str | Path] = (),
    reuse_validated_before: list[str] = (),
) -> CompareSummary:
    """Run (or resume) a sweep and write its results, plots and report.

    Args:
        cfg: the configuration (validated here).
        out_dir: output folder.
        runner: a runner from :mod:`relpos.compare.runner` (default:
            :class:`LocalRunner` with ``cfg.workers`` processes of
            ``cfg.threads`` threads).
        force: move results of a different configuration aside instead of failing.
        progress: progress bar (None: only when stderr is a terminal).
        plots: write PNG plots and the report.
        log: where status lines go (default: stderr).
        command: the command line, recorded in the report.
        keep_models: save each trained model under ``OUT/models/`` (small safetensors
            checkpoints that ``relpos explore --results OUT`` can load).
        reuse: other output folders whose runs are copied where training them here would repeat
            them exactly (see :mod:`relpos.compare.reuse`); read only.
        reuse_validated_before: tasks whose runs in ``reuse`` are copied also when they differ only in how
            they were validated (recorded in each run; see :mod:`relpos.compare.reuse`).

    A folder that trained these very models (equal training part of the protocol) keeps the evaluations it
    holds (``cfg``'s RoPE scalings and passkey settings are joined with them, in place), and evaluations it
    lacks are run on its saved models first (:mod:`relpos.compare.additions`): nothing is trained again.

    Raises:
        ValueError: bad configuration (unknown scheme/task, lengths <= 0, ...),
            or :class:`ConfigMismatchError` for a folder of another configuration.
    """
    t0 = time.perf_counter()
    if log is None:
        def log(s: str) -> None:
            print(s, file=sys.stderr, flush=True)

    cfg.validate()
    out = Path(out_dir)
    check_output_files(out)  # before the additions below read or write anything in the folder
    # evaluation-only additions: a folder that trained these very models keeps its evaluations and
    # takes new ones on its saved models, without training again (relpos.compare.additions)
    from relpos.compare.additions import add_evaluations, join_evaluations

    adds = join_evaluations(cfg, out, force=force)
    for line in (adds.kept if adds is not None else []):
        log(f"{out} also measures {line} (added earlier): kept, and every run trained now measures it too")
    if adds is not None and adds.needed:
        add_evaluations(adds, log=log, threads=cfg.threads)
    fp = cfg.fingerprint()
    store = prepare_output(cfg, out, force=force, log=log)
    cfg.models_dir = str(out.resolve() / "models") if keep_models else None
    cfg.resume_dir = str(out.resolve() / INFLIGHT)  # the jobs' checkpoints while they train (removed when done)
    record = folder_config(cfg, out)  # what the folder holds: this invocation's plan and the earlier ones'
    if cfg.preset == "ci":
        from relpos.report.verdict import SMOKE_NOTE

        log(SMOKE_NOTE)
    try:
        jobs = plan(cfg)
        for folder in reuse:
            from relpos.compare.reuse import reuse_runs

            got = reuse_runs(store, cfg, [j.key for j in jobs], folder, models_dir=cfg.models_dir,
                             validated_before=reuse_validated_before)
            log(f"reused {len(got)} runs from {folder} that would be trained the same here "
                f"({sum(g['cpu_seconds'] for g in got):,.0f} CPU-seconds of training and evaluation saved)")
        done = store.done_jobs(fp)
        pending = [j for j in jobs if j.key not in done]
        summary = CompareSummary(out, fp, total=len(jobs), skipped=len(jobs) - len(pending))
        if summary.skipped:
            log(f"{summary.skipped} of {len(jobs)} runs already in {out}/results.sqlite; skipping them")
        from relpos.compare.inflight import job_folder

        resumed = [j.key for j in pending if job_folder(cfg.resume_dir, fp, j).is_dir()]
        if resumed:
            log(f"{len(resumed)} run(s) go on from their last checkpoint in {out / INFLIGHT}: {', '.join(resumed)}")
        if runner is None:
            runner = LocalRunner(cfg.workers, cfg.threads) if cfg.workers > 1 else SerialRunner(cfg.threads)
        workers = getattr(runner, "workers", 1)
        bar = _Progress(len(jobs), summary.skipped, workers, progress, log)
        lease = store.keep_alive(fp).__enter__()  # job leases: concurrent compares on one folder share the work
        try:
            for job, res, err in runner.run(pending, cfg.to_dict(), on_start=bar.start, on_progress=bar.step,
                                            claim=lambda j: store.claim(fp, j.key)):
                if res is not None:
                    store.write_job(fp, res)
                    summary.finished += 1
                    bar.finish(job, True, job_seconds(res))
                else:
                    store.record_failure(fp, job.key, err or "unknown error")
                    summary.failed.append(job.key)
                    bar.finish(job, False, None, error_line(err))
                write_json_atomic(out / "results.json", build_results(store, record))
        except KeyboardInterrupt:
            summary.interrupted = True
            log("interrupted: finished runs are saved, and the runs in flight from their last checkpoint; rerun "
                "the same command to resume")
        finally:
            bar.close()
            lease.__exit__(None, None, None)
            if not store.leases(fp):  # no other compare is training in this folder: drop the emptied folders
                from relpos.compare.inflight import prune_empty

                prune_empty(out / INFLIGHT)
        results = build_results(store, record)
        write_json_atomic(out / "results.json", results)
        summary.results = results
        summary.model = ResultsModel.from_results(results)  # once: the plots, report.md and the terminal read it
        summary.seconds = time.perf_counter() - t0
        if plots and results["runs"]:
            summary.plots = make_plots(summary.model, out)
            write_report(summary.model, out, summary.plots, command=command, wall_seconds=summary.seconds)
        return summary
    finally:
        store.close()


def _run_id(run) -> tuple:
    if not isinstance(run, dict):
        return (repr(run),)
    return tuple(str(run.get(k)) for k in ("scheme", "variant", "task", "seed", "train_len"))


def _refuse_to_shrink(path: Path, results) -> None:
    """Raise ValueError if ``path`` holds a run that ``results`` (a dict, or a function giving it, called after
    ``path`` is read) would not write (or more runs than it)."""
    try:
        old = json.loads(path.read_text())
        old_runs = (old.get("runs") or []) if isinstance(old, dict) else []
    except (OSError, ValueError, UnicodeDecodeError):
        return
    if not isinstance(old_runs, list):
        return
    if callable(results):
        results = results()
    new_ids = {_run_id(r) for r in results["runs"]}
    lost = [r for r in old_runs if _run_id(r) not in new_ids]
    if lost or len(old_runs) > len(results["runs"]):
        raise ValueError(
            f"{path} holds {len(old_runs)} runs, {len(lost)} of them not in the database (which holds "
            f"{len(results['runs'])}); refusing to overwrite it (was results.sqlite moved, replaced or from "
            f"another run, or results.json extended by hand?). Nothing was changed; move results.json aside "
            f"to let relpos write a new one."
        )


def rebuild_report(out_dir: str | Path, *, plots: bool = True, command: str = "",
                   tasks: list[str] | None = None) -> CompareSummary:
    """Rewrite results.json, the plots and report.md of a folder from its database.

    Runs nothing and changes no result; the configuration is the folder's own
    ``config.json``. ``tasks``: report only these of the folder's tasks (for example the finished ones while
    the next task trains); the other tasks' runs stay in the database.

    Raises:
        FileNotFoundError: the folder has no results database or config.json.
        ValueError: a task in ``tasks`` that is not one of the folder's.
    """
    out = Path(out_dir)
    db, cj = out / "results.sqlite", out / "config.json"
    from relpos.outdir import refuse_special_files

    refuse_special_files(out, OUTPUT_FILES)  # a named pipe would block the reads below
    if not db.exists() or not cj.exists():
        raise FileNotFoundError(f"{out} holds no relpos compare results (results.sqlite and config.json)")
    cfg, fp = read_saved_config(cj)
    if tasks is not None and (bad := sorted(set(tasks) - set(cfg.tasks))):
        raise ValueError(f"--tasks {','.join(bad)}: not a task of {out} (its tasks: {', '.join(cfg.tasks)})")
    keep = (lambda t: True) if tasks is None else (lambda t: t in tasks)  # noqa: E731
    with Store(db, create=False) as st:  # refuses an empty or foreign database, changes nothing in it
        runs, jobs, failures = st.runs(fp), st.jobs(fp), st.failures(fp)
        n = sum(keep(j["task"]) for j in jobs)
    _refuse_to_shrink(out / "results.json", lambda: results_dict(cfg.to_dict(), fp, runs, jobs, failures))
    results = results_dict(cfg.to_dict(), fp, [r for r in runs if keep(r["task"])],
                           [j for j in jobs if keep(j["task"])],
                           [f for f in failures if keep(f["job"].split("/", 1)[0])])
    write_json_atomic(out / "results.json", results)
    summary = CompareSummary(out, fp, total=n, skipped=n, results=results, report_only=True)  # its model, once
    if plots and results["runs"]:
        summary.plots = make_plots(summary.model, out)
        write_report(summary.model, out, summary.plots, command=command)
    return summary


def summary_text(summary: CompareSummary) -> str:
    """Tables plus where the results are."""
    from relpos.report.verdict import verdict_text

    lines = []
    if summary.model is not None and summary.results["runs"]:  # built once where the results were
        lines.append(text_tables(summary.model))
        lines.append(verdict_text(summary.model))
        lines.append("")
    if summary.report_only:
        lines.append(f"{summary.total} training runs in {summary.out_dir}; rewrote results.json"
                     + (", the plots and report.md" if summary.plots else ""))
        return "\n".join(lines)
    lines.append(
        f"{summary.finished} runs finished, {summary.skipped} skipped (already done), {len(summary.failed)} failed"
        f" in {summary.seconds / 60:.1f} min. Results: {summary.out_dir}/results.json"
        + (f", report: {summary.out_dir}/report.md" if summary.plots else "")
    )
    if summary.failed:
        lines.append("failed runs (rerun to retry): " + ", ".join(summary.failed))
    return "\n".join(lines)
