"""Bad input to relpos.attention gets a clear error naming the parameter."""

from __future__ import annotations

import pytest
import torch

import relpos
from relpos.attention import UnsupportedError


def qkv(B=1, H=2, N=4, D=8, dtype=torch.float32):
    return (torch.randn(B, H, N, D, dtype=dtype) for _ in range(3))


def test_wrong_ndim_names_parameter():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="q must have 4 dims"):
        relpos.attention(q[0], k, v, causal=False)


def test_integer_dtype_rejected():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="k must be a floating-point"):
        relpos.attention(q, k.long(), v, causal=False)


def test_mixed_dtypes_rejected():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="share a dtype"):
        relpos.attention(q, k.double(), v, causal=False)


def test_head_mismatch_names_n_heads():
    q, k, v = qkv(H=3)
    enc = relpos.make_encoding("alibi", n_heads=4, head_dim=8)
    with pytest.raises(ValueError, match="n_heads=4"):
        relpos.attention(q, k, v, enc, causal=False)


def test_k_shape_mismatch():
    q, _, v = qkv()
    k = torch.randn(1, 2, 4, 7)
    with pytest.raises(ValueError, match="k must have shape"):
        relpos.attention(q, k, v, causal=False)


def test_negative_q_offset():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="q_offset must be in \\[0, "):
        relpos.attention(q, k, v, q_offset=-1, causal=False)


def test_causal_queries_past_keys():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="q_offset \\+ Nq <= Nk"):
        relpos.attention(q, k, v, causal=True, q_offset=2)


def test_unknown_impl_lists_choices():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="impl must be one of"):
        relpos.attention(q, k, v, impl="magic", causal=False)


def test_padding_mask_must_be_bool_with_shape():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="key_padding_mask must be a bool"):
        relpos.attention(q, k, v, key_padding_mask=torch.ones(1, 4), causal=False)
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        relpos.attention(q, k, v, key_padding_mask=torch.ones(1, 5, dtype=torch.bool), causal=False)
    with pytest.raises(TypeError, match="key_mask must be a bool"):
        relpos.attention(q, k, v, key_mask=torch.ones(1, 4), causal=False)
    with pytest.raises(ValueError, match="key_mask must have shape"):
        relpos.attention(q, k, v, key_mask=torch.ones(1, 5, dtype=torch.bool), causal=False)


def test_positions_shape_and_dtype():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="positions must have an integer dtype"):
        relpos.attention(q, k, v, positions=torch.arange(4.0), causal=False)
    with pytest.raises(ValueError, match="positions must have shape"):
        relpos.attention(q, k, v, positions=torch.arange(5), causal=False)


def test_encoding_type_checked():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="encoding must be a relpos Encoding"):
        relpos.attention(q, k, v, "t5", causal=False)


def test_unsupported_error_is_value_error():
    assert issubclass(UnsupportedError, ValueError)


def test_bf16_inputs_keep_dtype_and_float32_tables():
    q, k, v = qkv(dtype=torch.bfloat16)
    enc = relpos.make_encoding("t5", n_heads=2, head_dim=8)
    out = relpos.attention(q, k, v, enc, causal=True)
    assert out.dtype == torch.bfloat16
    assert enc.relative_bias(torch.arange(-3, 4)).dtype == torch.float32
    ref = relpos.attention(q.float(), k.float(), v.float(), enc, causal=True, impl="reference")
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)


# ------------------------------------------------------------------ traps (issue 32)


def test_causal_is_required_by_attention_logits_and_request():
    """Leaving ``causal`` out used to give bidirectional attention in a decoder, silently."""
    q, k, v = qkv()
    with pytest.raises(TypeError, match="'causal'.*causal=True.*causal=False"):
        relpos.attention(q, k, v)
    with pytest.raises(TypeError, match="'causal'"):
        relpos.attention.logits(q, k)
    with pytest.raises(TypeError, match="'causal'"):
        relpos.attention.request(q, k, v)
    with pytest.raises(TypeError, match="causal must be a bool"):
        relpos.attention(q, k, v, causal=None)


def test_causal_is_required_by_the_model_attention_layer():
    from relpos.model import MultiHeadAttention

    with pytest.raises(TypeError, match="'causal'"):
        MultiHeadAttention(16, 2, "alibi")
    assert MultiHeadAttention(16, 2, "alibi", causal=True).causal is True


def _embedding_only_class():
    """A scheme with another name that acts only on the embeddings: refused by capability."""
    from relpos.encodings.base import Encoding

    class ShiftedTable(Encoding):
        name = "my-table"
        acts_on = frozenset({"embedding"})
        relative = False

        def embed(self, x, pos):
            return x + pos[..., None].to(x.dtype)

    return ShiftedTable


@pytest.mark.parametrize("name", ["sinusoidal", "learned", None])
def test_embedding_only_schemes_are_refused_with_how_to(name):
    enc = _embedding_only_class()(2) if name is None else relpos.make_encoding(name, n_heads=2, head_dim=8)
    q, k, v = qkv()
    for call in (lambda: relpos.attention(q, k, v, enc, causal=True),
                 lambda: relpos.attention.logits(q, k, enc, causal=True)):
        with pytest.raises(ValueError, match=r"acts only on the token embeddings.*embed\("):
            call()
    from relpos.model import MultiHeadAttention

    with pytest.raises(ValueError, match="token embeddings"):
        MultiHeadAttention(16, 2, enc, causal=True)


def test_nope_and_none_are_still_served():
    q, k, v = qkv()
    a = relpos.attention(q, k, v, relpos.make_encoding("nope", n_heads=2, head_dim=8), causal=True)
    torch.testing.assert_close(a, relpos.attention(q, k, v, None, causal=True))


# ------------------------------------------------------------------ issue 29, item 15


def test_positions_are_bounded_like_q_offset():
    """RoPE at positions near 2**62 was silently wrong; negative positions (a shift) stay allowed."""
    q, k, v = qkv()
    big = torch.tensor([0, 1, 2, 2**62])
    with pytest.raises(ValueError, match=r"positions must be in \[-16777216, 16777216\]"):
        relpos.attention(q, k, v, relpos.make_encoding("rope", n_heads=2, head_dim=8), causal=True, positions=big)
    with pytest.raises(ValueError, match=r"positions must be in \[-16777216, 16777216\]"):
        relpos.attention(q, k, v, causal=True, positions=torch.tensor([-(2**62), 0, 1, 2]))
    relpos.attention(q, k, v, causal=True, positions=torch.tensor([-1, 0, 1, 2]))
    relpos.attention(q, k, v, causal=True, positions=torch.tensor([0, 1, 2, 2**24]))  # the bound itself is fine


def test_device_mismatch_is_a_value_error():
    q, k, v = qkv()
    meta = torch.device("meta")
    with pytest.raises(ValueError, match="q, k and v must be on one device"):
        relpos.attention(q, k.to(meta), v, causal=True)
    with pytest.raises(ValueError, match="q, k and v must be on one device"):
        relpos.attention(q, k, v.to(meta), causal=True)
    with pytest.raises(ValueError, match="positions must be on q's device"):
        relpos.attention(q, k, v, causal=True, positions=torch.arange(4, device=meta))
    with pytest.raises(ValueError, match="key_padding_mask must be on q's device"):
        relpos.attention(q, k, v, causal=True, key_padding_mask=torch.ones(1, 4, dtype=torch.bool, device=meta))


@pytest.mark.parametrize("impl", ["reference", "dense", "chunked", "auto"])
@pytest.mark.parametrize("name", ["nope", "rope", "alibi", "shaw-kv", "fox"])
@pytest.mark.parametrize("which, value", [("q", float("nan")), ("k", float("inf")), ("q", float("-inf"))])
def test_non_finite_q_or_k_is_refused(impl, name, which, value):
    """The fused SDPA path returned zeros for a query row holding inf: a silent wrong answer."""
    enc = relpos.make_encoding(name, n_heads=2, head_dim=8)
    g = torch.Generator().manual_seed(0)
    t = {n: torch.randn(1, 2, 6, 8, generator=g) for n in "qkv"}
    t[which][0, 1, 4, 2] = value
    with pytest.raises(ValueError, match=f"{which} holds NaN or inf"):
        relpos.attention(t["q"], t["k"], t["v"], enc, causal=True, impl=impl)


def test_the_finite_check_reads_one_value_back_per_call(monkeypatch):
    """On a GPU each tensor-to-bool is a host synchronisation: finite q and k cost one, not one per tensor."""
    from types import SimpleNamespace

    from relpos.attention import check_finite

    req = SimpleNamespace(q=torch.randn(1, 2, 6, 8), k=torch.randn(1, 2, 6, 8))  # check_finite reads only q and k
    calls = []
    real = torch.Tensor.__bool__
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda self: calls.append(1) or real(self))
    check_finite(req)
    assert len(calls) == 1


@pytest.mark.parametrize("impl", ["reference", "dense", "chunked"])
def test_nan_in_v_propagates_to_the_rows_that_see_it(impl):
    """v is not checked (documented): NaN reaches every row that sees it (others may be NaN too)."""
    q, k, v = (torch.randn(1, 2, 6, 8, generator=torch.Generator().manual_seed(1)) for _ in range(3))
    v[0, :, 3, 0] = float("nan")
    out = relpos.attention(q, k, v, relpos.make_encoding("alibi", n_heads=2, head_dim=8), causal=True, impl=impl)
    assert torch.isnan(out[:, :, 3:, 0]).all()


def test_the_finite_check_does_not_refuse_finite_inputs_whose_sum_overflows():
    """The check first sums q and k (one cheap pass, issue 52); a finite input whose sum overflows float32 is
    decided by the exact min/max pass, not refused."""
    from types import SimpleNamespace

    from relpos.attention import NonFiniteError, check_finite

    big = torch.full((1, 2, 6, 8), 3e38)  # every entry finite, the sum is inf
    assert not torch.isfinite(big.sum())
    check_finite(SimpleNamespace(q=big, k=-big))  # no error
    with pytest.raises(NonFiniteError, match="k holds NaN or inf"):
        k = big.clone()
        k[0, 0, 0, 0] = float("-inf")
        check_finite(SimpleNamespace(q=big, k=k))
