"""``relpos bench``: a tiny run end to end, the JSON schema, the memory subprocess,
the peers, the markdown report and bad input. Timings themselves are measured by
the benchmark, never asserted here."""

from __future__ import annotations

import json

import pytest
import torch

from relpos import bench
from relpos.cli import main as cli_main

RECORD_KEYS = {"scheme", "impl", "N", "mode", "status", "median_ms", "baseline_ms", "ratio", "peak_mib",
               "baseline_peak_mib", "chosen", "note", "runs"}


def _bench(tmp_path, *args):
    rc = cli_main(["bench", "--quick", "--out", str(tmp_path), *args])
    assert rc == 0
    doc = json.loads((tmp_path / "attention-quick.json").read_text())
    md = (tmp_path / "attention-quick.md").read_text()
    return doc, md


def test_quick_run_schema(tmp_path, capsys):
    doc, md = _bench(tmp_path, "--schemes", "nope,t5,shaw-kv", "--impls", "dense,chunked,flex,auto",
                     "--lengths", "24", "--no-memory")
    assert doc["version"] == 1 and doc["kind"] == "relpos-attention-bench"
    assert {"cpu", "torch", "torch_threads"} <= set(doc["machine"])
    recs = doc["records"]
    assert len(recs) == 3 * 4 * 2  # schemes x impls x modes
    for r in recs:
        assert RECORD_KEYS <= set(r), set(r) ^ RECORD_KEYS
        assert r["mode"] in bench.MODES and r["N"] == 24
        if r["status"] == "ok":
            assert r["median_ms"] > 0 and r["baseline_ms"] > 0
            assert r["ratio"] == pytest.approx(r["median_ms"] / r["baseline_ms"], rel=0.01)
    by = {(r["scheme"], r["impl"], r["mode"]): r for r in recs}
    assert by[("t5", "auto", "fwd+bwd")]["chosen"] in ("dense", "chunked")
    # flex on CPU: inference only; value terms never
    assert by[("t5", "flex", "fwd")]["status"] == "ok"
    assert by[("t5", "flex", "fwd+bwd")]["status"] == "unsupported"
    assert by[("shaw-kv", "flex", "fwd")]["status"] == "unsupported"
    assert "| scheme |" in md and "x" in md
    assert "relpos bench" in capsys.readouterr().err


def test_memory_is_measured_in_a_fresh_process():
    spec = bench.BenchSpec(threads=1)
    res = bench.measure_memory([(bench.Case("t5", "chunked", 256, "fwd"), True),
                                (bench.Case("none", "sdpa", 256, "fwd"), True)], spec)
    for key in (("t5", "chunked", 256), ("none", "sdpa", 256)):
        m = res[key]
        assert m["error"] is None, m
        assert m["fwd_mib"] >= 0 and m["train_mib"] >= 0


def test_peers_compare_against_the_same_layer(tmp_path):
    doc, md = _bench(tmp_path, "--schemes", "t5", "--impls", "chunked", "--lengths", "16", "--modes", "fwd",
                     "--peers", "--no-memory")
    peers = {p["peer"]: p for p in doc["peers"]}
    assert set(peers) == set(bench.PEERS)
    for p in peers.values():
        assert p["status"] == "ok", p
        assert p["peer_ms"] > 0 and p["relpos_ms"] > 0 and p["speedup"] > 0
        assert p["relpos_impl"] in ("dense", "chunked")
    assert "### Peers" in md


def test_default_plan_covers_every_scheme_and_long_lengths():
    cases = bench.default_cases("cpu")
    schemes = {c.scheme for c in cases if c.N == 2048}
    assert set(bench.attention_schemes()) <= schemes
    assert {c.impl for c in cases if c.N == 2048} == set(bench.default_impls("cpu"))
    assert max(c.N for c in cases) == 16384
    assert all(c.impl == "chunked" for c in cases if c.N == 16384)
    assert all(c.impl != "dense" for c in cases if c.N > bench.DENSE_MAX_N and c.N != 2048)
    assert "flex" not in bench.default_impls("cpu")


def test_markdown_marks_targets():
    recs = []
    for impl, ms in (("dense", 30.0), ("auto", 11.0)):
        recs.append({"scheme": "alibi", "impl": impl, "N": 2048, "mode": "fwd+bwd", "status": "ok", "median_ms": ms,
                     "baseline_ms": 10.0, "ratio": ms / 10, "peak_mib": 5.0, "baseline_peak_mib": 4.0,
                     "chosen": "chunked" if impl == "auto" else None, "note": None, "runs": 3})
    doc = {"shape": "B=1", "baseline": "sdpa", "records": recs, "peers": []}
    md = bench.markdown(doc)
    assert "| alibi | x3.00 · 5 MiB | x1.10 · 5 MiB | chunked | <= 1.2 | yes |" in md


@pytest.mark.parametrize("args,msg", [
    (["--lengths", "0"], "lengths must be >= 1"),
    (["--impls", "bogus"], "unknown implementation"),
    (["--schemes", "nosuch"], "unknown scheme"),
    (["--modes", "sideways"], "unknown mode"),
    (["--threads", "-1"], "--threads must be >= 0"),
])
def test_bad_input(tmp_path, capsys, args, msg):
    with pytest.raises(SystemExit) if args[0] == "--lengths" else _nullcontext():
        rc = cli_main(["bench", "--quick", "--no-memory", "--out", str(tmp_path), *args])
        assert rc == 2
    assert msg in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_gpu_run_is_refused_cleanly_without_a_gpu(tmp_path, capsys):
    rc = cli_main(["bench", "--quick", "--device", "cuda", "--out", str(tmp_path)])
    assert rc == 2
    assert "no CUDA device" in capsys.readouterr().err


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
