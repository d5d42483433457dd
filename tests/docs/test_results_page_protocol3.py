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


CELLS = ("d64-L64", "d128-L64", "d256-L64")


def _cell(c: str) -> dict:
    return json.loads((DOCS / "results" / "protocol3" / f"scale-{c}-results.json").read_text())


def _far(res: dict, lab: str, L: int = 64) -> list[float]:
    return [lm_ratio(r, L, 8 * L)[0] for r in res["runs"] if r["task"] == "lm" and r["label"] == lab]


def test_the_scale_checks_cells_reproduce_from_their_json():
    from relpos.experiments.ranking import ranking

    res = {c: _cell(c) for c in CELLS}
    rk = {c: ranking(res[c])["per_task"]["lm"] for c in CELLS}
    section = _section("### The scale check at L = 64")
    tables = section.split("\n\n| scheme |")
    rows = _rows("| scheme |" + tables[1])
    assert set(rows) >= {"alibi", "kerple-log", "transformer-xl", "nope", "t5", "fire", "rope", "sinusoidal"}
    for lab in ("alibi", "kerple-log", "transformer-xl", "nope", "t5", "fire", "rope", "sinusoidal"):
        for c, cell in zip(CELLS, rows[lab]):
            v = _far(res[c], lab)
            assert cell == f"{statistics.fmean(v):.2f}±{statistics.stdev(v):.2f} ({rk[c]['rank'][lab]})"
    assert rows["fitted runs"] == ["24/24"] * 3
    # the largest cell in detail: differences from the best with their paired-bootstrap intervals
    detail = _rows("| scheme |" + tables[2])
    k = rk["d256-L64"]
    for lab, cells in detail.items():
        v = _far(res["d256-L64"], lab)
        assert cells[0] == f"{statistics.fmean(v):.2f}±{statistics.stdev(v):.2f}" and int(cells[2]) == k["rank"][lab]
        if lab == k["best"]:
            assert cells[1] == f"best ({k['scores'][lab]:.3f})"
        else:
            iv = k["vs_best"][lab]
            assert cells[1].startswith(f"{iv.est:+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}]")
            assert cells[1].endswith("tie") == bool(k["tie"][lab])


def test_the_scale_checks_rho_reproduces_from_the_shipped_cells(tmp_path):
    """Spearman's rho with its interval, recomputed by relpos.experiments.scale from the shipped files alone."""
    from relpos.experiments.scale import scale_summary

    for c in CELLS:
        (tmp_path / c).mkdir()
        (tmp_path / c / "results.json").write_text(json.dumps(_cell(c)))
    rho = {(r["a"], r["b"]): r for r in scale_summary(tmp_path)["rho"] if "rho" in r}
    section = " ".join(_section("### The scale check at L = 64").split())
    for (a, b), r in rho.items():
        want = rf"\*\*{r['rho']:.2f} \[{r['lo']:.2f}, {r['hi']:.2f}\]\*\* for (d_model )?{a} against {b}\b"
        assert re.search(want, section), want


CELLS_256 = ("d64-L256", "d128-L256", "d256-L256")


def test_the_scale_checks_cells_at_256_reproduce_from_their_json(tmp_path):
    """The L = 256 table (mean ± SD (paired rank), fitted runs) and its rho, from the shipped files alone."""
    from relpos.experiments.ranking import ranking
    from relpos.experiments.scale import scale_summary

    res = {c: _cell(c) for c in CELLS_256}
    rk = {c: ranking(res[c])["per_task"]["lm"] for c in CELLS_256}
    section = _section("### The scale check at L = 256")
    rows = _rows("| scheme |" + section.split("\n\n| scheme |")[1])
    labels = ("alibi", "kerple-log", "transformer-xl", "nope", "t5", "fire", "rope", "sinusoidal")
    assert set(rows) >= set(labels)
    for lab in labels:
        for c, cell in zip(CELLS_256, rows[lab]):
            v = _far(res[c], lab, 256)
            assert cell == f"{statistics.fmean(v):.2f}±{statistics.stdev(v):.2f} ({rk[c]['rank'][lab]})"
    assert rows["fitted runs"] == ["24/24"] * 3
    for c in CELLS_256:
        (tmp_path / c).mkdir()
        (tmp_path / c / "results.json").write_text(json.dumps(res[c]))
    rhos = [r for r in scale_summary(tmp_path)["rho"] if "rho" in r]
    assert {(r["train_len"], r["a"], r["b"]) for r in rhos} == {(256, 64, 128), (256, 64, 256), (256, 128, 256)}
    flat = " ".join(section.split())
    for r in rhos:
        want = rf"\*\*{r['rho']:.2f} \[{r['lo']:.2f}, {r['hi']:.2f}\]\*\* for (d_model )?{r['a']} against {r['b']}\b"
        assert re.search(want, flat), want
