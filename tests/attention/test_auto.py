"""impl="auto": its CPU picks follow the measured table (src/relpos/data/auto_table.json), its
CUDA picks, that it says what it picked, that it is exact whichever it picks, and that explicit
implementations never fall back.

(test_against_reference.py checks auto's outputs and gradients for every scheme.)
"""

from __future__ import annotations

import contextlib
import importlib
import logging

import pytest
import torch

import relpos
from relpos.attention import Request, UnsupportedError, request
from tests.helpers import attention_schemes, build

auto = importlib.import_module("relpos.attention.auto")
chunked = importlib.import_module("relpos.attention.chunked")


def _req(enc, N=128, *, Nq=None, grad=False, causal=True) -> Request:
    B, H, D = 1, 2, 8
    Nq = N if Nq is None else Nq
    q = torch.randn(B, H, Nq, D, requires_grad=grad)
    k = torch.randn(B, H, N, D, requires_grad=grad)
    v = torch.randn(B, H, N, D, requires_grad=grad)
    return request(q, k, v, enc, causal=causal, q_offset=N - Nq)


TABLE = auto.table()


def test_the_table_ships_and_says_how_it_was_made():
    assert TABLE is not None, "src/relpos/data/auto_table.json is missing or unreadable"
    assert TABLE["command"].startswith("python benchmarks/auto_table.py")
    assert TABLE["cells"] and TABLE["records"]


def _req_at(enc, N, *, causal, grad, B=1, H=8, D=8) -> Request:
    q, k, v = (torch.zeros(B, H, N, D, requires_grad=grad) for _ in range(3))
    return request(q, k, v, enc, causal=causal)


TABLES = {"main": TABLE, "d16": auto.table(str(auto.TABLE_PATH.parent / "auto_table_d16.json")),
          "d16_b4": auto.table(str(auto.TABLE_PATH.parent / "auto_table_d16_b4.json"))}


def test_each_head_width_and_batch_reads_its_own_table():
    for name, batch in (("d16", 16), ("d16_b4", 4)):
        assert TABLES[name] is not None and TABLES[name]["shape"]["head_dim"] == 16
        assert TABLES[name]["shape"]["batch"] == batch
        assert TABLES[name]["command"].startswith("python benchmarks/auto_table.py")
    assert auto.table_for(64) is TABLE and auto.table_for(128) is TABLE and auto.table_for(64, 4) is TABLE
    assert auto.table_for(16) is TABLES["d16"] and auto.table_for(8) is TABLES["d16"]
    assert auto.table_for(16, 16) is TABLES["d16"] and auto.table_for(16, 256) is TABLES["d16"]
    assert auto.table_for(16, 4) is TABLES["d16_b4"] and auto.table_for(16, 1) is TABLES["d16_b4"]


@pytest.mark.parametrize("which", list(TABLES))
@pytest.mark.parametrize("name", attention_schemes())
@pytest.mark.parametrize("causal", [True, False])
def test_cpu_picks_follow_the_table(which, name, causal):
    doc = TABLES[which]
    B, H, D = doc["shape"]["batch"], doc["shape"]["heads"], doc["shape"]["head_dim"]
    enc = build(name, n_heads=H, head_dim=D, causal=causal, max_len=8192)
    if enc.causal_only and not causal:
        pytest.skip("causal-only scheme")
    inside = enc.acts_on - {"embedding", "qk"}
    for grad in (False, True):
        for N in doc["lengths"]:
            req = _req_at(enc, N, causal=causal, grad=grad, B=B, H=H, D=D)
            with contextlib.nullcontext() if grad else torch.no_grad():  # no autograd: a forward-only call
                pick = auto.choose(req)
                assert pick in ("dense", "chunked"), (name, N, grad)  # never flex on CPU
                if not inside:
                    assert pick == "dense"  # the fused SDPA call either way
                    continue
                impl, cell = auto.table_pick(req)
            mask = "causal" if causal else "bidirectional"
            engine, mode = chunked.engine_for(req), "fwd+bwd" if grad else "fwd"
            key = f"{name}/{engine}/{mask}/{mode}"  # the table keys rows by registry name
            if str(N) not in doc["cells"].get(key, {}):  # not measured for this scheme: the engine's row
                key = f"*/{engine}/{mask}/{mode}"
            assert cell == f"{key}@{N}", cell
            assert impl == doc["cells"][key][str(N)]
            large_tie = impl == "dense" and B * H * N * N * 4 >= auto.LARGE_DENSE_BYTES and auto._near_tie(doc, cell)
            assert pick == ("chunked" if large_tie else impl), (name, N, grad)


def test_a_preset_of_a_shared_class_reads_its_own_row():
    # shaw-kv is Shaw(value=True): auto read shaw's row (dense, 1.5-1.7x slower) at causal N = 256, fwd+bwd
    doc = TABLE  # head width 64
    for name in ("shaw", "shaw-kv", "kerple-log", "kerple-power"):
        enc = build(name, n_heads=8, head_dim=64, causal=True, max_len=2048)
        assert enc.name == name
        req = _req_at(enc, 256, causal=True, grad=True, D=64)
        impl, cell = auto.table_pick(req, doc)
        assert cell.startswith(f"{name}/") and impl == doc["cells"][cell.split("@")[0]]["256"]


def test_deberta_bidirectional_training_picks_chunked_on_a_near_tie_at_large_sizes():
    # issue 34: auto chose chunked (6.02x) where dense was 3.29x at N = 2048, bidirectional, fwd+bwd; issue 52:
    # dense then measured 4 % ahead in the table and 1.20-1.26x behind in the grid's long process
    enc = build("deberta", n_heads=8, head_dim=64, causal=False, max_len=2048)
    req = _req_at(enc, 2048, causal=False, grad=True, D=64)  # the main table's head width: 128 MiB per tensor
    recs = [r for r in TABLE["records"] if r["key"] == "deberta/blocks/bidirectional/fwd+bwd" and r["N"] == 2048]
    assert len(recs) == 1 and recs[0]["dense_ms"] is not None
    near = recs[0]["chunked_ms"] < recs[0]["dense_ms"] * (1 + auto.NEAR_TIE)
    faster = "dense" if recs[0]["dense_ms"] <= recs[0]["chunked_ms"] else "chunked"
    assert auto.choose(req) == ("chunked" if near else faster)


def test_near_tie_rule_needs_both_a_large_tensor_and_a_small_lead(monkeypatch):
    """Constructed timings: dense 5 % ahead goes to chunked only where one (B, H, N, N) tensor reaches the bound;
    dense 20 % ahead keeps dense at any size; a cell without timings keeps the table's pick."""
    enc = build("deberta", n_heads=8, head_dim=64, causal=False, max_len=512)
    key = "deberta/blocks/bidirectional/fwd+bwd"

    def doc(dense_ms, chunked_ms):
        return {"shape": {"batch": 1, "heads": 8, "head_dim": 64}, "lengths": [256],
                "cells": {key: {"256": "dense"}},
                "records": [{"key": key, "N": 256, "dense_ms": dense_ms, "chunked_ms": chunked_ms}]}

    req = _req_at(enc, 256, causal=False, grad=True, D=64)  # 8 * 256 * 256 * 4 = 2 MiB
    for d, want_small, want_large in ((doc(100.0, 105.0), "dense", "chunked"), (doc(100.0, 120.0), "dense", "dense"),
                                      (doc(None, None), "dense", "dense")):
        monkeypatch.setattr(auto, "table_for", lambda head_dim, batch=None, d=d: d)
        monkeypatch.setattr(auto, "LARGE_DENSE_BYTES", 64 * 2**20)
        assert auto.choose(req) == want_small
        monkeypatch.setattr(auto, "LARGE_DENSE_BYTES", 8 * 256 * 256 * 4)
        assert auto.choose(req) == want_large


def test_lookup_buckets_modes_and_fallbacks():
    doc = {"shape": {"batch": 1, "heads": 8}, "cells": {
        "alibi/regions/causal/fwd": {"256": "dense", "2048": "chunked"},
        "alibi/regions/causal/fwd+bwd": {"256": "chunked", "2048": "dense"},
        "*/blocks/causal/fwd": {"256": "chunked", "2048": "dense"},
    }}
    enc = build("alibi", n_heads=8, causal=True, max_len=4096)
    assert auto.table_pick(_req_at(enc, 300, causal=True, grad=False), doc) == ("dense", "alibi/regions/causal/fwd@256")
    assert auto.table_pick(_req_at(enc, 1024, causal=True, grad=False), doc)[0] == "chunked"  # nearer 2048 in log
    assert auto.table_pick(_req_at(enc, 4096, causal=True, grad=False), doc)[0] == "chunked"  # past the last bucket
    assert auto.table_pick(_req_at(enc, 300, causal=True, grad=True), doc)[0] == "chunked"  # fwd+bwd row
    with torch.no_grad():
        assert auto.table_pick(_req_at(enc, 300, causal=True, grad=True), doc)[0] == "dense"  # no autograd: fwd
    # the same work in a batched call reads the same cell: B * H * N^2 = 8 * 2048^2
    with torch.no_grad():
        assert auto.table_pick(_req_at(enc, 1024, causal=True, grad=False, B=4), doc)[1].endswith("@2048")
    # padding moves alibi to the 'blocks' engine: its engine-level row answers
    q = torch.zeros(1, 8, 2048, 8)
    pad = torch.ones(1, 2048, dtype=torch.bool)
    assert auto.table_pick(request(q, q, q, enc, causal=True, key_padding_mask=pad), doc) == (
        "dense", "*/blocks/causal/fwd@2048")
    # no row at all (bidirectional here): the pair-count fallback
    assert auto.table_pick(_req_at(enc, 300, causal=False, grad=False), doc) is None


def test_without_a_table_auto_falls_back_by_size(monkeypatch, tmp_path):
    monkeypatch.setattr(auto, "TABLE_PATH", tmp_path / "missing.json")
    auto.table.cache_clear()
    try:
        enc = build("t5", n_heads=2, causal=True)
        assert auto.choose(_req(enc, 128)) == "dense"
        assert auto.choose(_req(enc, 1024)) == "chunked"
    finally:
        auto.table.cache_clear()


@pytest.mark.parametrize("forced", ["dense", "chunked"])
@pytest.mark.parametrize("name", ["deberta", "t5", "fire"])
@pytest.mark.parametrize("causal", [True, False])
def test_auto_is_exact_whichever_the_table_picks(monkeypatch, forced, name, causal):
    enc = build(name, n_heads=3, causal=causal)
    monkeypatch.setattr(auto, "table_pick", lambda req, doc=None: (forced, "test"))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 8, generator=g, requires_grad=True) for _ in range(3))
    params = [p for p in enc.parameters() if p.requires_grad]
    outs = []
    for impl in ("auto", "reference"):
        out = relpos.attention(q, k, v, enc, causal=causal, impl=impl)
        outs.append((out, torch.autograd.grad((out * out.detach().sin()).sum(), [q, k, v, *params])))
        if impl == "auto":
            assert auto.last_choice == forced
    (o, gs), (ro, rgs) = outs
    torch.testing.assert_close(o, ro, atol=2e-4, rtol=1e-3)
    for a, b in zip(gs, rgs):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3)


@pytest.mark.parametrize("name", attention_schemes())
def test_cuda_picks(name):
    enc = build(name, n_heads=2, causal=True)
    inside = enc.acts_on - {"embedding", "qk"}
    pick = auto.choose(_req(enc, 128), device_type="cuda")
    if not inside:
        assert pick == "dense"
    elif "value" in inside:
        assert pick == "dense"
        assert auto.choose(_req(enc, 4096), device_type="cuda") == "chunked"
    else:
        assert pick == "flex"


def test_says_what_it_picked(caplog):
    enc = build("t5", n_heads=2, causal=True)
    q = k = v = torch.randn(1, 2, 800, 8)
    with caplog.at_level(logging.DEBUG, logger="relpos.attention"):
        relpos.attention(q, k, v, enc, causal=True, impl="auto")
    expected = auto.choose(request(q, k, v, enc, causal=True))
    assert auto.last_choice == expected
    assert any("auto:" in r.message and f"-> {expected}" in r.message for r in caplog.records)
    relpos.attention(q[:, :, :4], k[:, :, :4], v[:, :, :4], enc, causal=True, impl="auto")
    assert auto.last_choice == "dense"


def test_auto_trains_where_explicit_flex_refuses():
    enc = build("alibi", n_heads=2, causal=True)
    q, k, v = (torch.randn(1, 2, 300, 8, requires_grad=True) for _ in range(3))
    with pytest.raises(UnsupportedError):
        relpos.attention(q, k, v, enc, causal=True, impl="flex")
    out = relpos.attention(q, k, v, enc, causal=True, impl="auto")
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")
    torch.testing.assert_close(out, ref, atol=2e-4, rtol=1e-3)


def test_never_dense_past_the_memory_cap(monkeypatch):
    enc = build("deberta", n_heads=8, causal=False, max_len=64)
    monkeypatch.setattr(auto, "table_pick", lambda req, doc=None: ("dense", "test"))
    monkeypatch.setattr(auto, "DENSE_MAX_BYTES", 8 * 64 * 64 * 4 - 1)
    assert auto.choose(_req_at(enc, 63, causal=False, grad=True)) == "dense"
    assert auto.choose(_req_at(enc, 64, causal=False, grad=True)) == "chunked"


def test_an_engine_a_scheme_takes_only_at_some_lengths_reads_the_engine_row():
    # FIRE past its threshold uses the per-pair engine; the table measured FIRE below it at N = 64
    enc = build("fire", n_heads=8, causal=True, init_L=4.0)
    req = _req_at(enc, 64, causal=True, grad=True, D=64)
    impl, cell = auto.table_pick(req)
    engine = chunked.engine_for(req)  # "piecewise" (the FIRE kernel) where the kernels are built, else "blocks"
    assert engine in ("piecewise", "blocks") and "64" not in TABLE["cells"].get(f"fire/{engine}/causal/fwd+bwd", {})
    assert cell == f"*/{engine}/causal/fwd+bwd@64" and impl == TABLE["cells"][f"*/{engine}/causal/fwd+bwd"]["64"]


def test_the_fire_kernel_engine_rows():
    """Main table: the "piecewise" rows at N <= 512 were not measured (FIRE's default threshold keeps those
    lengths Toeplitz); they repeat the "blocks" rows FIRE past its threshold took before the kernel. The D = 16
    tables measure them: FIRE configured for N / 2 ("fire@half") at N, so every "*/piecewise" cell is its."""
    rows = {k: v for k, v in TABLE["cells"].items() if k.startswith("*/piecewise/")}
    assert rows and all(v[n] == TABLE["cells"][k.replace("/piecewise/", "/blocks/")][n]
                        for k, v in rows.items() for n in v if int(n) <= 512)
    for name in ("d16", "d16_b4"):
        doc = TABLES[name]
        star = {k: v for k, v in doc["cells"].items() if k.startswith("*/piecewise/")}
        assert len(star) == 4, name  # both masks, both modes
        for k, v in star.items():
            assert v == doc["cells"][k.replace("*/", "fire@half/", 1)], (name, k)
            measured = {str(r["N"]) for r in doc["records"] if r["key"] == k.replace("*/", "fire@half/", 1)}
            assert measured == set(v), (name, k)


