"""relpos compare --hf-model: the fixed-target blocks and passkey depths have flags (run_hf_sweep had both), and a
table cell resting on fewer than 10 examples shows its count (issue 48: each passkey cell of a run was 1 example)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from relpos.pretrained.evaluate import HFEvalSpec, plan  # noqa: E402
from relpos.pretrained.sweep import hf_report  # noqa: E402
from relpos.tasks.passkey import passkey_table  # noqa: E402
from tests.data_helpers import prose  # noqa: E402
from tests.test_hf_native import ROPE_TYPES, _cli, sharp_llama  # noqa: E402


@pytest.fixture(scope="module")
def model_and_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("cliflags")
    folder = sharp_llama(root / "l3", *ROPE_TYPES["llama3"], tokenizer=True)
    corpus = root / "c.txt"
    corpus.write_text(prose(50_000, seed=5))
    return folder, corpus


def test_blocks_and_depths_flags_reach_the_plan(model_and_corpus, tmp_path, capsys):
    folder, corpus = model_and_corpus
    base = ["compare", "--hf-model", str(folder), "--corpus", str(corpus), "--out", str(tmp_path / "o"),
            "--hf-factors", "1,2", "--eval-tokens", "256", "--passkey", "2", "--dry-run"]
    rc, so, se = _cli(base + ["--hf-blocks", "3", "--passkey-depths", "0,0.5,1"], capsys)
    assert rc == 0, se
    spec = HFEvalSpec(model=str(folder), corpus={"path": str(corpus)}, factors=[1, 2], eval_tokens=256, passkey_n=2,
                      blocks=3, passkey_depths=[0.0, 0.5, 1.0])
    p = plan(spec)
    assert p["tokens"]["passkey"] == 2 * 3 * sum(p["lengths"])
    assert f"{p['tokens']['lm']:,} language modelling + {p['tokens']['passkey']:,} passkey" in so
    rc, so_default, se = _cli(base, capsys)
    assert rc == 0 and so_default != so


@pytest.mark.parametrize("flags, named", [(["--hf-blocks", "0"], "--hf-blocks"),
                                          (["--passkey-depths", "0,1.5"], "--passkey-depths")])
def test_bad_blocks_or_depths_are_refused_by_name(model_and_corpus, tmp_path, capsys, flags, named):
    folder, corpus = model_and_corpus
    rc, so, se = _cli(["compare", "--hf-model", str(folder), "--corpus", str(corpus), "--out", str(tmp_path / "o"),
                       "--dry-run"] + flags, capsys)
    assert rc == 2 and named in se, se


def test_hf_flags_without_a_model_are_refused(capsys):
    rc, so, se = _cli(["compare", "--hf-blocks", "4", "--dry-run"], capsys)
    assert rc == 2 and "--hf-blocks needs --hf-model" in se, se


def _lm_run(n_windows: int, n_blocks: int) -> dict:
    ms = [{"protocol": "window", "eval_len": 64, "loss": 2.0, "bpb": 1.0, "bucket_start": -1,
           "per_example": [2.0] * n_windows},
          {"protocol": "fixed_target", "eval_len": 64, "loss": 2.5, "bucket_start": -1,
           "per_example": [2.5] * n_blocks}]
    return {"scheme": "hf:m", "task": "lm", "variant": "none", "train_len": 32, "measurements": ms, "info": {}}


def test_table_cells_on_fewer_than_ten_examples_show_their_count():
    text = hf_report([_lm_run(n_windows=3, n_blocks=16)])
    assert "2.000 / 1.000 (n=3)" in text and "| 2.500 |" in text
    assert not re.search(r"\(n=\d", hf_report([_lm_run(n_windows=10, n_blocks=10)]))
    stored = _lm_run(n_windows=3, n_blocks=16)  # as the store gives it back: token counts, no per-example scores
    for m in stored["measurements"]:
        m["count"] = len(m.pop("per_example")) * (64 if m["protocol"] == "window" else 32 // 2)
    assert "2.000 / 1.000 (n=3)" in hf_report([stored]) and "| 2.500 |" in hf_report([stored])
    cells = [{"protocol": "accuracy", "eval_len": 256, "accuracy": 1.0, "bucket_start": 50, "count": 1},
             {"protocol": "accuracy", "eval_len": 256, "accuracy": 0.5, "bucket_start": -1, "count": 12}]
    table = passkey_table(cells)
    assert "| 256 | 1.00 (n=1) | 0.50 |" in table
