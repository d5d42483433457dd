"""One job: length-relative scheme ranges, sampled-position evaluation, spans, the record."""

from __future__ import annotations

import pytest
import torch

from relpos.compare.presets import preset
from relpos.compare.fitting import FitConfig
from relpos.compare.job import Job, length_options, model_config_for, run_job, sampled_positions_model_for
from relpos.model import ModelConfig, TransformerLM
from relpos.tasks.span import span_of_maps


def test_scheme_ranges_follow_the_training_length():
    assert length_options("t5", 64) == {"max_distance": 64}
    assert length_options("shaw", 64) == {"k": 63}
    assert length_options("fire", 64) == {"init_L": 64.0}
    assert length_options("alibi", 64) == {} and length_options("rope", 64) == {}
    cfg = preset("default").validate()
    task = cfg.make_task("lm")
    assert model_config_for(Job("lm", "t5", 0), cfg, task).scheme_options == {"max_distance": 64}
    # the paper defaults stay one setting away, and explicit options win
    paper = cfg.replace(scheme_ranges="paper").validate()
    assert model_config_for(Job("lm", "t5", 0), paper, task).scheme_options == {}
    explicit = cfg.replace(scheme_options={"t5": {"max_distance": 200}}).validate()
    assert model_config_for(Job("lm", "t5", 0), explicit, task).scheme_options == {"max_distance": 200}
    copy = cfg.make_task("copy")
    assert model_config_for(Job("copy", "shaw", 0), cfg, copy).scheme_options == {"k": copy.train_seq_len() - 1}


def test_sampled_positions_are_sorted_in_range_and_reproducible():
    m = TransformerLM(ModelConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=1, max_len=64, scheme="rope",
                                  random_positions=64)).eval()
    seen = []

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(()))

        def forward(self, idx, positions=None):
            seen.append(positions)
            return m(idx, positions=positions)

    spy = Spy()
    a = sampled_positions_model_for(spy, 64, draw=0, seed=1)(12)
    a(torch.zeros(2, 12, dtype=torch.long))
    pos = seen[-1]
    assert pos.shape == (12,) and torch.all(pos[1:] > pos[:-1]) and pos.min() >= 0 and pos.max() < 64
    a(torch.zeros(2, 5, dtype=torch.long))
    assert torch.equal(seen[-1], pos[:5])  # shorter inputs (greedy decoding) use a prefix
    sampled_positions_model_for(spy, 64, draw=0, seed=1)(12)(torch.zeros(1, 12, dtype=torch.long))
    assert torch.equal(seen[-1], pos)
    sampled_positions_model_for(spy, 64, draw=1, seed=1)(12)(torch.zeros(1, 12, dtype=torch.long))
    assert not torch.equal(seen[-1], pos)


def _tiny():
    cfg = preset("ci")
    cfg.schemes, cfg.tasks, cfg.randomized = ["rope"], ["lm", "copy"], ["rope"]
    cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.steps = 16, 2, 1, 3
    cfg.rope_variants = []
    cfg.task_train = {}
    cfg.lm = {"train_len": 8, "eval_factors": [1, 2], "eval_tokens": 64, "train_bytes": 20_000, "n_val": 4}
    cfg.algorithmic = {"train_len": 3, "eval_factors": [1, 2], "n_eval": 8, "n_val": 8}
    cfg.fit = FitConfig(val_every=1)
    return cfg.validate()


@pytest.mark.parametrize("task", ["lm", "copy"])
def test_randomized_runs_are_evaluated_at_plain_and_sampled_positions(task):
    res = run_job(Job(task, "rope", 0, randomized=True).to_dict(), _tiny().to_dict())
    variants = [r["variant"] for r in res["runs"]]
    assert variants == ["randomized", "randomized-sampled"]
    plain, sampled = (r["measurements"] for r in res["runs"])
    assert [m["eval_len"] for m in plain] == [m["eval_len"] for m in sampled]
    if task == "lm":  # an almost untrained copy model may answer the same at any positions
        assert any(a["loss"] != b["loss"] for a, b in zip(plain, sampled))


def test_lm_runs_record_the_effective_span():
    res = run_job(Job("lm", "rope", 0).to_dict(), _tiny().to_dict())
    span = res["runs"][0]["span"]
    assert set(span) == {"8", "16"}
    for n, s in span.items():
        assert s["eval_len"] == int(n) and 0 <= s["max"] <= int(n)
        assert len(s["per_head"]) == 1 and len(s["per_head"][0]) == 2
    assert res["train"]["fit"]["score_kind"].startswith("validation loss")
    assert res["train"]["ms_per_step"] > 0


def test_span_of_known_attention_maps():
    N = 12
    p = torch.zeros(2, 3, N, N)
    for i in range(N):
        p[:, 0, i, i] = 1.0  # only itself: span 1
        p[:, 1, i, max(0, i - 4)] = 1.0  # exactly 4 back (or the sink): span 5
        p[:, 2, i, : i + 1] = 1.0 / (i + 1)  # uniform over the past: looks all the way back
    spans = span_of_maps([p])[0]
    assert spans[0] == 1 and spans[1] == 5 and spans[2] > 8


def test_embedding_scale_follows_where_a_scheme_adds_positions():
    from relpos.compare.job import embed_scale_for

    assert embed_scale_for("sinusoidal", "auto") == "sqrt_d" and embed_scale_for("learned", "auto") == "sqrt_d"
    assert embed_scale_for("rope", "auto") == "none" and embed_scale_for("nope", "auto") == "none"
    assert embed_scale_for("rope", "sqrt_d") == "sqrt_d"
    cfg = preset("default").validate()
    task = cfg.make_task("copy")
    assert model_config_for(Job("copy", "sinusoidal", 0), cfg, task).embed_scale == "sqrt_d"
    assert model_config_for(Job("copy", "t5", 0), cfg, task).embed_scale == "none"
