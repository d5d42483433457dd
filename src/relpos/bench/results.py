"""Where a benchmark script's results go: ``<out>/<name>.json`` and ``<out>/<name>.md``.

Every script under ``benchmarks/`` ends the same way: make the output folder, write
the JSON document and its markdown table, print the table. :func:`write_results`
does that once, with relpos's own writers (a temporary file renamed into place;
a link or a special file at either path is refused, nothing is written through it).
"""

from __future__ import annotations

import os
from pathlib import Path

from relpos.outdir import write_json_atomic, write_text_atomic

__all__ = ["per_round_ratio", "write_results"]


def per_round_ratio(num, den) -> float:
    """The median over rounds of ``num[r] / den[r]``: both sides were timed side by side in round ``r``, so a
    change of the host's speed between rounds cancels (a ratio of the two medians can pair a fast round's
    denominator with a slow round's numerator)."""
    import statistics

    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def write_results(out: str | os.PathLike, name: str, doc: dict, md: str, *, echo: bool = True) -> Path:
    """Write ``doc`` to ``<out>/<name>.json`` and ``md`` to ``<out>/<name>.md``; print ``md`` when ``echo``.

    Returns the JSON file's path. Raises :class:`relpos.outdir.OutputDirError` when
    either path exists and is not a regular file; NaN in ``doc`` raises
    ``ValueError`` before anything is written.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    write_json_atomic(path, doc)
    write_text_atomic(folder / f"{name}.md", md if md.endswith("\n") else md + "\n")
    if echo:
        print(md.rstrip("\n"))
    return path
