"""The ``--hf-model --dry-run`` time estimate accounts for every part of the evaluation (no timed assertions).

Issue 48: the estimate was 2.7x too low on the SmolLM2 GGUF (344 s estimated, 15.4 CPU-minutes measured): it
charged an assumed FLOP rate for the forward passes' FLOPs and left out the model load, the tokenizer, the
corpus, the per-pass overheads and the float64 loss over the vocabulary.
"""

from __future__ import annotations

import math

import pytest

from tests.data_helpers import prose, tiny_llama

L0 = 32


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_llama(tmp_path_factory.mktemp("est") / "m", max_pos=L0)


def _spec(model_dir, corpus, tmp_path, **kw):
    base = {"model": str(model_dir), "corpus": {"path": str(corpus)}, "factors": [2, 4], "eval_tokens": 600,
            "passkey_n": 2, "passkey_depths": [0.0, 1.0], "device": "cpu", "scalings": ["none"],
            "max_eval_tokens": 256, "cache_dir": str(tmp_path / "cache")}
    return {**base, **kw}


def _passes(spec, cfg):
    from relpos.corpus import load_tokenizer
    from relpos.pretrained.estimate import forward_passes
    from relpos.pretrained.evaluate import _bos, _passkey, plan
    from relpos.pretrained.load import tokenizer_file

    p = plan(spec, cfg)
    tok = load_tokenizer(tokenizer_file(spec["model"]))
    return p, forward_passes(spec, p, _passkey(spec, p["lengths"], tok, _bos(cfg)))


def test_the_estimates_passes_are_the_calls_the_job_makes(model_dir, tmp_path):
    """Every forward call of a job, batch rows and length, in order -- the windows, the fixed-target blocks split
    by --max-eval-tokens, and each passkey cell -- is one :class:`Pass` of the estimate."""
    from relpos.pretrained.evaluate import HFEvalSpec, load_hf_model, run_hf_job

    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(300_000, seed=3))
    spec = HFEvalSpec(**_spec(model_dir, corpus, tmp_path))
    model = load_hf_model(model_dir, device="cpu")
    seen: list[tuple[int, int]] = []

    def record(_module, args, kwargs):
        x = kwargs.get("input_ids", args[0] if args else None)
        seen.append((int(x.shape[0]), int(x.shape[1])))

    model.hf.model.register_forward_pre_hook(record, with_kwargs=True)
    run_hf_job(spec, "none", model=model)
    p, passes = _passes(spec, model.base_config)
    assert [(q.rows, q.length) for q in passes] == seen
    kinds = {q.what for q in passes}
    assert kinds == {"windows", "fixed-target blocks", "passkey prompts"}
    # 16 blocks at 128 tokens, at most 256 tokens a call: 8 calls of 2 rows
    assert [(q.rows, q.length) for q in passes if q.what == "fixed-target blocks" and q.length == 128] == [(2, 128)] * 8
    assert all(q.head_rows == q.length for q in passes if q.what != "passkey prompts")
    assert all(1 <= q.head_rows < q.length for q in passes if q.what == "passkey prompts")


def _cal(**kw):
    from relpos.pretrained.estimate import Calibration

    base = dict(layers=3, layer={64: (0.01, 0.0025), 128: (0.01, 0.02)},
                call={64: (0.002, 0.0005), 128: (0.002, 0.001)},
                head_row=1e-4, layer_flops=lambda L: 10.0 * L + 0.05 * L * L, load=2.0, startup=1.5,
                tokenizer_build=0.7, tokenizer_read=0.1, corpus=0.9)
    return Calibration(**{**base, **kw})


def test_one_pass_costs_every_layer_its_rows_and_its_logits():
    from relpos.pretrained.estimate import Pass, _fit

    cal = _cal()
    one = cal.pass_seconds(Pass("windows", 4, 64, 64))
    assert one == pytest.approx(3 * (0.01 + 4 * 0.0025) + 0.002 + 4 * 0.0005 + 4 * 64 * 1e-4)
    # rows: each adds its share of every layer, of the call and of the logits; the fixed costs stay
    assert cal.pass_seconds(Pass("windows", 8, 64, 64)) - one == pytest.approx(4 * (3 * 0.0025 + 0.0005 + 64e-4))
    assert cal.pass_seconds(Pass("passkey prompts", 4, 64, 2)) == pytest.approx(one - 4 * 62 * 1e-4)  # logits kept
    assert _cal(layers=6).pass_seconds(Pass("windows", 4, 64, 64)) == pytest.approx(one + 3 * (0.01 + 4 * 0.0025))
    # a length longer than any timed one: the longest timed layer, its per-row cost scaled by the layer's FLOPs
    long = cal.pass_seconds(Pass("windows", 1, 512, 512))
    flops = (10 * 512 + 0.05 * 512 ** 2) / (10 * 128 + 0.05 * 128 ** 2)
    assert long == pytest.approx(3 * (0.01 + 0.02 * flops) + 0.002 + 0.001 * 512 / 128 + 512 * 1e-4)
    # the fit through two timings: fixed and per-row parts, never negative
    assert _fit((1, 0.3), (5, 0.7)) == pytest.approx((0.2, 0.1))
    assert _fit((1, 0.9), (5, 0.7)) == (0.9, 0.0)
    assert _fit((1, 0.4), (1, 0.4)) == (0.0, 0.4)


def _parts(tmp_path, model_dir, corpus, **kw):
    from relpos.pretrained.estimate import estimate
    from relpos.pretrained.evaluate import HFEvalSpec
    from relpos.pretrained.load import load_config, model_source

    spec = HFEvalSpec(**_spec(model_dir, corpus, tmp_path, **kw))
    cfg = load_config(model_source(model_dir))
    p, passes = _passes(spec, cfg)
    est = estimate(spec, p, passes, _cal(layer={n: (0.01, 0.02 * n / 64) for n in p["lengths"]},
                                         call={n: (0.001, 0.001) for n in p["lengths"]}), threads=2)
    by = {}
    for k, v in est.parts.items():
        by[k.split(":")[0].split(" (")[0]] = v
    assert est.seconds == pytest.approx(sum(est.parts.values()))
    return by, est


def test_the_estimate_has_every_part_and_each_grows_with_its_work(model_dir, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(50_000, seed=4))
    base, est = _parts(tmp_path, model_dir, corpus)
    assert set(base) == {"startup", "tokenizer", "corpus", "model load", "windows", "fixed-target blocks",
                         "passkey prompts"}
    assert base["startup"] == 1.5 and base["corpus"] == 0.9 and base["model load"] == 2.0
    assert base["tokenizer"] == pytest.approx(0.7 + 0.1 * 2)  # built once, read per scaling and for the fingerprint
    text = "\n".join(est.lines())
    assert "wall-clock at 2 torch thread(s) on this machine now" in text and "each part timed here" in text

    more_pk, _ = _parts(tmp_path, model_dir, corpus, passkey_n=4)
    assert more_pk["passkey prompts"] > base["passkey prompts"]
    assert more_pk["windows"] == base["windows"] and more_pk["fixed-target blocks"] == base["fixed-target blocks"]
    depths, _ = _parts(tmp_path, model_dir, corpus, passkey_depths=[0.0, 0.5, 1.0])
    assert depths["passkey prompts"] > base["passkey prompts"]
    no_pk, _ = _parts(tmp_path, model_dir, corpus, passkey_n=0)
    assert "passkey prompts" not in no_pk

    blocks, _ = _parts(tmp_path, model_dir, corpus, blocks=32)
    assert blocks["fixed-target blocks"] > 1.5 * base["fixed-target blocks"]
    assert blocks["windows"] == base["windows"]

    factors, _ = _parts(tmp_path, model_dir, corpus, factors=[2, 4, 8], max_eval_tokens=512)
    for what in ("windows", "fixed-target blocks", "passkey prompts"):
        assert factors[what] > base[what]

    scalings, _ = _parts(tmp_path, model_dir, corpus, scalings=["none", "linear", "yarn"])
    for what in ("windows", "fixed-target blocks", "passkey prompts"):
        assert scalings[what] == pytest.approx(3 * base[what])
    assert scalings["tokenizer"] == pytest.approx(0.7 + 0.1 * 4) and scalings["model load"] == 2.0


def test_the_dry_run_times_each_part_here_and_writes_nothing(model_dir, tmp_path, monkeypatch):
    """On a real (tiny) checkpoint: every part is timed, finite and non-negative, and nothing is written."""
    from relpos.pretrained.sweep import dry_run_lines

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(50_000, seed=5))
    spec = _spec(model_dir, corpus, tmp_path)
    spec.pop("cache_dir")
    lines = dry_run_lines(spec, tmp_path / "o")
    text = "\n".join(lines)
    est = [ln for ln in lines if ln.startswith("estimated time: ~")]
    assert len(est) == 1 and "wall-clock at" in est[0] and "torch thread(s) on this machine now" in est[0]
    parts = [ln for ln in lines if ln.startswith("  ") and not ln.startswith("  (")]
    names = [ln.strip().split(":")[0].split(" (")[0] for ln in parts]
    assert names == ["startup", "tokenizer", "corpus", "model load", "windows", "fixed-target blocks",
                     "passkey prompts"]
    for ln in parts:
        secs = float(ln.rsplit(": ", 1)[1].removesuffix(" s").replace(",", ""))
        assert math.isfinite(secs) and secs >= 0
    assert "one decoder layer timed at lengths 64, 128" in text and "corpus 50," in text
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache").exists()


def test_a_gguf_load_builds_the_tensor_name_map_once(model_dir, tmp_path, monkeypatch):
    """Part of the model load the estimate counts: transformers' GGUF loader built gguf's tensor name map once
    per module of the model, and relpos's check of skipped tensors once more per module (794 builds, about 24 s
    for SmolLM2-135M's 30 layers); now once in the loader and once in the check (66 before on this 2-layer
    model)."""
    gguf = pytest.importorskip("gguf")
    from relpos.pretrained.evaluate import load_hf_model
    from tests.test_hf_gguf import write_gguf

    path = write_gguf(model_dir, tmp_path / "tiny.gguf")
    real = gguf.get_tensor_name_map
    built = []
    monkeypatch.setattr(gguf, "get_tensor_name_map", lambda *a: built.append(a) or real(*a))
    model = load_hf_model(path, device="cpu")
    assert len(built) == 2 and len(set(built)) == 1 and model.name == "tiny"
    assert gguf.get_tensor_name_map is not real  # the counting stand-in is back in place, not the memo
