"""The compiled rows kernel against its plain-PyTorch oracle, and the build's fallbacks.

Skipped, with the reason, where the kernel is not built; ``make test`` builds it and sets
``RELPOS_REQUIRE_KERNELS=1``, under which a missing kernel fails instead.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos import kernels
from relpos.encodings.deberta import DeBERTa
from relpos.kernels import rows
from tests.helpers import randomize_parameters

BUILT = kernels.load() is not None
needs_kernel = pytest.mark.skipif(not BUILT, reason=f"relpos kernels: {kernels.status()}")


def test_kernel_is_built_where_make_promises_it():
    if os.environ.get("RELPOS_REQUIRE_KERNELS") == "1":
        assert BUILT, kernels.status()
    else:
        pytest.skip("RELPOS_REQUIRE_KERNELS is not set (make test sets it)")


def _case(seed, B, H, nq, nk, n_rows, layout, terms, dtype, strided):
    """States, positions and a monotone-or-arbitrary table covering every distance the positions reach."""
    g = torch.Generator().manual_seed(seed)
    if layout == "contiguous":
        off = int(torch.randint(-50, 50, (1,), generator=g))
        qpos, kpos = torch.arange(off, off + nq)[None], torch.arange(nk)[None]
    else:  # per example, sorted with gaps (keys not at unit steps: the per-pair loop)
        qpos = torch.sort(torch.randint(0, 3 * nq, (B, nq), generator=g), -1).values
        kpos = torch.sort(torch.randint(0, 3 * nk, (B, nk), generator=g), -1).values
    rlo = int(qpos.min() - kpos.max())
    T = int(qpos.max() - kpos.min()) - rlo + 1
    if layout == "contiguous":  # monotone with runs, as log buckets and clipping give
        table = torch.sort(torch.randint(0, n_rows, (T,), generator=g)).values
    else:
        table = torch.randint(0, n_rows, (T,), generator=g)
    pad = 3 if strided else 0  # slices of a wider state, as the engines pass blocks
    C = torch.randn(B, H, nq, n_rows + pad, generator=g, dtype=dtype)[..., :n_rows] if "c2p" in terms else None
    P = torch.randn(B, H, n_rows, nk + pad, generator=g, dtype=dtype)[..., :nk] if "p2c" in terms else None
    return C, P, qpos, kpos, table, rlo


CASES = dict(
    seed=st.integers(0, 10**6), B=st.integers(1, 3), H=st.integers(1, 3), nq=st.integers(1, 20),
    nk=st.integers(1, 40), n_rows=st.integers(1, 40), layout=st.sampled_from(["contiguous", "gapped"]),
    terms=st.sampled_from([("c2p",), ("p2c",), ("c2p", "p2c")]), dtype=st.sampled_from([torch.float32, torch.float64]),
    strided=st.booleans(),
)


@needs_kernel
@given(**CASES)
def test_gather_and_its_gradient_equal_the_oracle(seed, B, H, nq, nk, n_rows, layout, terms, dtype, strided):
    C, P, qpos, kpos, table, rlo = _case(seed, B, H, nq, nk, n_rows, layout, terms, dtype, strided)
    leaves = [t.detach().requires_grad_(True) if t is not None else None for t in (C, P)]
    want = rows.reference(*leaves, qpos, kpos, table, rlo)
    got = rows.gather(*leaves, qpos, kpos, table, rlo)
    torch.testing.assert_close(got, want, rtol=0, atol=0)  # a copy and at most one add: exact
    ds = torch.randn_like(want)
    live = [t for t in leaves if t is not None]
    gw = torch.autograd.grad(want, live, ds)
    gg = torch.autograd.grad(got, live, ds)
    for a, b in zip(gg, gw):  # sums in another order: rounding only
        torch.testing.assert_close(a, b)


@needs_kernel
@given(**CASES)
def test_in_place_add_and_scatter_into_views(seed, B, H, nq, nk, n_rows, layout, terms, dtype, strided):
    C, P, qpos, kpos, table, rlo = _case(seed, B, H, nq, nk, n_rows, layout, terms, dtype, strided)
    base = torch.randn(B, H, nq, nk, dtype=dtype)
    out = base.clone()
    rows.gather(C, P, qpos, kpos, table, rlo, out=out)
    torch.testing.assert_close(out, base + rows.reference(C, P, qpos, kpos, table, rlo))
    # scatter adds into existing gradients (views of wider buffers, as a block of the call's state)
    gC0 = torch.randn(B, H, nq, n_rows + 2, dtype=dtype) if C is not None else None
    gP0 = torch.randn(B, H, n_rows, nk + 2, dtype=dtype) if P is not None else None
    gC, gP = (gC0.clone() if gC0 is not None else None), (gP0.clone() if gP0 is not None else None)
    ds = torch.randn(B, H, nq, nk, dtype=dtype)
    rows.scatter_(None if gC is None else gC[..., :n_rows], None if gP is None else gP[..., :nk],
                  ds, qpos, kpos, table, rlo)
    leaves = [torch.zeros_like(t).requires_grad_(True) if t is not None else None for t in (C, P)]
    want = torch.autograd.grad(rows.reference(*leaves, qpos, kpos, table, rlo), [t for t in leaves if t is not None], ds)
    it = iter(want)
    if gC is not None:
        torch.testing.assert_close(gC[..., :n_rows], gC0[..., :n_rows] + next(it))
        assert torch.equal(gC[..., n_rows:], gC0[..., n_rows:])  # nothing written outside the view
    if gP is not None:
        torch.testing.assert_close(gP[..., :nk], gP0[..., :nk] + next(it))
        assert torch.equal(gP[..., nk:], gP0[..., nk:])


@needs_kernel
def test_kernel_refuses_tables_and_positions_it_would_read_past():
    C = torch.randn(1, 1, 3, 4)
    pos = torch.arange(3)[None]
    with pytest.raises(RuntimeError, match="table row out of range"):
        rows.gather(C, None, pos, pos, torch.tensor([0, 1, 4, 2, 3]), -2)
    with pytest.raises(RuntimeError, match="outside the table"):
        rows.gather(C, None, pos, pos, torch.tensor([0, 1, 2, 3]), -2)  # distance 2 has no entry
    with pytest.raises(RuntimeError, match="must not be expanded"):
        rows.scatter_(torch.zeros(1, 1, 3, 4).expand(2, 1, 3, 4), None, torch.zeros(2, 1, 3, 3), pos, pos,
                      torch.tensor([0, 1, 2, 3, 3]), -2)
    with pytest.raises(RuntimeError, match="row state must be"):
        rows.gather(C, None, torch.arange(2)[None], torch.arange(4)[None], torch.zeros(5, dtype=torch.long), -3)


@needs_kernel
@pytest.mark.parametrize("impl,causal", [("chunked", True), ("chunked", False), ("dense", True)])
@pytest.mark.parametrize("terms", ["c2p|p2c", "c2p", "p2c"])
def test_deberta_attention_with_and_without_the_kernel(monkeypatch, impl, causal, terms):
    """The kernel serves DeBERTa's dense and chunked paths (log buckets reached, several blocks):
    outputs and every gradient as the PyTorch path, which the float64 reference tests check."""
    from relpos.attention import chunked

    monkeypatch.setattr(chunked, "FORCE_ROWS", 16)
    enc = DeBERTa(n_heads=2, head_dim=8, terms=terms, position_buckets=16, max_relative_positions=40)
    randomize_parameters(enc)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 70, 8, generator=g, requires_grad=True) for _ in range(3))
    res, real = {}, rows.gather
    for on in (False, True):
        monkeypatch.setattr(kernels, "ENABLED", on)
        calls = []
        monkeypatch.setattr(rows, "gather", lambda *a, **kw: calls.append(1) or real(*a, **kw))
        out = relpos.attention(q, k, v, enc, causal=causal, impl=impl)
        grads = torch.autograd.grad((out * torch.linspace(-1, 1, 8)).sum(), [q, k, v, *enc.parameters()])
        assert bool(calls) == on  # the kernel ran exactly when switched on
        res[on] = (out, grads)
    torch.testing.assert_close(res[True][0], res[False][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(res[True][1], res[False][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_switched_off_kernels_say_so_and_are_not_loaded(monkeypatch):
    monkeypatch.setattr(kernels, "ENABLED", False)
    assert kernels.load() is None and kernels.status().startswith("off")
    assert not rows.usable(torch.zeros(1, 1, 1, 1))


def test_build_without_a_compiler_says_why_in_one_line(monkeypatch, tmp_path):
    import torch.utils.cpp_extension as ext

    def no_ninja():
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setenv("RELPOS_KERNEL_DIR", str(tmp_path / "k"))
    monkeypatch.setattr(ext, "verify_ninja_availability", no_ninja)
    ok, msg = kernels.build()
    assert not ok and "\n" not in msg and "Ninja is required" in msg and "PyTorch paths" in msg
    assert not (tmp_path / "k").exists() or not any((tmp_path / "k").iterdir())  # nothing half-built left


def test_a_missing_build_is_reported_not_compiled(monkeypatch, tmp_path):
    monkeypatch.setenv("RELPOS_KERNEL_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "_loaded", {})
    assert kernels.load() is None
    assert "not built" in kernels.status() and str(tmp_path) in kernels.status()
    assert list(tmp_path.iterdir()) == []  # loading never compiles or writes


@needs_kernel
@pytest.mark.parametrize("rows_from, rows_to", [(0, 120), (40, 57)])
def test_short_and_long_runs_in_one_row_equal_the_oracle(rows_from, rows_to):
    """Issue 52: the kernel reads runs shorter than 8 keys key by key and longer ones run by run, both in one
    query row, as DeBERTa's exact, log and clamped buckets give a bidirectional row (about 500 short runs a row
    at N = 2048, where walking them run by run cost more than the keys): the gather exact, the gradients to
    rounding, for a whole call and for a block of query rows."""
    enc = DeBERTa(n_heads=2, head_dim=8, position_buckets=16, max_relative_positions=40)
    pos = torch.arange(120)[None]
    table, rlo = enc._distance_rows(pos, pos)
    runs = torch.unique_consecutive(table, return_counts=True)[1]
    assert runs.min() == 1 and runs.max() >= 8 and bool(((runs > 1) & (runs < 8)).any())
    n_rows = int(table.max()) + 1
    qpos = pos[:, rows_from:rows_to]
    g = torch.Generator().manual_seed(0)
    C = torch.randn(2, 2, qpos.shape[1], n_rows, generator=g, dtype=torch.float64, requires_grad=True)
    P = torch.randn(2, 2, n_rows, 120, generator=g, dtype=torch.float64, requires_grad=True)
    for c, p in ((C, P), (C, None), (None, P)):
        want = rows.reference(c, p, qpos, pos, table, rlo)
        got = rows.gather(c, p, qpos, pos, table, rlo)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        ds = torch.randn(want.shape, generator=g, dtype=torch.float64)
        live = [t for t in (c, p) if t is not None]
        for a, b in zip(torch.autograd.grad(got, live, ds), torch.autograd.grad(want, live, ds)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
