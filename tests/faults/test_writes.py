"""Fault class "writing through a link", by reading the code: every file that ``src/`` or ``benchmarks/`` opens for
writing goes through :mod:`relpos.outdir` (a regular file checked before the write, written whole), except the
reviewed places listed here, each inside a folder the same code has just created for itself.

A new ``write_text``/``write_bytes``/``open(..., "w")`` elsewhere fails this test: write it with
``relpos.outdir.write_text_atomic``/``write_bytes_atomic``/``write_json_atomic`` (or
``relpos.bench.results.write_results`` in a benchmark), or, if it writes into a folder it made itself, add it
here with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRITE = re.compile(r"""\.savefig\(|torch\.save\(|\.save_pretrained\(|copyfile\(|\.write_text\(|\.write_bytes\("""
                   r"""|\bopen\([^)]*['"][wax]b?\+?['"]|\.open\(['"][wax]|fdopen\([^)]*['"][wax]""")
LITERAL = re.compile(r"``[^`]*``")  # a docstring's code literal names a call, it makes none

#: (file, a piece of the line): why the direct write is safe there
REVIEWED = {
    ("src/relpos/outdir.py", "os.fdopen(fd, \"wb\")"): "the checked writer itself (a temporary file it created)",
    ("src/relpos/outdir.py", "fig.savefig(buf"): "save_figure renders into memory, then writes atomically",
    ("src/relpos/corpus/__init__.py", "(tmp / \"meta.json\")"): "inside the mkdtemp folder of the build",
    ("src/relpos/corpus/build.py", "open(path, \"wb\")"): "the split files, inside the same mkdtemp folder",
    ("src/relpos/training/checkpoint.py", "open(path, \"wb\")"): "inside the checkpoint's fresh temporary folder",
    ("src/relpos/compare/runner.py", "open(spec, \"w\")"): "inside a TemporaryDirectory of the job",
    ("src/relpos/explorer/export.py", "os.fdopen(fd, \"w\""): "a mkstemp file, renamed into place",
    ("src/relpos/extend/hf.py", "torch.save(opt.state_dict(), d /"): "inside the train-state folder it just made",
    ("src/relpos/extend/hf.py", "hf.save_pretrained(str(tmp))"): "into its own model.partial folder, renamed after",
    ("src/relpos/extend/hf.py", "shutil.copyfile(tokenizer_file("): "into the same model.partial folder",
    ("src/relpos/compare/reuse.py", "shutil.copyfile(entry.path, tmp /"): "into its own .reuse-<pid> folder",
    ("src/relpos/compare/inflight.py", "os.fdopen(fd, \"wb\")"): "create_exclusive files in its own fresh "
                                                              ".tmp-<pid> folder, renamed into place",
    ("benchmarks/mqar_probe.py", "torch.save(model.state_dict(), buf)"): "into memory, then write_bytes_atomic",
    ("benchmarks/hf_long_window.py", "m.save_pretrained(str(folder))"): "into a TemporaryDirectory",
    ("benchmarks/smollm2_context.py", "open(log, \"a\")"): "its progress log, checked as a regular file first",
    ("benchmarks/hf_long_window.py", "/proc/self/clear_refs"): "a procfs control file, not an output",
}


def _writes() -> list[tuple[str, int, str]]:
    out = []
    for folder in ("src", "benchmarks"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if WRITE.search(LITERAL.sub("", line)) and ">>>" not in line:
                    out.append((str(p.relative_to(ROOT)), n, line.strip()))
    return out


def test_every_write_goes_through_outdir_or_is_reviewed():
    found = _writes()
    unreviewed = [f"{f}:{n}: {line}" for f, n, line in found
                  if not any(f == rf and piece in line for rf, piece in REVIEWED)]
    assert not unreviewed, ("direct writes outside relpos.outdir (write them with its atomic writers, or review "
                            "them here):\n" + "\n".join(unreviewed))


def test_every_reviewed_place_still_exists():
    """A reviewed entry whose line is gone is stale (the list must not grow a blind spot)."""
    found = _writes()
    stale = [f"{rf}: {piece}" for rf, piece in REVIEWED if not any(f == rf and piece in line for f, _, line in found)]
    assert not stale, "stale entries in REVIEWED:\n" + "\n".join(stale)


def test_the_scan_sees_a_direct_write():
    """The pattern catches the forms it is meant to catch (a scan that matches nothing passes vacuously)."""
    for line in ('fig.savefig(path)', 'torch.save(sd, path)', 'm.save_pretrained(d)', 'shutil.copyfile(a, b)',
                 'Path(x).write_text("a")', 'p.write_bytes(b"")', 'with open(p, "w") as f:', 'open(p, "ab")',
                 'p.open("w")', 'os.fdopen(fd, "w")'):
        assert WRITE.search(line), line
    for line in ('open(p)', 'open(p, "rb")', 'p.read_text()', 'os.fdopen(fd, "rb")'):
        assert not WRITE.search(line), line
