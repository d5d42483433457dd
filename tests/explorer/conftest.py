"""Fixtures for the explorer tests: a small results.json and a tiny checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

SCHEMES = ("alibi", "rope", "sinusoidal")


_REAL: dict = {}


@pytest.fixture(scope="package", autouse=True)
def _no_shipped_data():
    """The views' tests compare with freshly initialised schemes and their own results files, so what
    the package ships (relpos/data/trained_positions.json, relpos/data/results-documented.json, the
    trained models in relpos/explorer/data/models/) is
    hidden from them (package scope: module-scoped explorers are built with it hidden too); tests
    marked ``shipped_data`` see the real files."""
    from relpos.explorer import api as api_mod
    from relpos.explorer import models as models_mod
    from relpos.explorer import trained as trained_mod

    _REAL.update(trained=trained_mod.trained_values, bundled=api_mod.bundled_results,
                 models=models_mod.shipped_model_dirs)
    mp = pytest.MonkeyPatch()
    mp.setattr(trained_mod, "trained_values", lambda: {"made_by": "", "schemes": {}, "path": None})
    mp.setattr(api_mod, "bundled_results", lambda: None)
    mp.setattr(models_mod, "shipped_model_dirs", lambda: [])
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _shipped_data(request, monkeypatch):
    if request.node.get_closest_marker("shipped_data"):
        from relpos.explorer import api as api_mod
        from relpos.explorer import models as models_mod
        from relpos.explorer import trained as trained_mod

        monkeypatch.setattr(trained_mod, "trained_values", _REAL["trained"])
        monkeypatch.setattr(api_mod, "bundled_results", _REAL["bundled"])
        monkeypatch.setattr(models_mod, "shipped_model_dirs", _REAL["models"])


def make_results() -> dict:
    """A results.json (schema of docs/results-format.md) with 3 schemes x 2 seeds, plus a copy task."""
    runs = []
    for s_idx, scheme in enumerate(SCHEMES):
        for seed in (0, 1):
            metrics = []
            for L in (64, 128, 256, 512):
                growth = 0.0 if L <= 128 else (s_idx * 0.7) * (L / 128 - 1)
                bpb = 2.0 + growth + 0.01 * seed + 0.001 * L / 64
                metrics.append({"eval_len": L, "loss": bpb * 0.6931, "bpb": bpb, "ppl": None, "accuracy": None})
            runs.append({"scheme": scheme, "variant": None, "task": "lm", "seed": seed, "train_len": 128,
                         "metrics": metrics, "position_loss": []})
        runs.append({"scheme": scheme, "variant": None, "task": "copy", "seed": 0, "train_len": 32,
                     "metrics": [{"eval_len": L, "loss": None, "bpb": None, "ppl": None,
                                  "accuracy": 1.0 / (1 + s_idx * L / 64)} for L in (32, 64)],
                     "position_loss": []})
    runs.append({"scheme": "rope", "variant": "yarn", "task": "lm", "seed": 0, "train_len": 128,
                 "metrics": [{"eval_len": L, "loss": None, "bpb": 2.5, "ppl": None, "accuracy": None}
                             for L in (128, 512)], "position_loss": []})
    return {"version": 1, "config": {"steps": 1}, "runs": runs}


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    (d / "results.json").write_text(json.dumps(make_results()), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    """A tiny TransformerLM with random (but non-trivial) weights, saved with relpos.training.checkpoint.save."""
    from relpos.training import checkpoint
    from relpos.model import ModelConfig, TransformerLM

    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", scheme="alibi", max_len=64)
    model = TransformerLM(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    d = tmp_path_factory.mktemp("ckpt") / "tiny-alibi"
    checkpoint.save(d, model, cfg)
    return d


def content_reference(name: str, text: str, *, seed: int = 0, n_heads: int = 4, head_dim: int = 64,
                      causal: bool = True, **options) -> dict:
    """What view 2 should show for a content-dependent scheme, computed here from the documented recipe.

    Tokens as view 1 splits them; each token's vector is N(0, 1) from a generator seeded
    with SHA-256 of "relpos-explorer/token/{seed}/{token}"; W_Q then W_K, (64, H*D) with
    N(0, 1/64) entries, from a generator seeded with SHA-256 of
    "relpos-explorer/projections/{seed}"; the scheme is built right after
    torch.manual_seed(seed). Returns float64 tensors from the scheme's *reference*.
    """
    import hashlib
    import math

    import relpos
    from relpos.explorer.api import tokenize

    def gen(s: str) -> torch.Generator:
        h = int.from_bytes(hashlib.sha256(s.encode("utf-8")).digest()[:8], "little") & (2**63 - 1)
        return torch.Generator().manual_seed(h)

    tokens = tokenize(text)
    n, C0, H, D = len(tokens), 64, n_heads, head_dim
    x = torch.stack([torch.randn(C0, generator=gen(f"relpos-explorer/token/{seed}/{t}")) for t in tokens])
    g = gen(f"relpos-explorer/projections/{seed}")
    wq = torch.randn(C0, H * D, generator=g) / math.sqrt(C0)
    wk = torch.randn(C0, H * D, generator=g) / math.sqrt(C0)
    q = (x.double() @ wq.double()).view(n, H, D).transpose(0, 1)[None]  # (1, H, N, D)
    k = (x.double() @ wk.double()).view(n, H, D).transpose(0, 1)[None]
    torch.manual_seed(seed)
    enc = relpos.make_encoding(name, n_heads=H, head_dim=D, causal=causal, max_len=64, **options)
    pos = torch.arange(n)[None]
    scale = enc.attention_scale(D)
    with torch.no_grad():
        score = enc.reference_score(q, k, pos, pos, scale)[0]  # (H, N, N) float64
    return {"tokens": tokens, "enc": enc, "q": q, "k": k, "pos": pos, "scale": scale, "score": score}
