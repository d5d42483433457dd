"""The explorer's JSON API, without a browser (its HTTP server: test_server.py; its export: test_export.py).

Every number the API returns is checked against relpos computed independently
here (make_encoding + the scheme's own methods, relpos.attention, the model).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import relpos
from relpos import distance
from relpos.encodings import scheme_names
from relpos.explorer import ApiError, Explorer, Limits
from relpos.explorer import api as api_mod
from tests.explorer.conftest import content_reference, make_results


@pytest.fixture(scope="module")
def ex(results_dir, checkpoint_dir):
    return Explorer(results=[results_dir], checkpoints=[checkpoint_dir])


def _build(name, *, n_heads=4, head_dim=64, causal=False, max_len=32, seed=0, **opts):
    """The scheme as the explorer should build it: the seed right before make_encoding."""
    torch.manual_seed(seed)
    return relpos.make_encoding(name, n_heads=n_heads, head_dim=head_dim, causal=causal, max_len=max_len, **opts)


def _defaults(name):
    entry = next(e for e in api_mod.BIAS_VIEW_SCHEMES if e.registry == name)
    return {o["name"]: o["default"] for o in api_mod.option_specs(name, entry.hidden, entry.defaults)}


# ----------------------------------------------------------------------- view 1


def test_tokenize_words_punctuation_cjk():
    assert api_mod.tokenize("The cat's mat.") == ["The", "cat's", "mat", "."]
    assert api_mod.tokenize("猫追老鼠 ok") == ["猫", "追", "老", "鼠", "ok"]
    assert api_mod.tokenize("  \n ") == []


@pytest.mark.parametrize("convention", ["j-i", "i-j"])
def test_offsets_match_library(ex, convention):
    out = ex.get("offsets", {"text": "a b c d e f g", "convention": convention, "clip": "2"})
    assert out["tokens"] == list("abcdefg") and out["n"] == 7
    d = distance.relative_positions(7, convention=convention)
    assert out["offsets"] == d.tolist()
    assert out["clipped"] == distance.clip_relative(d, 2).tolist()
    row = out["offsets"][3]
    assert row == ([-3, -2, -1, 0, 1, 2, 3] if convention == "j-i" else [3, 2, 1, 0, -1, -2, -3])
    assert ex.get("offsets", {"text": "a b", "clip": "none"})["clipped"] is None


def test_offsets_caps_and_empty(ex):
    lim = ex.limits
    with pytest.raises(ApiError) as e:
        ex.get("offsets", {"text": " ".join(["w"] * (lim.max_tokens + 1))})
    assert e.value.code == "too_large" and e.value.limit == lim.max_tokens and str(lim.max_tokens) in str(e.value)
    with pytest.raises(ApiError) as e:
        ex.get("offsets", {"text": "x" * (lim.max_text_chars + 1)})
    assert e.value.code == "too_large" and e.value.unit == "chars"
    with pytest.raises(ApiError) as e:
        ex.get("offsets", {"text": "   "})
    assert e.value.code == "empty"
    with pytest.raises(ApiError, match="convention"):
        ex.get("offsets", {"text": "a b", "convention": "k-q"})
    with pytest.raises(ApiError, match="clip"):
        ex.get("offsets", {"text": "a b", "clip": "-1"})


# ----------------------------------------------------------------------- view 2

BIAS_SCHEMES = [e.key for e in api_mod.BIAS_VIEW_SCHEMES
                if e.kind != "content" and (e.registry is None or e.registry in scheme_names())]
CONTENT_SCHEMES = [e.key for e in api_mod.BIAS_VIEW_SCHEMES if e.kind == "content" and e.registry in scheme_names()]


def test_second_wave_schemes_are_in_the_bias_view():
    keys = {e.key: e for e in api_mod.BIAS_VIEW_SCHEMES}
    assert keys["dpb"].kind == "bias"
    assert {k for k in ("deberta", "cope", "fox")} <= {k for k, e in keys.items() if e.kind == "content"}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("key", BIAS_SCHEMES)
def test_bias_matrix_equals_library(ex, key, causal):
    n, head = 12, 1
    out = ex.get("bias", {"scheme": key, "n": str(n), "causal": str(causal).lower(), "head": str(head),
                          "n_heads": "3", "seed": "5"})
    mat = torch.tensor(out["matrix"], dtype=torch.float64)
    assert mat.shape == (n, n)
    pos = torch.arange(n)[None]
    delta = pos[0][None, :] - pos[0][:, None]
    if key == "log2":
        want = distance.log2_bucket(delta, m=8, bidirectional=not causal).double()
    else:
        entry = next(e for e in api_mod.BIAS_VIEW_SCHEMES if e.key == key)
        enc = _build(entry.registry, n_heads=3, causal=causal, max_len=n, seed=5, **_defaults(entry.registry))
        if key == "shaw":
            norms = enc.key_table.detach().double().norm(dim=-1)
            want = norms[enc.rel_index(pos, pos)[0]]
        else:
            with torch.no_grad():
                want = enc.bias(pos, pos)[0, head].double()
            # and the fast path agrees with the scheme's reference
            torch.testing.assert_close(want, enc.reference_bias(pos, pos)[0, head], rtol=1e-5, atol=1e-6)
        assert out["learned_params"] == enc.num_params()
    torch.testing.assert_close(mat, want, rtol=1e-6, atol=1e-7)
    # the curve is the same term against d (Toeplitz schemes: exactly the matrix's diagonals)
    curve = out["curves"][head if len(out["curves"]) > 1 else 0]
    assert len(curve) == len(out["offsets"])
    if out.get("curve_row") is None:
        for d, v in zip(out["offsets"], curve):
            i = max(0, -d)
            assert math.isclose(v, out["matrix"][i][i + d], rel_tol=1e-6, abs_tol=1e-7)
    if causal:
        assert max(out["offsets"]) <= 0


def test_t5_buckets_and_boundaries(ex):
    out = ex.get("bias", {"scheme": "t5", "n": "40", "show": "bucket", "opt.num_buckets": "16",
                          "opt.max_distance": "20"})
    offs = torch.tensor(out["offsets"])
    ids = distance.t5_bucket(offs, bidirectional=True, num_buckets=16, max_distance=20)
    assert out["curves"][0] == ids.tolist()
    assert out["matrix"][0] == distance.t5_bucket(torch.arange(40), num_buckets=16, max_distance=20).tolist()
    # the boundary table tiles the offsets and each range holds one bucket id
    covered = []
    for r in out["buckets"]:
        seg = ids[(offs >= r["from"]) & (offs <= r["to"])]
        assert (seg == r["bucket"]).all()
        covered.extend(range(r["from"], r["to"] + 1))
    assert covered == out["offsets"]
    assert out["options"] == {"num_buckets": 16, "max_distance": 20, "init_std": 0.02}


def test_overrides_set_the_shown_head(ex):
    out = ex.get("bias", {"scheme": "alibi", "n": "6", "head": "2", "set.slope": "0.5"})
    assert out["matrix"][5] == [-2.5, -2.0, -1.5, -1.0, -0.5, 0.0]
    assert out["slopes"][2] == 0.5
    assert out["slopes"][0] == pytest.approx(distance.alibi_slopes(4)[0].item())
    # the cached module is not modified by an override
    again = ex.get("bias", {"scheme": "alibi", "n": "6", "head": "2"})
    assert again["slopes"][2] == pytest.approx(distance.alibi_slopes(4)[2].item())
    if "kerple-log" in scheme_names():
        k = ex.get("bias", {"scheme": "kerple-log", "n": "5", "head": "0", "set.r1": "2", "set.r2": "0.5"})
        want = [-2 * math.log1p(0.5 * abs(j - 4)) for j in range(5)]
        assert k["matrix"][4] == pytest.approx(want, rel=1e-5)
        assert k["r1"][0] == pytest.approx(2) and k["r2"][0] == pytest.approx(0.5)


def test_bias_bad_input(ex):
    lim = ex.limits
    with pytest.raises(ApiError) as e:
        ex.get("bias", {"scheme": "t5", "n": str(lim.max_len + 1)})
    assert e.value.code == "too_large" and e.value.limit == lim.max_len and e.value.unit == "tokens"
    with pytest.raises(ApiError) as e:
        ex.get("bias", {"scheme": "t5", "n_heads": "99"})
    assert e.value.code == "too_large"
    with pytest.raises(ApiError, match="num_buckets"):  # the library's own message
        ex.get("bias", {"scheme": "t5", "opt.num_buckets": "1"})
    with pytest.raises(ApiError, match="whole number"):
        ex.get("bias", {"scheme": "t5", "n": "ten"})
    with pytest.raises(ApiError, match="scheme must be one of"):
        ex.get("bias", {"scheme": "../../etc"})
    with pytest.raises(ApiError, match="slope"):
        ex.get("bias", {"scheme": "alibi", "set.slope": "-1"})
    with pytest.raises(ApiError, match="head"):
        ex.get("bias", {"scheme": "alibi", "n_heads": "2", "head": "2"})


# -------------------------------------------------------- view 2: typed text


TEXT = "the cat sat on the warm mat"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("key", CONTENT_SCHEMES)
def test_content_score_equals_library_reference(ex, key, causal):
    """The heatmap is enc.score(q, k) for the typed text; here recomputed from the recipe and the reference."""
    head, H, D, seed = 2, 3, 16, 5
    out = ex.get("bias", {"scheme": key, "text": TEXT, "causal": str(causal).lower(), "head": str(head),
                          "n_heads": str(H), "head_dim": str(D), "seed": str(seed)})
    ref = content_reference(key, TEXT, seed=seed, n_heads=H, head_dim=D, causal=causal, **_defaults(key))
    enc = ref["enc"]
    n = len(ref["tokens"])
    assert out["tokens"] == ref["tokens"] == TEXT.split() and out["n"] == n
    assert out["content"] is True and out["values"] == "score"
    assert out["causal"] is (causal or enc.causal_only)  # CoPE and FoX are causal only
    assert out["scale"] == pytest.approx(ref["scale"], rel=1e-6)
    assert out["learned_params"] == enc.num_params()
    got = torch.tensor(out["matrix"], dtype=torch.float64)
    assert got.shape == (n, n)
    want = ref["score"][head]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert float(want.abs().max()) > 1e-2  # a visible, non-zero term (CoPE's zero-initialised table is not)
    if enc.causal_only:
        assert float(got.triu(1).abs().max()) == 0.0
    q, k, pos, scale = ref["q"], ref["k"], ref["pos"], ref["scale"]
    if key == "cope":
        # p_ij = sum_{t=j..i} sigmoid(scale q_i . k_t), clipped at npos_max - 1, written out
        cap = enc.npos_max - 1
        p = torch.zeros(n, n, dtype=torch.float64)
        for i in range(n):
            for j in range(i + 1):
                gates = [torch.sigmoid(scale * q[0, head, i] @ k[0, head, t]) for t in range(j, i + 1)]
                p[i, j] = min(float(sum(gates)), cap)
        torch.testing.assert_close(torch.tensor(out["positions"], dtype=torch.float64), p, rtol=1e-4, atol=1e-5)
        assert out["npos_max"] == enc.npos_max
    elif key == "fox":
        with torch.no_grad():
            f = torch.sigmoid(torch.einsum("hnd,hd->hn", k[0], enc.gate_weight.double()) + enc.gate_bias.double()[:, None])
        torch.testing.assert_close(torch.tensor(out["gates"], dtype=torch.float64), f, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(torch.tensor(out["log_gates"], dtype=torch.float64), f.log(), rtol=1e-4, atol=1e-5)
        # the score is the sum of the log gates after j up to i
        lg = f[head].log()
        for i, j in ((4, 1), (6, 0), (3, 3)):
            assert out["matrix"][i][j] == pytest.approx(float(lg[j + 1 : i + 1].sum()), rel=1e-4, abs=1e-6)
    elif key == "deberta":
        S = enc.span
        assert out["span"] == S and out["rel_index"] == enc.position_index(pos, pos)[0].tolist()
        # DeBERTa indexes by i - j (query minus key): no bucketing this close
        assert out["rel_index"] == [[S + i - j for j in range(n)] for i in range(n)]


def test_content_term_depends_on_the_text(ex):
    base = {"scheme": "fox", "n_heads": "2", "head": "1"}
    a = ex.get("bias", dict(base, text="one two three four"))
    b = ex.get("bias", dict(base, text="one two three five"))
    assert a["matrix"] != b["matrix"]
    # causal and driven by each token's own gate: changing the last token changes only the last row
    assert a["matrix"][:3] == b["matrix"][:3] and a["matrix"][3] != b["matrix"][3]
    assert a["gates"][1][:3] == b["gates"][1][:3]
    # the same token gets the same vector, hence the same gate, wherever it stands
    rep = ex.get("bias", dict(base, text="the cat the cat"))
    assert rep["gates"][0][0] == rep["gates"][0][2] and rep["gates"][1][1] == rep["gates"][1][3]
    # and a position-only scheme shows the same matrix whatever the text (it does not read one)
    assert ex.get("bias", {"scheme": "alibi", "n": "4", "text": "x y z w"})["matrix"] == \
        ex.get("bias", {"scheme": "alibi", "n": "4", "text": "a b c d"})["matrix"]
    for key in ("deberta", "cope"):
        x = ex.get("bias", {"scheme": key, "text": "one two three four"})
        y = ex.get("bias", {"scheme": key, "text": "four three two one"})
        assert x["matrix"] != y["matrix"]


def test_content_view_caps_and_bad_input(ex):
    lim = ex.limits
    with pytest.raises(ApiError) as e:
        ex.get("bias", {"scheme": "fox", "text": " ".join(["w"] * (lim.max_tokens + 1))})
    assert e.value.code == "too_large" and e.value.limit == lim.max_tokens and e.value.unit == "tokens"
    with pytest.raises(ApiError) as e:
        ex.get("bias", {"scheme": "cope", "text": "x" * (lim.max_text_chars + 1)})
    assert e.value.code == "too_large" and e.value.unit == "chars"
    with pytest.raises(ApiError) as e:
        ex.get("bias", {"scheme": "deberta", "text": "  "})
    assert e.value.code == "empty"
    with pytest.raises(ApiError) as e:
        ex.get("bias", {"scheme": "deberta", "text": "a b", "n_heads": "16", "head_dim": "128"})
    assert e.value.code == "too_large" and e.value.limit == lim.max_content_width
    with pytest.raises(ApiError, match="npos_max"):  # the library's own message
        ex.get("bias", {"scheme": "cope", "text": "a b", "opt.npos_max": "1"})
    with pytest.raises(ApiError, match="position_buckets"):
        ex.get("bias", {"scheme": "deberta", "text": "a b", "opt.position_buckets": "1"})
    # a causal-only scheme asked for bidirectional attention answers causally
    assert ex.get("bias", {"scheme": "fox", "text": "a b", "causal": "false"})["causal"] is True
    # hidden options are not accepted as controls: DeBERTa's share_att_key needs a model layer
    assert "share_att_key" not in ex.get("bias", {"scheme": "deberta", "text": "a b"})["options"]


def test_token_vectors_are_stable_and_content_only():
    v = api_mod.token_vector("cat", 0)
    assert v.shape == (api_mod.CONTENT_DIM,) and torch.equal(v, api_mod.token_vector("cat", 0))
    assert not torch.equal(v, api_mod.token_vector("cat", 1)) and not torch.equal(v, api_mod.token_vector("dog", 0))
    q, k = api_mod.content_qk(["猫", "cat", "猫"], 3, 2, 8)
    assert q.shape == k.shape == (1, 2, 3, 8)
    assert torch.equal(q[0, :, 0], q[0, :, 2]) and not torch.equal(q, k)
    # the projections are the documented stream: W_Q then W_K from a generator seeded with
    # SHA-256 of "relpos-explorer/projections/{seed}", entries N(0, 1/64)
    import hashlib

    h = int.from_bytes(hashlib.sha256(b"relpos-explorer/projections/0").digest()[:8], "little") & (2**63 - 1)
    g = torch.Generator().manual_seed(h)
    want_q = torch.randn(64, 64, generator=g) / 8
    want_k = torch.randn(64, 64, generator=g) / 8
    wq, wk = api_mod.content_projections(0, 1, 64)
    assert torch.equal(wq, want_q) and torch.equal(wk, want_k)
    # ... a stream apart from torch's global generator, which seeds the scheme's own parameters:
    # drawing token vectors and projections leaves it where it was
    torch.manual_seed(0)
    expected = torch.randn(8)
    torch.manual_seed(0)
    api_mod.content_projections(0, 4, 64)
    api_mod.token_vector("cat", 0)
    assert torch.equal(torch.randn(8), expected)


# ----------------------------------------------------------------------- view 3


def test_shift_relative_unchanged_absolute_changed(ex):
    names = scheme_names()
    out = ex.get("shift", {"absolute": "sinusoidal", "relative": "alibi", "n": "8", "c": "7"})
    a, r = out["absolute"], out["relative"]
    assert a["relative"] is False and r["relative"] is True
    assert a["max_abs_diff"] > 0.1 and a["unchanged"] is False
    assert r["max_abs_diff"] <= 1e-5 and r["unchanged"] is True
    for slot in (a, r):
        diff = torch.tensor(slot["shifted"]) - torch.tensor(slot["base"])
        torch.testing.assert_close(torch.tensor(slot["diff"]), diff, rtol=1e-5, atol=1e-5)
    if "rope" in names:
        rope = ex.get("shift", {"relative": "rope", "n": "8", "c": "300"})["relative"]
        assert rope["max_abs_diff"] < 1e-3 and rope["unchanged"] is True  # float32 rounding of the angles only


@pytest.mark.parametrize("name", ["sinusoidal", "alibi", "rope", "shaw"])
def test_shift_logits_are_relpos_attention(name):
    """softmax(the logits view 3 shows) == relpos.attention (reference impl) with v = identity."""
    if name not in scheme_names():
        pytest.skip(f"{name} not in this build")
    n, c, seed = 6, 4, 3
    enc = Explorer().encodings.get(name, (("init_std", 1.0),) if name == "shaw" else (), 2, 16, False, 0, n + 2048)
    logits = api_mod.shift_logits(enc, n, c, seed)  # (H, N, N)
    x, wq, wk = api_mod.shift_content(n, seed)
    pos = torch.arange(c, c + n)
    with torch.no_grad():
        q, k = api_mod.shift_qk(enc, x, wq, wk, pos[None])
        eye = torch.eye(n).expand(1, 2, n, n)
        inside = enc if enc.acts_on - {"embedding"} else None  # an embedding-only scheme acted in shift_qk
        p = relpos.attention(q.double(), k.double(), eye.double(), inside, causal=False, positions=pos,
                             impl="reference")
    torch.testing.assert_close(torch.softmax(logits.double(), -1), p[0], rtol=1e-4, atol=1e-5)


def test_shift_caps(ex):
    with pytest.raises(ApiError) as e:
        ex.get("shift", {"c": str(ex.limits.max_shift + 1)})
    assert e.value.code == "too_large"
    with pytest.raises(ApiError, match="relative must be one of"):
        ex.get("shift", {"relative": "nonsense"})


# ----------------------------------------------------------------------- view 4


def test_results_aggregation(ex):
    out = ex.get("results", {"source": "0"})
    assert out["task"] == "lm" and out["metric"] == "bpb"
    assert out["tasks"] == ["copy", "lm"] and out["metrics"] == ["bpb", "loss"]
    assert out["train_lens"] == [128]
    labels = [s["label"] for s in out["series"]]
    assert labels == ["alibi", "rope", "rope (yarn)", "sinusoidal"]
    data = make_results()
    for s in out["series"]:
        runs = [r for r in data["runs"] if r["task"] == "lm" and r["scheme"] == s["scheme"]
                and r["variant"] == s["variant"]]
        for p in s["points"]:
            vals = [m["bpb"] for r in runs for m in r["metrics"] if m["eval_len"] == p["eval_len"]]
            assert p["n"] == len(vals)
            assert p["mean"] == pytest.approx(sum(vals) / len(vals), rel=1e-5)
            assert p["min"] == pytest.approx(min(vals), rel=1e-5)
            assert p["max"] == pytest.approx(max(vals), rel=1e-5)
    acc = ex.get("results", {"source": "0", "task": "copy"})
    assert acc["metric"] == "accuracy" and acc["train_lens"] == [32]
    with pytest.raises(ApiError, match="task must be one of"):
        ex.get("results", {"source": "0", "task": "nope"})
    with pytest.raises(ApiError, match="source"):
        ex.get("results", {"source": "3"})


def test_results_missing_and_malformed(tmp_path, monkeypatch):
    monkeypatch.setattr(api_mod, "bundled_results", lambda: None)  # as if no results ship with the package
    empty = Explorer()
    with pytest.raises(ApiError) as e:
        empty.get("results", {})
    assert e.value.code == "no_results" and "--results" in str(e.value)
    with pytest.raises(FileNotFoundError):
        Explorer(results=[tmp_path])
    (tmp_path / "results.json").write_text('{"version": 1, "runs": [{"metrics": []}]}')
    with pytest.raises(ApiError, match="scheme"):
        Explorer(results=[tmp_path])
    with pytest.raises(ApiError, match="valid JSON"):
        empty.post("results", b"{not json", {})
    with pytest.raises(ApiError) as e:
        Explorer(limits=Limits(max_body_bytes=10)).post("results", b"x" * 11, {})
    assert e.value.code == "too_large" and e.value.status == 413
    ok = empty.post("results", json.dumps(make_results()).encode(), {"task": "copy"})
    assert ok["source"] == "upload" and ok["task"] == "copy"


# ----------------------------------------------------------------------- view 5


def test_attention_maps_match_model(ex, checkpoint_dir):
    from relpos.training import checkpoint
    model, cfg = checkpoint.load(checkpoint_dir)
    text = "ab c\n"
    out = ex.get("attention", {"text": text, "layer": "1"})
    assert out["bytes"] == list(text.encode()) and out["tokens"] == ["a", "b", "\u2423", "c", "\u23ce"]
    assert out["n_layers"] == cfg.n_layers and out["n_heads"] == cfg.n_heads and out["causal"] is True
    with torch.no_grad():
        want = model.attention_maps(torch.tensor([list(text.encode())]))[1][0]
    got = torch.tensor(out["maps"])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.sum(-1), torch.ones(cfg.n_heads, len(text)), atol=1e-4, rtol=0)
    assert float(got.triu(1).abs().max()) == 0.0


def test_attention_caps(ex, checkpoint_dir):
    with pytest.raises(ApiError) as e:
        ex.get("attention", {"text": "x" * 65})  # the tiny checkpoint has max_len 64
    assert e.value.code == "too_large" and e.value.limit == 64 and e.value.unit == "bytes"
    with pytest.raises(ApiError, match="layer"):
        ex.get("attention", {"text": "ab", "layer": "5"})
    with pytest.raises(ApiError) as e:
        Explorer().get("attention", {"text": "ab"})
    assert e.value.code == "no_checkpoint"


def test_checkpoint_loaded_only_through_safe_loader(tmp_path, checkpoint_dir):
    import shutil

    from relpos.training.checkpoint import CheckpointError

    bad = tmp_path / "bad"
    shutil.copytree(checkpoint_dir, bad)
    w = bad / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-7])
    with pytest.raises(CheckpointError):
        Explorer(checkpoints=[bad])
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    torch.save({"x": torch.zeros(1)}, pickled / "model.pt")
    with pytest.raises(CheckpointError):
        Explorer(checkpoints=[pickled])


def test_info(ex):
    info = ex.get("info", {})
    assert {s["name"] for s in info["schemes"] if s["available"]} == set(scheme_names()) - {
        s["name"] for s in info["schemes"] if s.get("reason")}
    keys = [b["key"] for b in info["bias_schemes"]]
    assert keys[:3] == ["t5", "log2", "alibi"]
    t5 = info["bias_schemes"][0]
    assert {o["name"] for o in t5["options"]} >= {"num_buckets", "max_distance"}
    assert info["results"] == [{"index": 0, "label": Path(info["results"][0]["label"]).name, "bundled": False,
                                "preset": None}]
    assert info["checkpoints"][0]["scheme"] == "alibi"
    assert info["limits"]["max_len"] == Limits().max_len
