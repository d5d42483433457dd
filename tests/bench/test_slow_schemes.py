"""``benchmarks/slow_schemes.py``: its floor's pieces compute what they stand for, and the table end to end."""

from __future__ import annotations

import json

import torch

from tests.bench.scripts import load_script


def _inputs(N=40, H=2, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v, go = (torch.randn(1, H, N, D, generator=g, dtype=torch.float64) for _ in range(4))
    return q, k, v, go


def test_floor_pieces_form_the_true_ds_and_gradients():
    """``ds`` forms the logits' gradient of causal attention and ``own`` SDPA's gradients, block by block."""
    mod = load_script("slow_schemes")
    q, k, v, go = _inputs()
    N, D = q.shape[2], q.shape[3]
    scale = D ** -0.5
    ds, own = mod._ds_cases(q, k, v, go, scale, rows=16)  # blocks of 16, 16, 8 rows
    # reference: autograd through the logits of causal softmax attention
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    logits = (qr @ kr.transpose(-1, -2) * scale).masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), -torch.inf)
    logits.retain_grad()
    (logits.softmax(-1) @ vr).backward(go)
    got = ds()
    assert [b.shape[-2:] for b in got] == [(16, 16), (16, 32), (8, 40)]
    lower = torch.ones(N, N, dtype=torch.bool).tril()
    for (a, b, C), blk in zip(mod._blocks(N, 16), got):
        keep = lower[a:b, :C]
        torch.testing.assert_close(blk[..., keep], logits.grad[:, :, a:b, :C][..., keep])
    for mine, ref in zip(own(), (qr.grad, kr.grad, vr.grad)):
        torch.testing.assert_close(mine, ref)


def test_table_and_bound(tmp_path):
    mod = load_script("slow_schemes")
    assert mod.main(["--n", "64", "--rounds", "1", "--rows", "16", "--schemes", "transformer-xl,cope",
                     "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "slow_schemes.json").read_text())
    rows = {r["scheme"]: r for r in doc["rows"]}
    assert list(rows) == ["transformer-xl", "cope"]
    for r in rows.values():
        assert r["floor_ds_ms"] >= r["term_ms"] + r["recompute_ms"] and r["floor_ds_x"] > 0
        assert r["bounded"] == (r["floor_x"] > r["target_x"])
    md = (tmp_path / "slow_schemes.md").read_text()
    assert "| transformer-xl |" in md and "cost of the parts" in md
    # Transformer-XL's relkey engine times its own steps; CoPE's engine names none (no engine case)
    from relpos.kernels import relkey

    if relkey.usable(torch.zeros(1)):  # the compiled passes: every step is named
        txl = rows["transformer-xl"]
        assert set(mod.BOUND_PARTS) | {"kernel passes", mod.OUTSIDE} == set(txl["engine_parts_ms"])
        assert abs(txl["engine_bound_x"] - sum(txl["engine_parts_x"][k] for k in mod.BOUND_PARTS)) <= 0.03
        assert txl["bounded_by_parts"] == (txl["engine_bound_x"] > txl["target_x"])
        assert "the `chunked` engine's own steps" in md
    assert "engine_parts_ms" not in rows["cope"]


def test_engine_parts_bidirectional(tmp_path):
    """Transformer-XL runs without the causal mask too; the engine's clock is off again after the run."""
    from relpos.attention.chunked import parts

    mod = load_script("slow_schemes")
    assert mod.main(["--n", "48", "--rounds", "1", "--rows", "16", "--schemes", "transformer-xl",
                     "--bidirectional", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "slow_schemes.json").read_text())
    assert doc["causal"] is False and doc["rows"][0]["causal"] is False
    assert parts.clock is None


def test_schemes_are_checked(capsys):
    mod = load_script("slow_schemes")
    assert mod.main(["--schemes", "t5"]) == 2
    assert "--schemes" in capsys.readouterr().err


def test_other_shapes_and_names(tmp_path):
    """`--batch/--heads/--head-dim` measure another shape (the `small`/1024 model's) under its own file stem."""
    mod = load_script("slow_schemes")
    assert mod.main(["--n", "48", "--rounds", "1", "--rows", "16", "--schemes", "fire,deberta", "--batch", "2",
                     "--heads", "2", "--head-dim", "8", "--name", "small", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "small.json").read_text())
    assert (doc["batch"], doc["heads"], doc["head_dim"], doc["N"]) == (2, 2, 8, 48)
    assert [r["scheme"] for r in doc["rows"]] == ["fire", "deberta"]
    assert "N = 48, B = 2, H = 2, D = 8" in (tmp_path / "small.md").read_text()
    assert mod.main(["--batch", "0"]) == 2


def test_bidirectional_leaves_out_causal_only_schemes(tmp_path, capsys):
    mod = load_script("slow_schemes")
    assert mod.main(["--bidirectional", "--schemes", "cope"]) == 2
    assert "causal attention only" in capsys.readouterr().err
    assert mod.main(["--n", "32", "--rounds", "1", "--rows", "16", "--bidirectional", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "slow_schemes.json").read_text())
    assert [r["scheme"] for r in doc["rows"]] == [s for s in mod.SCHEMES if s not in mod.CAUSAL_ONLY]


def test_multiples_are_per_round_ratios():
    """A host that slows down between rounds: the ratio taken within each round is steady where a ratio of
    the two medians pairs a fast round's SDPA with a slow round's relpos (5c219ce's DeBERTa: 3.43x vs 2.78x)."""
    mod = load_script("slow_schemes")
    sdpa = [240.0, 240.0, 240.0, 320.0, 320.0]  # the host slows by a third after round 3
    relpos = [670.0, 670.0, 890.0, 890.0, 890.0]  # relpos's third round already fell in the slow spell
    assert mod._ratio(relpos, sdpa) == 670.0 / 240.0  # rounds: 2.79, 2.79, 3.71, 2.78, 2.78
    assert round(mod._ratio(relpos, sdpa), 2) < round(890.0 / 240.0, 2)  # what a ratio of medians would say
