"""``relpos bench``: a tiny run end to end, the JSON schema, the peers and bad input.
Timings themselves are measured by the benchmark, never asserted here."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from relpos import bench
from relpos.cli import main as cli_main

RECORD_KEYS = {"scheme", "impl", "N", "mode", "status", "median_ms", "baseline_ms", "ratio", "peak_mib",
               "baseline_peak_mib", "chosen", "note", "runs", "times_ms", "baseline_times_ms"}


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
            # the ratio is the median of per-round ratios to the baseline, re-derived here from the stored times
            # (rounded to 0.001 ms: at these tiny sizes that alone moves a quotient by > 1 %)
            # (a case whose warm-up took over SLOW_S is timed once: its time over the baseline's median)
            t, b = r["times_ms"], r["baseline_times_ms"]
            assert len(t) == r["runs"] and r["median_ms"] == pytest.approx(statistics.median(t), abs=0.002)
            tol = 0.0005 * (1 + r["ratio"]) / min(b) + 0.002
            want = (statistics.median(x / y for x, y in zip(t, b, strict=True)) if len(t) > 1
                    else t[0] / statistics.median(b))
            assert r["ratio"] == pytest.approx(want, rel=0.01, abs=tol)
    by = {(r["scheme"], r["impl"], r["mode"]): r for r in recs}
    assert by[("t5", "auto", "fwd+bwd")]["chosen"] in ("dense", "chunked")
    # flex on CPU: inference only; value terms never
    assert by[("t5", "flex", "fwd")]["status"] == "ok"
    assert by[("t5", "flex", "fwd+bwd")]["status"] == "unsupported"
    assert by[("shaw-kv", "flex", "fwd")]["status"] == "unsupported"
    assert "| scheme |" in md and "x" in md
    assert "relpos bench" in capsys.readouterr().err
    assert {r["causal"] for r in recs} == {True}  # a grid runs causal unless --masks says otherwise
    assert {(r["scheme"], r["N"], r["mode"]) for r in doc["auto_vs_fastest"]} == {
        (s, 24, m) for s in ("nope", "t5", "shaw-kv") for m in bench.MODES}
    assert "### auto against the fastest implementation" in md


def test_short_cases_get_more_rounds_than_repeats(tmp_path):
    """Cells of a few ms are timed in more rounds (up to MORE_ROUNDS x repeats), long ones in ``repeats``."""
    from relpos.bench import runner

    doc, _ = _bench(tmp_path, "--schemes", "t5", "--impls", "dense", "--lengths", "16", "--modes", "fwd",
                    "--no-memory", "--repeats", "2")
    (rec,) = doc["records"]
    assert rec["runs"] == runner.MORE_ROUNDS * 2  # a tiny cell: the round robin is far under GROUP_S


def test_masks_run_both_in_one_document(tmp_path):
    doc, md = _bench(tmp_path, "--schemes", "t5,cope", "--impls", "dense,auto", "--lengths", "16", "--modes", "fwd",
                     "--masks", "causal,bidirectional", "--no-memory")
    got = {(r["scheme"], r["causal"]) for r in doc["records"]}
    assert got == {("t5", True), ("t5", False), ("cope", True)}  # CoPE is causal only
    assert [m["causal"] for m in doc["masks"]] == [True, False]
    assert "## Causal" in md and "## Bidirectional" in md


def test_peers_compare_against_the_same_layer(tmp_path):
    """Every peer except the compiled FlexAttention one (its compile takes ~20 s; its own test below)."""
    names = [n for n, p in bench.PEERS.items() if p.warmups == 1]
    doc, md = _bench(tmp_path, "--schemes", "t5", "--impls", "chunked", "--lengths", "16", "--modes", "fwd,fwd+bwd",
                     "--peers", "--peer-names", ",".join(names), "--no-memory")
    rows = {(p["peer"], p["mode"], p["causal"]): p for p in doc["peers"]}
    assert {p for p, _, _ in rows} == set(names)
    assert {c for _, _, c in rows} == {True, False}  # --peers runs both masks
    assert not any(p == "cope-paper" and not c for p, _, c in rows)  # CoPE is causal only
    for p in rows.values():
        if p["peer"] in ("xt-t5-flash", "xt-dpb-flash"):
            assert p["status"] == "unsupported" and "refuses" in p["note"]
            continue
        assert p["status"] == "ok", p
        assert p["peer_ms"] > 0 and p["relpos_ms"] > 0 and p["speedup"] > 0
        assert p["relpos_impl"] in ("dense", "chunked")
    assert sum(p["best"] for p in rows.values()) == len({(p["family"], p["mode"], p["causal"])
                                                         for p in rows.values() if p["status"] == "ok"})
    assert "### Peers: every configuration" in md and "### Peers at their best" in md


@pytest.mark.slow
def test_compiled_flex_peer_runs_inference(tmp_path):
    doc, md = _bench(tmp_path, "--impls", "peers", "--peer-names", "flex-alibi", "--lengths", "16", "--no-memory")
    rows = {(p["peer"], p["mode"]): p for p in doc["peers"]}
    assert set(rows) == {("flex-alibi", "fwd")}  # no CPU backward for FlexAttention
    assert rows[("flex-alibi", "fwd")]["status"] == "ok" and rows[("flex-alibi", "fwd")]["relpos_ms"] > 0


@pytest.mark.parametrize("args,msg", [
    (["--lengths", "0"], "lengths must be >= 1"),
    (["--impls", "bogus"], "unknown implementation"),
    (["--schemes", "nosuch"], "unknown scheme"),
    (["--modes", "sideways"], "unknown mode"),
    (["--threads", "-1"], "--threads must be >= 0"),
    (["--peers", "--peer-names", "nosuch"], "unknown peer"),
    (["--masks", "sideways"], "unknown mask"),
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


def test_merge_joins_runs_made_side_by_side(tmp_path):
    for mask in ("causal", "bidirectional"):
        assert cli_main(["bench", "--schemes", "t5", "--impls", "dense,auto", "--lengths", "16", "--modes", "fwd",
                         "--repeats", "1", "--masks", mask, "--no-memory", "--out", str(tmp_path), "--name", mask]) == 0
    assert cli_main(["bench", "--merge", f"{tmp_path}/causal.json,{tmp_path}/bidirectional.json",
                     "--out", str(tmp_path), "--name", "both"]) == 0
    doc = json.loads((tmp_path / "both.json").read_text())
    assert {r["causal"] for r in doc["records"]} == {True, False}
    assert len(doc["auto_vs_fastest"]) == 2 and len(doc["merged_from"]) == 2
    assert "## Bidirectional" in (tmp_path / "both.md").read_text()


def test_a_link_at_an_output_file_is_refused_before_the_run(tmp_path, capsys):
    """A symbolic link where the table goes: one line naming it, before any case runs; its target unchanged."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "t5.md").symlink_to(victim)
    rc = cli_main(["bench", "--schemes", "t5", "--impls", "dense", "--lengths", "16", "--modes", "fwd", "--repeats",
                   "1", "--masks", "causal", "--no-memory", "--out", str(out), "--name", "t5"])
    err = capsys.readouterr().err
    assert rc == 2 and "t5.md is a symbolic link" in err and "relpos bench: 1 cases" not in err
    assert victim.read_text() == "keep me\n" and not (out / "t5.json").exists()
