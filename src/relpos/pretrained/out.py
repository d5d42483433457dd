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
    from relpos.outdir import OutputDirError, check_output_dir, refuse_links_below, refuse_special_files

    # every file relpos writes there a regular file (SQLite and the report writer would follow a link)
    real = check_output_dir(out, owns=_owns, what="compare results", files=_MOVED + ("results.sqlite-journal",))
    if Path(out).is_dir():
        refuse_links_below(Path(out) / "models", root=out)
        refuse_special_files(out, sorted(p.name for p in Path(out).glob("*.png")))
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


#: relpos's own files in a folder ``--hf-model`` may write: its own, and those of a trained ``relpos compare``
#: (a training folder taken over with ``--force`` keeps none of its results beside the new ones).
_MOVED = ("results.sqlite", "results.sqlite-wal", "results.sqlite-shm", "hf_report.md", "results.json",
          "config.json", "report.md")


def _archive(out: Path, old_fp: str) -> Path:
    """Move relpos's own output of another configuration (an HF evaluation's, or a trained compare's: its
    database, results.json, config.json, reports, plots and models) into ``previous-<fp>-<time>/``."""
    dest = out / f"previous-{old_fp}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    dest.mkdir(parents=True)
    for name in _MOVED:
        if (out / name).exists() or (out / name).is_symlink():
            shutil.move(str(out / name), str(dest / name))
    for p in out.glob("*.png"):
        shutil.move(str(p), str(dest / p.name))
    if (out / "models").is_dir() and not (out / "models").is_symlink():
        shutil.move(str(out / "models"), str(dest / "models"))
    return dest


def _stored_fingerprint(out: Path) -> str | None:
    """The fingerprint of the folder's database, read only (nothing created), or None."""
    from relpos.compare.store import read_store_meta

    return (read_store_meta(out / "results.sqlite") or {}).get("fingerprint")
