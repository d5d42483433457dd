"""benchmarks/hf_long_window.py: one window per process, chunked (relpos's path) equal to full logits."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from tests.bench.scripts import load_script  # noqa: E402


def test_chunked_and_full_windows_agree_and_are_recorded(tmp_path, capsys):
    mod = load_script("hf_long_window")
    out = tmp_path / "r.json"
    assert mod.main(["--shape", "tiny", "--tokens", "96", "--dtypes", "float32", "--threads", "1",
                     "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = {r["how"]: r for r in data["rows"]}
    assert set(rows) == {"chunked", "full"} and not any("error" in r for r in rows.values())
    assert rows["chunked"]["chunked_path"] is True  # the HF wrapper's chunked loss, as compare runs it
    assert rows["chunked"]["loss"] == pytest.approx(rows["full"]["loss"], abs=1e-9)
    for r in rows.values():
        assert r["tokens"] == 96 and r["seconds"] >= 0 and r["rss_model_mib"] > 0
        assert r["process_peak_mib"] >= r["rss_peak_mib"] >= r["rss_model_mib"]
    assert data["meta"]["shape"] == "tiny" and data["meta"]["threads"] == 1
    assert "| 96 | float32 | chunked |" in capsys.readouterr().out


def test_full_logits_too_large_for_memory_are_skipped_with_the_reason(tmp_path, monkeypatch, capsys):
    mod = load_script("hf_long_window")
    monkeypatch.setattr(mod, "_available_mib", lambda: 0.1)  # 0.1 MiB available: the full logits cannot fit
    out = tmp_path / "r.json"
    assert mod.main(["--shape", "tiny", "--tokens", "64", "--dtypes", "float32", "--how", "full",
                     "--threads", "1", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert "seconds" not in row and "available" in row["skipped"] and "GiB" in row["skipped"]
    assert "skipped: its logits alone need" in capsys.readouterr().out


def test_fewer_layers_time_each_layer_and_project_the_full_depth(tmp_path):
    mod = load_script("hf_long_window")
    out = tmp_path / "r.json"
    assert mod.main(["--shape", "tiny", "--layers", "1", "--tokens", "64", "--dtypes", "float32", "--how", "chunked",
                     "--threads", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    (row,) = data["rows"]
    assert data["meta"]["layers"] == 1 and len(row["layer_seconds"]) == 1
    full = mod.SHAPES["tiny"][0]
    want = row["rest_seconds"] + full * row["layer_seconds"][0]
    assert row["projected_seconds_full_depth"] == pytest.approx(want, abs=0.06)
