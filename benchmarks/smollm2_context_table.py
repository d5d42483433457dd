"""The page section of ``benchmarks/smollm2_context.py``: its finished cells as Markdown and JSON.

Reads a run folder (``cells/*.json``, ``protocol.json``, ``corpus_report.json``)
or a JSON this script wrote before, and writes:

* ``--json``: the protocol, the corpus summary, every finished cell (position
  buckets included) and what is missing -- everything the Markdown is made from,
  so the section can be regenerated from the JSON alone;
* ``--md``: the section -- window loss and far-position loss by length for every
  scaling, passkey results with their example counts, the time it took, how few
  windows it rests on -- ready to be placed on ``docs/results.md``.

A cell not finished yet is shown as ``not run`` (never as a number), and the
section says how many of the planned cells it holds::

    python benchmarks/smollm2_context_table.py /work/smollm/run \\
        --md benchmarks/results/smollm2_context.md --json benchmarks/results/smollm2_context.json
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from relpos.report.real_context import cell_name_lm, markdown, planned, summary  # noqa: F401  (the section)

#: the heavy per-token fields a cell never needs on the page
_KEEP_MEASUREMENT = ("protocol", "eval_len", "loss", "bpb", "accuracy", "token_accuracy", "bucket_start",
                     "bucket_end", "count")


def _slim(cell: dict) -> dict:
    out = {k: v for k, v in cell.items() if k != "measurements"}
    out["measurements"] = [{k: m[k] for k in _KEEP_MEASUREMENT if k in m} for m in cell.get("measurements", [])]
    return out


def collect(src: Path) -> dict:
    """The data of the section from a run folder, or the JSON an earlier call wrote."""
    if src.is_file():
        data = json.loads(src.read_text())
        if "protocol" not in data or "cells" not in data:
            raise ValueError(f"{src} is not a JSON written by smollm2_context_table.py")
        return data
    proto_path = src / "protocol.json"
    if not proto_path.is_file():
        raise ValueError(f"{src} holds no protocol.json: not a benchmarks/smollm2_context.py run folder")
    protocol = json.loads(proto_path.read_text())
    corpus = json.loads((src / "corpus_report.json").read_text()) if (src / "corpus_report.json").is_file() else None
    names = {c["name"] for c in planned(protocol)}
    cells = []
    for p in sorted((src / "cells").glob("*.json")):
        try:
            c = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(c, dict) and c.get("name") == p.stem and p.stem in names:
            cells.append(_slim(c))
    log = (src / "progress.log").read_text().splitlines() if (src / "progress.log").is_file() else []
    loads = [int(m.group(1)) for m in (re.search(r"model loaded in (\d+)s", line) for line in log) if m]
    return {"protocol": protocol, "corpus": _corpus_summary(corpus), "cells": cells, "load_seconds": loads,
            "collected": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def _corpus_summary(rep: dict | None) -> dict | None:
    if not rep:
        return None
    keep = ("kind", "fingerprint", "vocab_size", "splits", "dedup")
    return {k: rep[k] for k in keep if k in rep}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", help="a benchmarks/smollm2_context.py run folder, or a JSON this script wrote")
    p.add_argument("--md", default=None, help="write the Markdown section here")
    p.add_argument("--json", default=None, help="write the data here")
    a = p.parse_args(argv)
    data = collect(Path(a.src))
    text = markdown(data)
    print(text)
    from relpos.outdir import write_text_atomic  # a regular file, never through a link

    if a.json:
        out = {**data, "summary": summary(data)}
        write_text_atomic(a.json, json.dumps(out, indent=1, sort_keys=True) + "\n")
    if a.md:
        write_text_atomic(a.md, text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
