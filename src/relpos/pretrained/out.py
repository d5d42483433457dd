"""The output folder of ``relpos compare --hf-model``: the rule of :mod:`relpos.outdir`, and relpos's own report only.

A folder is relpos's HF output when it holds a relpos results database; an
``hf_report.md`` relpos writes starts with :data:`HF_MARK`, and one without it is
never overwritten. ``--force`` moves relpos's own files of another evaluation
into ``previous-<fingerprint>-<time>/`` (:func:`_archive`); nothing else is moved.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
from pathlib import Path

__all__ = ["HF_MARK", "check_hf_output_dir"]

#: first line of every hf_report.md relpos writes (a file without it is never overwritten)
HF_MARK = "<!-- written by relpos compare --hf-model; safe to delete -->"


def _owns(folder: Path) -> bool:
    """A folder holds relpos's HF output: its results database (and nothing foreign beside it is touched)."""
    from relpos.compare.store import is_results_store

    return is_results_store(folder / "results.sqlite")


def check_hf_output_dir(out: str | os.PathLike) -> Path:
    """The output-folder rule of :mod:`relpos.outdir`, and an ``hf_report.md`` relpos did not write is refused."""
    from relpos.outdir import OutputDirError, check_output_dir

    real = check_output_dir(out, owns=_owns, what="compare results")
    rep = real / "hf_report.md"
    if rep.exists() or rep.is_symlink():
        try:
            ok = rep.is_file() and not rep.is_symlink() and rep.read_text(errors="replace").startswith(HF_MARK)
        except OSError:
            ok = False
        if not ok:
            raise OutputDirError(f"--out {out}: its hf_report.md was not written by relpos; nothing was changed; "
                                 "move it or choose another --out")
    return real


def _archive(out: Path, old_fp: str) -> Path:
    """Move relpos's own HF output of another configuration into ``previous-<fp>-<time>/``."""
    dest = out / f"previous-{old_fp}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    dest.mkdir(parents=True)
    for name in ("results.sqlite", "results.sqlite-wal", "results.sqlite-shm", "hf_report.md"):
        if (out / name).exists():
            shutil.move(str(out / name), str(dest / name))
    for p in out.glob("passkey_*.png"):
        shutil.move(str(p), str(dest / p.name))
    return dest


def _stored_fingerprint(out: Path) -> str | None:
    if not (out / "results.sqlite").is_file():
        return None
    from relpos.compare.store import Store

    with Store(out / "results.sqlite") as st:
        return st.get_meta("fingerprint")
