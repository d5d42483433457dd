"""The scheme registry: names, options, parameter counts, errors."""

from __future__ import annotations

import pytest

import relpos
from relpos.encodings import SCHEMES, scheme_names

FIRST_WAVE = [
    "nope", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope", "rope-pi", "rope-ntk",
    "rope-dynamic", "rope-yarn", "xpos", "transformer-xl", "kerple-log", "kerple-power", "fire", "sandwich",
]


def test_first_wave_registered():
    for name in FIRST_WAVE:
        assert name in SCHEMES


def test_unknown_scheme_lists_known():
    with pytest.raises(ValueError, match="unknown scheme 'bogus'; known schemes: .*t5"):
        relpos.make_encoding("bogus")


def test_underscore_alias():
    assert relpos.make_encoding("T5", n_heads=2).name == "t5"


def test_unknown_option_named():
    with pytest.raises(TypeError, match="unknown option\\(s\\) \\['nonsense'\\] for scheme 't5'"):
        relpos.make_encoding("t5", nonsense=3)


def test_t5_bad_buckets():
    with pytest.raises(ValueError, match=r"num_buckets must be in \[2, "):
        relpos.make_encoding("t5", causal=True, num_buckets=1)
    with pytest.raises(ValueError, match="max_distance must be > the exact range"):
        relpos.make_encoding("t5", causal=False, num_buckets=32, max_distance=8)


def test_param_counts():
    assert relpos.make_encoding("t5", n_heads=8, num_buckets=32).num_params() == 256
    assert relpos.make_encoding("alibi", n_heads=8).num_params() == 0
    assert relpos.make_encoding("alibi", n_heads=8, learnable_slopes=True).num_params() == 8
    assert relpos.make_encoding("nope").num_params() == 0


@pytest.mark.parametrize("name", scheme_names())
def test_describe_is_json_able(name):
    import json

    enc = relpos.make_encoding(name, n_heads=4, head_dim=16, causal=True)
    d = enc.describe()
    json.dumps(d)
    assert set(d["acts_on"]) <= {"embedding", "qk", "bias", "score", "value"}
    assert d["params"] == sum(p.numel() for p in enc.parameters() if p.requires_grad)
    assert enc.paper.startswith("https://")
