"""``python -m relpos.bench``: the entry point of the memory subprocesses (use ``relpos bench`` to run a benchmark)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from relpos.bench.memory import child_main, zygote_main

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--memory-child":
        return child_main(argv[1:])
    if argv and argv[0] == "--memory-zygote":
        return zygote_main(argv[1:])
    print("usage: relpos bench (this module's own entry point is for memory subprocesses)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
