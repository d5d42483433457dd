"""The ``relpos`` command line: one subcommand per module in :mod:`relpos.commands`.

Each command module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``main(args) -> int``. Modules are imported only when their command runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

COMMANDS: dict[str, str] = {
    "schemes": "relpos.commands.schemes",
    "compare": "relpos.commands.compare",
    "train": "relpos.commands.train",
    "generate": "relpos.commands.generate",
    "explore": "relpos.commands.explore",
    "bench": "relpos.commands.bench",
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
    try:
        return int(args._main(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as e:
        # Bad input: one clear line, no traceback.
        print(f"relpos {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
