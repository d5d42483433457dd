"""The ``relpos`` command line: one subcommand per module in :mod:`relpos.commands`.

Each command module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``main(args) -> int``. Modules are imported only when their command runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sqlite3
import sys

COMMANDS: dict[str, str] = {
    "schemes": "relpos.commands.schemes",
    "compare": "relpos.commands.compare",
    "train": "relpos.commands.train",
    "generate": "relpos.commands.generate",
    "explore": "relpos.commands.explore",
    "bench": "relpos.commands.bench",
    "extend": "relpos.commands.extend",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relpos",
        description="Relative position encodings for Transformer attention.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, modname in COMMANDS.items():
        if importlib.util.find_spec(modname) is None:
            continue
        mod = importlib.import_module(modname)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_main", None):
        parser.print_help()
        return 2
    cmd = f"relpos {args.command}"
    try:
        rc = int(args._main(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
        return rc
    except BrokenPipeError:
        # The reader went away (`relpos schemes --json | head -1`): stop quietly, like other Unix tools.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 141
    except KeyboardInterrupt:
        print(f"{cmd}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError) as e:
        # Bad input: one clear line, no traceback.
        print(f"{cmd}: error: {e}", file=sys.stderr)
        return 2
    except sqlite3.Error as e:
        print(f"{cmd}: error: results database: {e} (is the disk full or the folder read-only?)", file=sys.stderr)
        return 1
    except OSError as e:
        where = f": {e.filename}" if getattr(e, "filename", None) else ""
        print(f"{cmd}: error: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"{cmd}: error: out of memory; use smaller sizes", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - never a traceback; RELPOS_DEBUG=1 shows it
        if os.environ.get("RELPOS_DEBUG"):
            raise
        kind = "out of memory" if "OutOfMemory" in type(e).__name__ else f"{type(e).__name__}"
        first = (str(e).strip().splitlines() or [""])[0][:300]
        print(f"{cmd}: error: {kind}: {first} (set RELPOS_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
