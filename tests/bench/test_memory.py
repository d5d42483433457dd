"""Peak memory in a fresh process: the figure must track a known allocation (it is not clamped)."""

from __future__ import annotations

import pytest

from relpos import bench


def test_memory_tracks_a_known_allocation():
    """dense materialises a (1, H, N, N) float32 bias: at N = 1024, H = 8 that is 32 MiB, which the
    forward's peak growth must show; position-free SDPA at N = 64 needs far less. A broken
    measurement (zero, negative, or the same figure for both) fails here."""
    spec = bench.BenchSpec(threads=1)
    res = bench.measure_memory([(bench.Case("alibi", "dense", 1024, "fwd"), False),
                                (bench.Case("none", "sdpa", 64, "fwd"), True)], spec)
    big, small = res[("alibi", "dense", 1024)], res[("none", "sdpa", 64)]
    assert big["error"] is None and small["error"] is None, (big, small)
    assert big["fwd_mib"] >= 30, big
    assert big["train_mib"] is None  # train=False: no forward+backward step
    assert 0 <= small["fwd_mib"] < 10 and 0 <= small["train_mib"] < 10, small


def test_memory_without_fork_uses_one_interpreter_per_configuration():
    spec = bench.BenchSpec(threads=1, memory_jobs=1)
    res = bench.measure_memory([(bench.Case("t5", "chunked", 256, "fwd"), True)], spec, fork=False)
    m = res[("t5", "chunked", 256)]
    assert m["error"] is None, m
    assert m["fwd_mib"] >= 0 and m["train_mib"] >= m["fwd_mib"]


def test_memory_reports_a_broken_case_instead_of_raising():
    spec = bench.BenchSpec(threads=1)
    res = bench.measure_memory([(bench.Case("t5", "no-such-impl", 64, "fwd"), True)], spec)
    m = res[("t5", "no-such-impl", 64)]
    assert m["fwd_mib"] is None and m["error"], m


@pytest.mark.parametrize("payload", ['{"spec": {}, "case": {"scheme": "nope", "impl": "sdpa", "N": 8}}'])
def test_child_entry_point_prints_one_result(capsys, payload):
    from relpos.bench.__main__ import main

    assert main(["--memory-child", payload]) == 0
    out = capsys.readouterr().out
    assert out.startswith("RELPOS_MEM ") and '"error": null' in out
    assert main(["--nothing"]) == 2
