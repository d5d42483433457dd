"""``relpos explore``: serve the interactive explorer on 127.0.0.1, or export it to one HTML file."""

from __future__ import annotations

import argparse

HELP = "interactive page that shows how relative positions work (serves on 127.0.0.1)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; anything else exposes the page to your network)")
    p.add_argument("--port", type=int, default=0, help="port to bind (default 0: a free port)")
    p.add_argument("--open", action="store_true", help="open the page in a web browser")
    p.add_argument("--results", action="append", default=[], metavar="DIR",
                   help="a relpos compare output folder (or its results.json) for the extrapolation view; repeatable")
    p.add_argument("--checkpoint", action="append", default=[], metavar="DIR",
                   help="a checkpoint folder (relpos train); views 0 and 5 open on the first; repeatable")
    p.add_argument("--export", metavar="FILE.html",
                   help="write one self-contained HTML file with a snapshot of the data, then exit")
    p.add_argument("--verbose", action="store_true", help="log every request")


def _check_export_target(path: str) -> None:
    """Refuse to replace a file that is not an earlier ``relpos explore --export`` page."""
    from pathlib import Path

    from relpos.explorer.export import EXPORT_CSP

    p = Path(path)
    if not (p.exists() or p.is_symlink()):
        return
    ours = False
    if p.is_file() and not p.is_symlink():
        with open(p, "rb") as f:
            ours = f'content="{EXPORT_CSP}"'.encode() in f.read(1 << 16)
    if not ours:
        raise ValueError(f"--export {path} exists and is not a page written by relpos explore; "
                         f"nothing was changed -- choose another file name")


def main(args: argparse.Namespace) -> int:
    from relpos.explorer import Explorer, export_html, serve
    from relpos.validation import check_int

    check_int("--port", args.port, 0, 65535)
    if args.export:
        _check_export_target(args.export)
    explorer = Explorer(results=args.results, checkpoints=args.checkpoint)
    if args.export:
        from relpos.explorer.export import print_progress

        path = export_html(explorer, args.export, progress=print_progress)
        print(f"relpos explore: wrote {path} ({path.stat().st_size:,} bytes)")
        return 0
    try:
        serve(explorer, args.host, args.port, open_browser=args.open, quiet=not args.verbose)
    except ValueError as e:  # the server's own clear message (bad host, port in use): a usage error
        raise ValueError(f"cannot listen on {args.host} port {args.port}: {e}") from None
    except OSError as e:  # unresolvable host, port in use, no permission: say where
        raise OSError(e.errno, f"cannot listen on {args.host} port {args.port}: {e.strerror or e}") from None
    return 0
