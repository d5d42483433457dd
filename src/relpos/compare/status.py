"""What a results folder already holds for a plan: done, running, failed or still to run.

``relpos compare --dry-run --out DIR`` prints this next to the plan, so that a
resumable run spread over several sessions (or several machines sharing a
folder) shows how far it has got and the CPU time it has taken so far. Reading
changes no result: the database is opened as
:meth:`relpos.compare.sweep.rebuild_report` opens it.

Example::

    >>> import tempfile
    >>> from relpos.compare.presets import preset
    >>> st = folder_status(preset("ci"), tempfile.mkdtemp() + "/nothing-yet", ["lm/rope/seed0"])
    >>> st.state, st.counts()
    ('empty', {'done': 0, 'running': 0, 'failed': 0, 'to run': 1})
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

__all__ = ["FolderStatus", "JobStatus", "folder_status", "status_lines"]


@dataclasses.dataclass
class JobStatus:
    """One planned training run: ``state`` is ``done``, ``running``, ``failed`` or ``to run``."""

    job: str
    state: str
    fitted: bool | None = None
    cpu_seconds: float | None = None
    detail: str = ""


@dataclasses.dataclass
class FolderStatus:
    """The plan against a folder. ``state``: ``empty`` (nothing stored yet), ``same`` (results of this
    configuration) or ``other`` (results of another configuration, ``folder_fingerprint``)."""

    out: Path
    fingerprint: str
    state: str
    folder_fingerprint: str | None
    jobs: list[JobStatus]

    def counts(self) -> dict[str, int]:
        out = {"done": 0, "running": 0, "failed": 0, "to run": 0}
        for j in self.jobs:
            out[j.state] += 1
        return out

    def cpu_by_task(self) -> dict[str, float]:
        """CPU seconds of the finished runs, by task (plan order)."""
        out: dict[str, float] = {}
        for j in self.jobs:
            if j.state == "done":
                task = j.job.split("/", 1)[0]
                out[task] = out.get(task, 0.0) + (j.cpu_seconds or 0.0)
        return out

    def cpu_left(self) -> tuple[float, list[str]]:
        """Estimated CPU seconds of the runs not yet done (running ones count whole), at the mean of each task's
        finished runs; and the tasks with runs left but none finished (no estimate for them)."""
        done: dict[str, list[float]] = {}
        left: dict[str, int] = {}
        for j in self.jobs:
            task = j.job.split("/", 1)[0]
            if j.state == "done" and j.cpu_seconds is not None:
                done.setdefault(task, []).append(j.cpu_seconds)
            elif j.state != "done":
                left[task] = left.get(task, 0) + 1
        est = sum(n * sum(done[t]) / len(done[t]) for t, n in left.items() if t in done)
        return est, [t for t in left if t not in done]


def folder_status(cfg, out: str | Path, keys: list[str]) -> FolderStatus:
    """Match the planned job ``keys`` of ``cfg`` against what ``out`` holds.

    Raises:
        relpos.compare.store.NotAStoreError / CorruptStoreError: ``out`` holds a
            ``results.sqlite`` that is not a relpos database, or a damaged one (nothing is changed).
    """
    from relpos.compare.store import Store, error_line

    out, fp = Path(out), cfg.fingerprint()
    db = out / "results.sqlite"
    if not db.exists():
        return FolderStatus(out, fp, "empty", None, [JobStatus(k, "to run") for k in keys])
    with Store(db, create=False) as st:
        old = st.get_meta("fingerprint")
        if old is not None and old != fp:
            return FolderStatus(out, fp, "other", old, [JobStatus(k, "to run") for k in keys])
        done = {j["job"]: j for j in st.jobs(fp)}
        running = st.leases(fp)
        failed = {f["job"]: f for f in st.failures(fp)}
    jobs = []
    for k in keys:
        if k in done:
            info = done[k]["info"]
            fit = ((info.get("train") or {}).get("fit") or {})
            cpu = info.get("cpu_seconds")
            jobs.append(JobStatus(k, "done", fit.get("fitted"), float(cpu) if cpu is not None else None))
        elif k in running:
            jobs.append(JobStatus(k, "running", detail=str(running[k]["owner"])))
        elif k in failed:
            jobs.append(JobStatus(k, "failed", detail=error_line(failed[k]["error"])[:120]))
        else:
            jobs.append(JobStatus(k, "to run"))
    return FolderStatus(out, fp, "empty" if old is None else "same", old, jobs)


def _fmt_s(x: float) -> str:
    return f"{x:,.0f}"


def status_lines(st: FolderStatus) -> list[str]:
    """The summary line(s) and one line per job, for ``compare --dry-run``."""
    if st.state == "other":
        head = [f"{st.out} holds results of another configuration (fingerprint {st.folder_fingerprint}): a run "
                f"would stop without changing it; --force moves them aside and starts afresh"]
        return head + [f"  {j.job}" for j in st.jobs]
    c = st.counts()
    cpu = st.cpu_by_task()
    fitted = sum(1 for j in st.jobs if j.state == "done" and j.fitted)
    head = f"{st.out}: {c['done']} of {len(st.jobs)} done ({fitted} fitted)"
    if cpu:
        head += (f", {_fmt_s(sum(cpu.values()))} CPU-seconds so far ("
                 + ", ".join(f"{t} {_fmt_s(s)}" for t, s in cpu.items()) + ")")
    head += f"; {c['running']} running, {c['failed']} failed, {c['to run']} to run"
    est, unknown = st.cpu_left()
    if cpu and c["done"] < len(st.jobs):
        if not unknown:
            head += f"; about {_fmt_s(est)} CPU-seconds left at each task's mean so far"
        elif est:  # a lower bound: the tasks without a finished run add an unknown amount
            head += (f"; at least {_fmt_s(est)} CPU-seconds left (at each task's mean so far) plus "
                     f"{', '.join(unknown)}, which have no finished run to estimate from")
        else:
            head += f"; no estimate of the time left yet ({', '.join(unknown)}: no finished run)"
    width = max((len(j.job) for j in st.jobs), default=0)
    lines = [head]
    for j in st.jobs:
        if j.state == "done":
            what = "fitted" if j.fitted else ("not fitted" if j.fitted is False else "done")
            cpu_s = f", {_fmt_s(j.cpu_seconds)} CPU-s" if j.cpu_seconds is not None else ""
            lines.append(f"  {j.job:{width}}  done: {what}{cpu_s}")
        elif j.state == "to run":
            lines.append(f"  {j.job:{width}}  to run")
        else:
            lines.append(f"  {j.job:{width}}  {j.state} ({j.detail})")
    return lines
