"""Entry point of one job under ``torchrun`` (``relpos compare --runner torchrun``).

Usage (what :class:`relpos.compare.runner.TorchrunRunner` runs)::

    python -m torch.distributed.run --standalone --nproc_per_node=N \\
        -m relpos.compare.worker SPEC.json RESULT.json

``SPEC.json`` holds ``{"job": ..., "config": ..., "threads": ...}``. Every process
trains (data-parallel, through :func:`relpos.training.loop.train`); rank 0 then evaluates
and writes ``RESULT.json`` atomically.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m relpos.compare.worker SPEC.json RESULT.json", file=sys.stderr)
        return 2
    spec_path, out_path = argv
    with open(spec_path) as f:
        spec = json.load(f)
    from relpos.report.tables import write_json_atomic
    from relpos.compare.runner import run_job

    rank = int(os.environ.get("RANK", "0"))
    res = run_job(spec["job"], spec["config"], threads=int(spec.get("threads", 1)), evaluate=rank == 0)
    if rank == 0:
        res["train"]["world_size"] = int(os.environ.get("WORLD_SIZE", "1"))
        write_json_atomic(out_path, res)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
