"""KERPLE log and power kernels: formula, parameter ranges, gradients, properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.kerple import Kerple
from tests.helpers import randomize_parameters

KERNELS = ["log", "power"]


def _enc(kernel, H=3, std=0.5, seed=0):
    enc = Kerple(n_heads=H, kernel=kernel)
    randomize_parameters(enc, std=std, seed=seed)
    return enc


def test_registry_names_params_and_sites():
    for name, kernel in [("kerple-log", "log"), ("kerple-power", "power")]:
        enc = relpos.make_encoding(name, n_heads=6)
        assert enc.kernel == kernel and enc.name == name
        assert enc.num_params() == 12
        assert enc.acts_on == frozenset({"bias"}) and enc.toeplitz and enc.relative


@pytest.mark.parametrize("kernel", KERNELS)
def test_bias_follows_the_paper_formula(kernel):
    enc = _enc(kernel)
    d = torch.tensor([-7, -1, 0, 1, 2, 30])
    b = enc.relative_bias(d)  # (H, 6)
    r1, r2 = enc.r1, enc.r2
    for h in range(3):
        for a, dv in enumerate(d.abs().tolist()):
            if kernel == "log":
                want = -r1[h] * torch.log(1 + r2[h] * dv)
            else:
                want = -r1[h] * (float(dv) ** r2[h])
            assert b[h, a].item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("kernel", KERNELS)
def test_init_ranges(kernel):
    enc = Kerple(n_heads=16, kernel=kernel)
    assert ((enc.r1 > 0.009) & (enc.r1 < 2.001)).all()
    assert ((enc.r2 > 0.009) & (enc.r2 < 1.001)).all()
    assert enc.r1.unique().numel() > 1  # heads differ


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("raw", [-60.0, -5.0, 0.0, 5.0, 60.0])
def test_parameterisation_keeps_constraints(kernel, raw):
    enc = Kerple(n_heads=2, kernel=kernel)
    with torch.no_grad():
        enc.raw_r1.fill_(raw)
        enc.raw_r2.fill_(raw)
    assert (enc.r1 >= 0).all() and (enc.r2 >= 0).all()
    if kernel == "power":
        assert (enc.r2 <= 2).all()
    b = enc.relative_bias(torch.arange(-50, 51))
    assert torch.isfinite(b).all() and (b <= 0).all()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("contiguous", [True, False])
def test_bias_and_gradients_match_reference(kernel, contiguous):
    enc = _enc(kernel)
    if contiguous:
        qpos, kpos = torch.arange(3, 7)[None], torch.arange(7)[None]
        fast = relpos.distance.toeplitz(enc.relative_bias(relpos.distance.offsets_range(4, 7, 3)), 4, 7)[None]
    else:
        qpos = torch.tensor([[3, 9, 10], [0, 4, 40]])
        kpos = torch.tensor([[0, 3, 5, 9, 10], [0, 0, 4, 11, 40]])
        fast = enc.bias(qpos, kpos)
    ref = enc.reference_bias(qpos, kpos)
    assert ref.dtype == torch.float64
    torch.testing.assert_close(fast.double().expand_as(ref), ref, atol=1e-5, rtol=1e-5)
    w = torch.linspace(-1, 1, ref.numel()).view_as(ref)
    g_fast = torch.autograd.grad((fast.expand_as(ref) * w.float()).sum(), [enc.raw_r1, enc.raw_r2])
    g_ref = torch.autograd.grad((ref * w).sum(), [enc.raw_r1, enc.raw_r2])
    for g, rg in zip(g_fast, g_ref):
        assert torch.isfinite(g).all()  # power kernel: no 0 * log(0) at i = j
        assert g.abs().min() > 0
        torch.testing.assert_close(g, rg, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kernel", KERNELS)
def test_attention_gradients_match_reference(kernel):
    enc = _enc(kernel)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g, requires_grad=True) for n in (4, 10, 10))
    params = [enc.raw_r1, enc.raw_r2]

    def run(impl):
        out = relpos.attention(q, k, v, enc, impl=impl, causal=True, q_offset=6)
        return out, torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), params)

    out, grads = run("dense")
    ref, ref_grads = run("reference")
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("kernel", KERNELS)
@given(c=st.integers(-1000, 1000), seed=st.integers(0, 100))
def test_bias_unchanged_when_all_positions_shift(kernel, c, seed):
    enc = _enc(kernel, seed=seed)
    qpos, kpos = torch.tensor([[4, 9, 12]]), torch.tensor([[0, 2, 4, 7, 9, 12]])
    torch.testing.assert_close(enc.bias(qpos, kpos), enc.bias(qpos + c, kpos + c), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
@given(seed=st.integers(0, 1000))
def test_bias_is_symmetric_and_non_increasing_in_distance(kernel, seed):
    enc = _enc(kernel, std=2.0, seed=seed)
    d = torch.arange(0, 200)
    b = enc.relative_bias(d)
    torch.testing.assert_close(b, enc.relative_bias(-d))
    assert (b[:, 1:] <= b[:, :-1] + 1e-6).all()
    assert (b[:, 0] == 0).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="kernel"):
        Kerple(n_heads=2, kernel="gaussian")
    with pytest.raises(ValueError, match="n_heads"):
        Kerple(n_heads=0)
    with pytest.raises(TypeError, match="r3"):
        relpos.make_encoding("kerple-log", r3=1.0)
