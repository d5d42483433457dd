"""Plans: the default plan, grids and the scheme list."""

from __future__ import annotations

from relpos import bench


def test_default_plan_covers_every_scheme_and_long_lengths():
    cases = bench.default_cases("cpu")
    for N in (256, 1024, 2048):  # auto against every implementation, every scheme, both modes
        assert {c.scheme for c in cases if c.N == N} == set(bench.attention_schemes())
        assert {c.impl for c in cases if c.N == N} == set(bench.default_impls("cpu"))
        assert {c.mode for c in cases if c.N == N} == set(bench.MODES)
    assert {c.scheme for c in cases if c.N == 8192} == set(bench.SAMPLE_SCHEMES)
    assert {c.impl for c in cases if c.N == 8192} == {"chunked", "auto"}
    assert max(c.N for c in cases) == 16384
    assert all(c.impl == "chunked" for c in cases if c.N == 16384)
    bi = bench.default_cases("cpu", causal=False)
    assert max(c.N for c in bi) == 8192
    assert not {"cope", "fox", "xpos"} & {c.scheme for c in bi}  # causal-only schemes
    assert "flex" not in bench.default_impls("cpu")
    assert not any(":" in c.impl for c in cases)
    assert any(c.impl.startswith("peer:") for c in bench.default_cases("cpu", peers=True))
    bi_peers = {c.impl for c in bench.default_cases("cpu", peers=True, causal=False)}
    assert "peer:hf-deberta" in bi_peers and "peer:cope-paper" not in bi_peers and "peer:ret-xpos" not in bi_peers


def test_attention_schemes_keep_one_rotary_preset_per_class():
    from relpos.encodings import get_scheme, scheme_names

    names = bench.attention_schemes()
    assert "rope" in names and "xpos" in names and "nope" in names
    assert "sinusoidal" not in names and "learned" not in names  # embedding only
    # every registered scheme that acts inside attention is covered by a listed name of its class
    classes = {get_scheme(n)[0] for n in names}
    assert all(get_scheme(n)[0] in classes for n in scheme_names() if n not in ("sinusoidal", "learned"))
    rotary = [n for n in names if get_scheme(n)[0] is get_scheme("rope")[0]]
    assert rotary == ["rope"]
    assert {"shaw", "shaw-kv", "kerple-log", "kerple-power"} <= set(names)  # presets that change the kernels


def test_grid_cases():
    cases = bench.grid_cases(["t5", "alibi"], ["dense", "peers"], [64, 128], ["fwd"])
    own = [c for c in cases if ":" not in c.impl]
    assert len(own) == 2 * 1 * 2 * 1
    assert any(c.impl.startswith("peer:") for c in cases)
    assert all(c.mode == "fwd" for c in cases)
