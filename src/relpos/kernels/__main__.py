"""``python -m relpos.kernels [build|status]``: compile the optional C++ kernels, or say whether they load."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from relpos import kernels

    args = sys.argv[1:] if argv is None else argv
    cmd = args[0] if args else "status"
    if cmd not in ("build", "status") or len(args) > 1:
        print("usage: python -m relpos.kernels [build|status]", file=sys.stderr)
        return 2
    if cmd == "build":
        ok, msg = kernels.build(verbose="-v" in args)
        print(msg)
        return 0  # a missing compiler is not an install failure: the PyTorch paths remain
    print(f"relpos kernels: {kernels.status()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
