"""``relpos generate``: continue a prompt from a checkpoint."""

from __future__ import annotations

import pytest
import torch

from relpos.training import checkpoint
from relpos.cli import main
from relpos.model import ModelConfig, TransformerLM


@pytest.fixture
def ck(tmp_path):
    torch.manual_seed(0)
    return checkpoint.save(tmp_path / "ck", TransformerLM(ModelConfig.preset("tiny", scheme="alibi", max_len=64)))


def test_greedy_is_deterministic_and_continues_the_prompt(ck, capsys):
    assert main(["generate", "-c", str(ck), "-p", "abc", "-n", "10", "--greedy"]) == 0
    a = capsys.readouterr().out
    assert main(["generate", "-c", str(ck), "-p", "abc", "-n", "10", "--greedy"]) == 0
    assert capsys.readouterr().out == a and a.startswith("abc")


def test_seeded_sampling_repeats(ck, capsys):
    outs = []
    for _ in range(2):
        assert main(["generate", "-c", str(ck), "-n", "8", "--seed", "3", "--top-k", "5", "-t", "1.5"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]


def test_zero_tokens_echoes_the_prompt(ck, capsys):
    assert main(["generate", "-c", str(ck), "-p", "xyz", "-n", "0"]) == 0
    assert capsys.readouterr().out == "xyz\n"


def test_missing_checkpoint_and_empty_prompt(tmp_path, ck, capsys):
    assert main(["generate", "-c", str(tmp_path / "none")]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["generate", "-c", str(ck), "-p", ""]) == 2
    assert "--prompt must not be empty" in capsys.readouterr().err
