"""Fault class "unbounded memory": reading a user's corpus holds about 2 MiB of text at a time, however
long a line or a JSONL record is (issue 29 item 11: one 100 MB record peaked at 749 MB)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data_helpers import prose

# VmHWM, not ru_maxrss: ru_maxrss keeps the forking parent's peak across exec
PEAK = """
import sys
from relpos.corpus.readers import read_docs
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
before = hwm()
n = 0
for d in read_docs(sys.argv[1], sys.argv[2]):
    for p in d.pieces():
        n += len(p)
print(hwm() - before, n)
"""


@pytest.mark.parametrize("kind", ["jsonl", "text"])
def test_one_huge_record_is_read_in_bounded_memory(tmp_path, kind):
    text = (prose(1 << 20, seed=3).replace("\n", " ") + "\n") * 24  # 24 MiB, a line break per MiB
    f = tmp_path / ("c.jsonl" if kind == "jsonl" else "c.txt")
    if kind == "jsonl":
        f.write_text(json.dumps({"id": 1, "text": text}) + "\n")
    else:
        f.write_text(text.replace("\n", " "))  # one 24 MiB line
    out = subprocess.run([sys.executable, "-c", PEAK, str(f), kind], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    growth, chars = map(int, out.stdout.split())
    assert chars == len(text)
    assert growth < 16 * 2**20, f"peak grew by {growth / 2**20:.0f} MiB reading one {len(text) / 2**20:.0f} MiB record"


def _splits(tmp_path, name, f, limit, monkeypatch):
    import relpos.corpus.jsonl_stream as js
    from relpos.corpus import load_corpus

    monkeypatch.setattr(js, "LINE_LIMIT", limit)
    c = load_corpus(f, cache_dir=tmp_path / name)
    return {s: bytes(c.array(s)) for s in ("train", "val", "test")}, c.meta["fingerprint"]


def test_streamed_records_give_the_same_corpus_as_parsed_ones(tmp_path, monkeypatch):
    """Every record streamed (a limit of 1 byte) or every record parsed whole: the same documents, the
    same splits, byte for byte -- escapes, surrogate pairs, nesting, a repeated key and blank lines."""
    recs = []
    for i in range(300):
        t = prose(400, seed=i) + ["", "\u732b \U0001f600 \"q\" \\ \t", "\ud800 lone"][i % 3]
        rec = {"id": i, "nested": {"a": [[1, "x]"], {"b": None}], "c": True}, "text": t, "n": -1.5e3}
        line = json.dumps(rec, ensure_ascii=i % 2 == 0 or i % 3 == 2)
        if i % 50 == 0:
            line = '{"text": "ignored", ' + line[1:]  # the last of a repeated key wins, as in json.loads
        recs.append(line)
    f = tmp_path / "c.jsonl"
    f.write_text("\n".join(recs[:150]) + "\n   \n\n" + "\n".join(recs[150:]) + "\n")
    whole = _splits(tmp_path, "whole", f, 1 << 30, monkeypatch)
    streamed = _splits(tmp_path, "streamed", f, 1, monkeypatch)
    assert streamed == whole


@pytest.mark.parametrize("line, match", [
    ('{"text": "abc', "a control character in a string"),  # the line break inside the string
    ('{"text": "abc"', "expected ',' or '}'"),
    ('{"text": 5}', "must be a string, got number"),
    ('{"body": "abc"}', "no text field 'text' .*body"),
    ('[1, 2]', "expected a JSON object"),
    ('{"text": "a\\x"}', "bad escape"),
    ('{"text": "a"} x', "extra data"),
    ('{"a": ' + "[" * 200000 + "]" * 200000 + ', "text": "deep"}', None),  # any depth: no recursion
])
def test_streamed_record_errors_name_the_line(tmp_path, monkeypatch, line, match):
    import relpos.corpus.jsonl_stream as js
    from relpos.corpus.readers import read_docs

    monkeypatch.setattr(js, "LINE_LIMIT", 1)
    f = tmp_path / "c.jsonl"
    f.write_text('{"text": "fine"}\n' + line + "\n")
    if match is None:
        assert ["".join(d.pieces()) for d in read_docs(f, "jsonl")] == ["fine", "deep"]
        return
    with pytest.raises(ValueError, match=r"c\.jsonl:2: .*" + match):
        for d in read_docs(f, "jsonl"):
            "".join(d.pieces())
