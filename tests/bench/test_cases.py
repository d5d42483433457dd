"""Plans: the default plan, grids and the scheme list."""

from __future__ import annotations

from relpos import bench


def test_default_plan_covers_every_scheme_and_long_lengths():
    cases = bench.default_cases("cpu")
    schemes = {c.scheme for c in cases if c.N == 2048}
    assert set(bench.attention_schemes()) <= schemes
    assert {c.impl for c in cases if c.N == 2048} == set(bench.default_impls("cpu"))
    assert max(c.N for c in cases) == 16384
    assert all(c.impl == "chunked" for c in cases if c.N == 16384)
    assert all(c.impl != "dense" for c in cases if c.N > bench.DENSE_MAX_N and c.N != 2048)
    assert "flex" not in bench.default_impls("cpu")
    assert not any(":" in c.impl for c in cases)
    assert any(c.impl.startswith("peer:") for c in bench.default_cases("cpu", peers=True))


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
