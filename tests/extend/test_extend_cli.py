"""``relpos extend`` on the command line: flags become typed specs, bad combinations are one line (issue 50)."""

from __future__ import annotations

import pytest

from relpos.cli import main


def _err(capsys):
    e = capsys.readouterr().err.strip()
    assert "\n" not in e and "Traceback" not in e
    return e


def test_exactly_one_source(capsys, tmp_path):
    assert main(["extend", "--out", str(tmp_path / "o")]) == 2
    assert "exactly one of --from" in _err(capsys)


def test_flags_of_the_other_mode_are_refused_by_name(capsys, folder, tmp_path):
    assert main(["extend", "--from", str(folder), "--out", str(tmp_path / "o"), "--scaling", "yarn"]) == 2
    assert "--scaling is a flag of relpos extend --hf-model" in _err(capsys)
    assert main(["extend", "--from", str(folder), "--out", str(tmp_path / "o"), "--factor", "2.5"]) == 2
    assert "--factor must be an integer" in _err(capsys)
    assert main(["extend", "--from", str(folder), "--out", str(tmp_path / "o"), "--recipes", "rerope"]) == 2
    assert "unknown recipe 'rerope'" in _err(capsys)


def test_benchmark_dry_run_then_run(capsys, folder, tmp_path):
    out = tmp_path / "o"
    argv = ["extend", "--from", str(folder), "--out", str(out), "--allow-unfitted", "--recipes", "direct,pi",
            "--lr-grid", "3e-3", "--k-fractions", "1", "--seeds", "0", "--no-progress"]
    assert main([*argv, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "hours" in text and "K grid [0, 3]" in text and not out.exists()
    assert main(argv) == 0
    assert "Far-position ratio against K" in capsys.readouterr().out
    assert (out / "report.md").is_file() and (out / "extend.sqlite").is_file()


def test_unfitted_folder_refused_in_one_line(capsys, folder, tmp_path):
    assert main(["extend", "--from", str(folder), "--out", str(tmp_path / "o")]) == 2
    assert "no fitted language models" in _err(capsys)


def test_hf_flags(capsys, tmp_path):
    pytest.importorskip("transformers")
    from tests.data_helpers import prose, tiny_llama

    m = tiny_llama(tmp_path / "m", max_pos=32)
    c = tmp_path / "c.txt"
    c.write_text(prose(400_000, seed=11))
    capsys.readouterr()  # the test's own model writing
    base = ["extend", "--hf-model", str(m), "--corpus", str(c), "--out", str(tmp_path / "o")]
    assert main([*base, "--scheme", "alibi", "--scaling", "yarn"]) == 2
    assert "exclude each other" in _err(capsys)
    assert main([*base, "--lr-grid", "1e-3"]) == 2
    assert "--lr-grid is a flag of relpos extend --from" in _err(capsys)
    assert main(["extend", "--hf-model", str(m), "--out", str(tmp_path / "o")]) == 2
    assert "needs --corpus" in _err(capsys)
    assert main([*base, "--steps", "3", "--eval-tokens", "512", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "3 steps of 1 x 128 tokens = 384 tokens" in out and not (tmp_path / "o").exists()
