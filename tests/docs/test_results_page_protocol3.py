"""docs/results.md's protocol-3 tables are read from the JSON shipped beside them, not typed by hand."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from relpos.experiments.verdict import lm_ratio, verdict

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _section(title: str) -> str:
    page = (DOCS / "results.md").read_text()
    start = page.index(title)
    rest = page[start + len(title):]
    ends = [i for i in (rest.find("\n### "), rest.find("\n## ")) if i >= 0]
    return title + rest[: min(ends) if ends else len(rest)]


def _rows(text: str) -> dict[str, list[str]]:
    out = {}
    for ln in text.splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("| ") and cells[0] and not cells[0].startswith("scheme") and not set(cells[0]) <= {"-"}:
            out[cells[0]] = cells[1:]
    return out


def test_the_default_presets_table_reproduces_from_its_json():
    res = json.loads((DOCS / "results" / "protocol3" / "default-results.json").read_text())
    v = verdict(res)
    rows = _rows(_section("### The default preset (`make compare`), one seed"))
    assert set(rows) == {"alibi", "kerple-log", "transformer-xl", "nope", "t5", "fire", "rope", "sinusoidal"}
    num = lambda c: float(re.sub(r"[*x]", "", c))  # noqa: E731
    for lab, cells in rows.items():
        row = v["rows"][lab]
        assert num(cells[0]) == pytest.approx(row["lm"][4][0], abs=0.005)
        assert num(cells[1]) == pytest.approx(row["lm"][16][0], abs=0.005)
        (run,) = [r for r in res["runs"] if r["task"] == "lm" and r["label"] == lab]
        window = lm_ratio({**run, "position_loss": []}, 64, 1024)[0]  # without buckets: the whole-window ratio
        assert num(cells[2]) == pytest.approx(window, abs=0.005)
        assert cells[3] == f"{row['span_median']:.0f}/{row['span']:.0f}"
        assert num(cells[4]) == pytest.approx(row["tok"]["copy"]["2x"][0], abs=0.005)
        assert num(cells[5]) == pytest.approx(row["cost"], abs=0.005)


def test_the_scale_checks_first_cell_reproduces_from_its_json():
    from relpos.experiments.ranking import ranking

    res = json.loads((DOCS / "results" / "protocol3" / "scale-d64-L64-results.json").read_text())
    rk = ranking(res)["per_task"]["lm"]
    rows = _rows(_section("### The scale check, first cell"))
    assert len(rows) == 8
    for lab, cells in rows.items():
        ratios = [lm_ratio(r, 64, 512)[0] for r in res["runs"] if r["task"] == "lm" and r["label"] == lab]
        assert cells[0] == f"{statistics.fmean(ratios):.2f}±{statistics.stdev(ratios):.2f}"
        assert int(cells[3]) == rk["rank"][lab]
        if lab == rk["best"]:
            assert cells[2] == f"best ({rk['scores'][lab]:.3f})"
        else:
            iv = rk["vs_best"][lab]
            assert cells[2].startswith(f"{iv.est:+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}]")
            assert cells[2].endswith("tie") == bool(rk["tie"][lab])
