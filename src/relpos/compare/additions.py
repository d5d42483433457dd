"""Evaluation-only additions: new evaluations of a finished ``relpos compare`` folder run on its saved models.

A folder's fingerprint covers everything that decides its numbers, its evaluations included, so adding
``--passkey N`` or a RoPE scaling (``--rope-variants``) to a finished folder changes the fingerprint although
no model would be trained differently (before this, a default folder plus ``--passkey`` retrained every model,
5.6 minutes). The protocol splits in two (:func:`relpos.compare.settings.split_protocol`): the
**training** part (data, model, training, tuning, seeds come with the jobs) and the **evaluation** part
(:data:`~relpos.compare.settings.EVALUATION_KEYS`). When an invocation's training part equals the
folder's:

* the folder's evaluations are joined to the invocation's (:func:`join_evaluations`): what a folder measured
  stays measured, and every run the invocation trains gets the joined evaluations, so the folder stays one
  configuration. An unchanged command line therefore keeps its fingerprint and resumes as before;
* what is new (a RoPE scaling the folder lacks, or passkey retrieval where it had none) is evaluated on each
  finished job's saved model (``OUT/models/...``, :func:`relpos.training.checkpoint.load`) with the very code a fresh
  run uses (:func:`relpos.compare.job.evaluate_additions`), and stored with the folder's runs; the folder
  then carries the joined configuration's fingerprint and protocol (its rows are re-keyed in one
  transaction; ``meta.evaluations_added`` lists every addition: when, from which fingerprint, what, how many
  jobs, CPU time). Each added run records the evaluation settings it used (``evaluation``) and ``added``.

Nothing is trained. A job whose saved model is missing (the folder was made with ``--no-keep-models``) stops
the addition before anything is changed, with one line naming the fix (``--force`` moves the old results
aside and trains again). Two passkey settings cannot be joined (the folder's passkey runs would be of
another kind than the new ones): refused the same way.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import json
import time
from pathlib import Path
from typing import Callable

from relpos.compare.settings import split_protocol

__all__ = ["Additions", "join_evaluations", "add_evaluations", "missing_line"]


@dataclasses.dataclass
class Additions:
    """What an invocation adds to a folder whose training part it shares.

    Attributes:
        folder: the output folder.
        old_fingerprint, old_protocol: what the folder is bound to now.
        cfg: the invocation's configuration with the folder's evaluations joined (what the folder will hold).
        variants: RoPE scalings the folder lacks.
        passkey: whether passkey retrieval is new to the folder.
        kept: the folder's evaluations the invocation did not ask for (kept), as text.
        jobs: the folder's finished jobs that the additions apply to: ``{"job", "scheme", "task", "seed",
            "randomized", "checkpoint"}`` (``checkpoint``: the saved model's path relative to the folder, or None).
    """

    folder: Path
    old_fingerprint: str
    old_protocol: dict
    cfg: object
    variants: list[str]
    passkey: bool
    kept: list[str]
    jobs: list[dict]

    @property
    def needed(self) -> bool:
        """Whether the folder's fingerprint changes (something is added)."""
        return self.old_fingerprint != self.cfg.fingerprint()

    def what(self) -> str:
        parts = ([f"passkey {self.cfg.passkey}"] if self.passkey else []) + (
            [f"RoPE scaling{'s' if len(self.variants) > 1 else ''} {', '.join(self.variants)}"] if self.variants else [])
        return " and ".join(parts) or "nothing"

    def missing(self) -> list[str]:
        """The jobs whose saved model is not in the folder."""
        return [j["job"] for j in self.jobs if not _model_dir(self.folder, j.get("checkpoint"))]


def _model_dir(folder: Path, rel) -> Path | None:
    if not isinstance(rel, str) or not rel:
        return None
    p = folder / rel
    return p if (p / "config.json").is_file() else None


def _offers_scalings(scheme: str) -> bool:
    from relpos.encodings import get_scheme

    cls, _ = get_scheme(scheme)
    return bool(tuple(getattr(cls, "scalings", None) or ()))


def _jobs_needing(store, fp: str, variants: list[str], passkey: bool) -> list[dict]:
    """The finished jobs an addition applies to: language models for new passkey runs; rotary models trained
    at plain positions for new scalings."""
    out = []
    for j in store.jobs(fp):
        lm, rotary = j["task"] == "lm", (not j["randomized"]) and _offers_scalings(j["scheme"])
        if (passkey and lm) or (variants and rotary):
            train = j["info"].get("train") or {}
            out.append({k: j[k] for k in ("job", "scheme", "task", "seed", "randomized")}
                       | {"checkpoint": train.get("checkpoint"), "info": {"train": {
                           k: train.get(k) for k in ("checkpoint", "checkpoint_sha256")}}})
    return out


def join_evaluations(cfg, out_dir, *, force: bool = False) -> Additions | None:
    """Join the evaluations of the folder ``out_dir`` to ``cfg`` (in place) when both train the same models.

    Returns:
        None when there is nothing to join: ``force``, no folder or database yet, or a folder whose training
        part differs (then the usual fingerprint check refuses it, or ``force`` moves it aside). Otherwise the
        :class:`Additions` (``needed`` False when the folder already measures everything asked for).

    Raises:
        ConfigMismatchError: the folder's passkey settings differ from the ones asked for.
    """
    from relpos.compare.store import ConfigMismatchError, Store, read_store_meta

    folder = Path(out_dir)
    db = folder / "results.sqlite"
    if force or not db.is_file():
        return None
    meta = read_store_meta(db) or {}
    old_fp = meta.get("fingerprint")
    try:
        old = json.loads(meta.get("protocol") or "null")
    except ValueError:
        return None
    if not old_fp or not isinstance(old, dict):
        return None
    here = json.loads(json.dumps(cfg.protocol()))  # as stored: tuples as lists
    (old_train, old_eval), (new_train, _) = split_protocol(old), split_protocol(here)
    if old_train != new_train:
        return None
    had_variants, had_passkey = list(old_eval.get("rope_variants") or []), dict(old_eval.get("passkey") or {})
    kept = []
    if had_passkey and cfg.passkey and had_passkey != cfg.passkey:
        raise ConfigMismatchError(
            f"output folder {folder} holds passkey results with settings {had_passkey}, and this invocation asks "
            f"for {cfg.passkey}; nothing was changed. Pass the folder's passkey settings "
            f"(--passkey {had_passkey.get('n', '')}) to continue it, use another --out folder, or pass --force to "
            f"move the old results aside and train again")
    if had_passkey and not cfg.passkey:
        cfg.passkey = copy.deepcopy(had_passkey)
        kept.append(f"passkey {had_passkey}")
    extra = [v for v in had_variants if v not in cfg.rope_variants]
    if extra:
        cfg.rope_variants = list(cfg.rope_variants) + extra
        kept.append("RoPE scalings " + ", ".join(extra))
    variants = [v for v in cfg.rope_variants if v not in had_variants]
    passkey = bool(cfg.passkey) and not had_passkey
    jobs = []
    if variants or passkey:  # only then is the folder's job list read
        with Store(db, create=False) as st:
            jobs = _jobs_needing(st, old_fp, variants, passkey)
    return Additions(folder, old_fp, old, cfg, variants, passkey, kept, jobs)


def missing_line(add: Additions) -> str:
    """The one-line refusal when saved models are missing (the fix named)."""
    miss = add.missing()
    return (f"output folder {add.folder}: adding {add.what()} evaluates its saved models, but {len(miss)} of the "
            f"{len(add.jobs)} finished runs it applies to have none (e.g. {miss[0]}: the folder was made with "
            f"--no-keep-models, or the models were moved); nothing was changed. Pass --force to move the old "
            f"results aside and train every run again with the new evaluations, or use another --out folder")


def add_evaluations(add: Additions, *, log: Callable[[str], None] = lambda s: None,
                    threads: int = 1) -> dict | None:
    """Evaluate ``add`` on the folder's saved models and store the runs; the folder is then bound to
    ``add.cfg``'s fingerprint. Nothing is trained; nothing is changed unless every evaluation succeeded.

    Returns:
        The record appended to ``meta.evaluations_added``, or None when nothing was needed.

    Raises:
        ConfigMismatchError: a saved model is missing, another ``relpos compare`` is running on the folder,
            or the folder changed meanwhile (nothing changed).
    """
    import torch

    from relpos.training.checkpoint import load
    from relpos.compare.job import Job, evaluate_additions
    from relpos.compare.store import ConfigMismatchError, Store

    if not add.needed:
        return None
    if add.missing():
        raise ConfigMismatchError(missing_line(add))
    from relpos.compare.saved_models import check_saved_model

    unhashed = [j["job"] for j in add.jobs if check_saved_model(add.folder, j) == "config"]  # before any is used
    if unhashed:
        log(f"{len(unhashed)} saved models (e.g. {unhashed[0]}) predate the content hash relpos records now: "
            "each was checked by its config.json (job and scheme) only")
    with Store(add.folder / "results.sqlite", create=False) as st:
        _refuse_if_busy(st, add)  # before the evaluations; checked again when they are stored
    cfg, new_fp = add.cfg, add.cfg.fingerprint()
    log(f"{add.folder} holds runs trained exactly as asked: adding {add.what()} by evaluating the saved models "
        f"of {len(add.jobs)} finished runs (no training)")
    cpu0, t0 = time.process_time(), time.perf_counter()
    torch.set_num_threads(max(1, int(threads)))
    tasks: dict[str, object] = {}
    results: dict[str, list[dict]] = {}
    for i, j in enumerate(add.jobs, 1):
        job = Job(j["task"], j["scheme"], int(j["seed"]), bool(j["randomized"]))
        if job.task not in tasks:
            tasks[job.task] = cfg.make_task(job.task)
        model, _ = load(add.folder / j["checkpoint"])
        with torch.no_grad():
            runs = evaluate_additions(job, cfg, tasks[job.task], model, variants=add.variants, passkey=add.passkey)
        results[j["job"]] = runs
        log(f"[{i}/{len(add.jobs)}] {j['job']}: {len(runs)} evaluations added")
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    record = {"at": now, "from_fingerprint": add.old_fingerprint, "to_fingerprint": new_fp,
              "added": {**({"passkey": cfg.passkey} if add.passkey else {}),
                        **({"rope_variants": add.variants} if add.variants else {})},
              "jobs": len(add.jobs), "cpu_seconds": round(time.process_time() - cpu0, 3),
              "seconds": round(time.perf_counter() - t0, 3)}
    for runs in results.values():
        for r in runs:
            r["added"] = {"at": now, "from_fingerprint": add.old_fingerprint}
    with Store(add.folder / "results.sqlite", create=False) as st:
        _rebind(st, add, new_fp, cfg.protocol(), results, record)
    _rewrite_config_json(add.folder, new_fp, cfg)
    return record


def _refuse_if_busy(store, add: Additions) -> None:
    from relpos.compare.store import ConfigMismatchError

    live = store.leases(add.old_fingerprint)  # held by a live process (a dead owner's lease is free)
    if live:
        job, lease = next(iter(live.items()))
        raise ConfigMismatchError(f"another relpos compare is training in {add.folder} ({lease['owner']}: {job}); "
                                  "nothing was changed: add the evaluations once it has finished")


_KEYED = ("jobs", "runs", "measurements", "failures", "leases")


def _rebind(store, add: Additions, new_fp: str, protocol: dict, results: dict[str, list[dict]], record: dict) -> None:
    """In one transaction: re-key the folder's rows from the old fingerprint to ``new_fp``, store the added
    runs and their measurements, bind the folder to ``new_fp`` and ``protocol``, log ``record``."""
    from relpos.compare.store import ConfigMismatchError, _num

    with store.transaction() as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        if row is None or row[0] != add.old_fingerprint:
            raise ConfigMismatchError(f"{add.folder} changed while its evaluations were added (fingerprint "
                                      f"{row and row[0]}); nothing was changed: run the command again")
        _refuse_if_busy(store, add)
        for table in _KEYED:
            conn.execute(f"UPDATE {table} SET config_hash = ? WHERE config_hash = ?", (new_fp, add.old_fingerprint))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'fingerprint'", (new_fp,))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'protocol'", (json.dumps(protocol, sort_keys=True),))
        hist = conn.execute("SELECT value FROM meta WHERE key = 'evaluations_added'").fetchone()
        log = (json.loads(hist[0]) if hist else []) + [record]
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('evaluations_added', ?)", (json.dumps(log),))
        for job, runs in results.items():  # the layout of Store.write_job
            for run in runs:
                key = (new_fp, run["scheme"], run.get("variant") or "", run["task"], int(run["seed"]),
                       int(run["train_len"]))
                info = {k: v for k, v in run.items() if k != "measurements"}
                conn.execute("INSERT OR IGNORE INTO runs VALUES (?,?,?,?,?,?,?,?)",
                             key + (job, json.dumps(info, default=float)))
                conn.executemany(f"INSERT OR IGNORE INTO measurements VALUES ({','.join('?' * 16)})", [key + (
                    m["protocol"], int(m["eval_len"]), int(m.get("bucket_start", -1)), int(m.get("bucket_end", -1)),
                    _num(m.get("loss")), _num(m.get("bpb")), _num(m.get("ppl")), _num(m.get("accuracy")),
                    _num(m.get("token_accuracy")), int(m.get("count", 0))) for m in run["measurements"]])


def _rewrite_config_json(folder: Path, fp: str, cfg) -> None:
    """The folder's config.json under the new fingerprint, with the joined evaluations (its plan lists kept)."""
    from relpos.outdir import write_json_atomic

    path = folder / "config.json"
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(old, dict):
        return
    old.update(fingerprint=fp, rope_variants=list(cfg.rope_variants), passkey=copy.deepcopy(cfg.passkey),
               protocol=cfg.protocol())
    write_json_atomic(path, old)
