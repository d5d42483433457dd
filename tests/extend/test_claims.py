"""The extend benchmark's claim rules flip between holds / does not hold / not testable here (issue 50), and the
rate is chosen on validation, never on test."""

from __future__ import annotations

import zlib

import numpy as np

from relpos.extend.report import FAILS, HOLDS, UNTESTABLE, claims, select, steps_to_match

L, FACTOR, EF = 8, 4, (1, 4, 8, 16)
GRID = [0, 10, 30, 100]


def _row(recipe, seed, k, losses, *, lr=1e-3, val=1.0):
    rng = np.random.default_rng(zlib.crc32(f"{recipe}/{seed}/{k}".encode()))
    lengths = {}
    for f in EF:
        n = f * L
        v = losses.get(f, 3.0)
        w = (v + 0.01 * rng.standard_normal(16)).round(6).tolist()
        lengths[str(n)] = {"loss": float(np.mean(w)), "windows": w, "far": w, "far_loss": float(np.mean(w))}
    return {"recipe": recipe, "seed": seed, "lr": lr if k else 0.0, "k": k, "val_loss": val, "lengths": lengths}


def _rows(curves: dict, seeds=(0, 1, 2)):
    """curves: recipe -> {k: {factor: loss}}."""
    return [_row(r, s, k, by) for r, ks in curves.items() for k, by in ks.items() for s in seeds]


def _flat(v4, v8=None, v16=None):
    return {1: 1.0, 4: v4, 8: v8 if v8 is not None else v4, 16: v16 if v16 is not None else v4}


def _outcomes(rows, grid=GRID, ef=EF):
    return {c["claim"]: c["outcome"] for c in claims(select(rows), grid, L, FACTOR, ef)}


def _base(pi_at_4=(3.0, 2.5, 2.0), yarn_at_4=(2.6, 1.95, 1.9), direct_at_4=(3.5, 3.3, 3.1), yarn_far=1.5,
          pi_far=2.5):
    ks = GRID[1:]
    return {
        "direct": {0: _flat(5.0), **{k: _flat(v) for k, v in zip(ks, direct_at_4)}},
        "pi": {0: _flat(4.0), **{k: _flat(v, pi_far, pi_far) for k, v in zip(ks, pi_at_4)}},
        "yarn": {0: _flat(4.0), **{k: _flat(v, yarn_far, yarn_far) for k, v in zip(ks, yarn_at_4)}},
    }


def test_all_three_hold():
    assert _outcomes(_rows(_base())) == {"pi_beats_direct": HOLDS, "yarn_half_steps": HOLDS, "yarn_beyond": HOLDS}


def test_pi_beats_direct_flips_when_direct_wins_at_one_k():
    got = _outcomes(_rows(_base(direct_at_4=(3.5, 2.0, 3.1))))
    assert got["pi_beats_direct"] == FAILS


def test_yarn_half_steps_flips_when_yarn_needs_as_many_steps():
    got = _outcomes(_rows(_base(yarn_at_4=(2.6, 2.4, 1.9))))
    assert got["yarn_half_steps"] == FAILS


def test_yarn_half_steps_not_testable_without_a_k_at_half():
    curves = _base()
    rows = [r for r in _rows(curves) if r["k"] in (0, 100)]
    assert _outcomes(rows, grid=[0, 100])["yarn_half_steps"] == UNTESTABLE


def test_yarn_beyond_flips_when_pi_is_better_at_16x():
    curves = _base()
    for k in GRID[1:]:
        curves["yarn"][k][16] = 3.0  # worse than PI's 2.5 at 16x
    assert _outcomes(_rows(curves))["yarn_beyond"] == FAILS


def test_yarn_beyond_not_testable_without_lengths_past_the_factor():
    assert _outcomes(_rows(_base()), ef=(1, 4))["yarn_beyond"] == UNTESTABLE


def test_one_seed_is_not_testable():
    got = _outcomes(_rows(_base(), seeds=(0,)))
    assert got == {"pi_beats_direct": UNTESTABLE, "yarn_half_steps": UNTESTABLE, "yarn_beyond": UNTESTABLE}


def test_unfitted_models_are_never_a_conclusion():
    out = claims(select(_rows(_base())), GRID, L, FACTOR, EF, fitted=False)
    assert {c["outcome"] for c in out} == {UNTESTABLE}


def test_rate_is_chosen_by_validation_not_test():
    good_test = _row("pi", 0, 10, _flat(1.0), lr=1e-3, val=2.0)   # best on test, worse on validation
    good_val = _row("pi", 0, 10, _flat(3.0), lr=3e-3, val=1.0)
    sel = select([good_test, good_val])
    assert sel[("pi", 10)][0]["lr"] == 3e-3


def test_steps_to_match():
    sel = select(_rows(_base()))
    assert steps_to_match(sel, GRID, 4 * L, 2.0, "yarn") == 30
    assert steps_to_match(sel, GRID, 4 * L, 2.05, "pi") == 100
    assert steps_to_match(sel, GRID, 4 * L, 1.0, "pi") is None


def test_extend_imports_nothing_from_above():
    """The package's docstring: training, the compare store/config, the HF evaluation and the bridge; never the
    command line or the explorer."""
    import ast
    from pathlib import Path

    import relpos.extend

    for f in Path(relpos.extend.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for n in names:
                assert not n.startswith(("relpos.commands", "relpos.explorer", "relpos.cli")), (f.name, n)
