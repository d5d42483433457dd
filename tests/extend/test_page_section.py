"""The extend benchmark and the real-checkpoint run on the results page: the page reads the same computation as
``relpos extend``'s report, re-derives from the files it ships, and refuses a results.json it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

from relpos.report import extension, real_context
from relpos.report.results_page import PageInputs, inputs_from_json_dir, main, page_markdown

from tests.extend.test_claims import GRID, L, _base, _rows

ROOT = Path(__file__).resolve().parents[2]
META = {"train_len": L, "factor": 4, "eval_factors": [1, 4, 8, 16], "grid": GRID, "recipes": ["direct", "pi", "yarn"],
        "seeds": [0, 1, 2], "k_fractions": [0.01, 0.03, 0.1], "lr_grid": [1e-3], "pretrain_steps": 1000,
        "n_layers": 2, "d_model": 64, "fitted": True, "source": "default"}


def _data(**kw) -> dict:
    rows = _rows(_base(**kw))
    for r in rows:
        r["seconds"] = 10.0 + r["k"]  # a fine-tuning run records the time since it started at each K
    return {"version": 2, "protocol": {}, "fingerprint": "f" * 16, "meta": META, "rows": rows}


def test_the_page_section_shows_the_reports_claims_and_cost():
    data = _data()
    sec = "\n".join(extension.page_section(data, png="x/extend.png"))
    rep = extension.report_markdown(data)
    for c in extension.claims(extension.select(data["rows"]), GRID, L, 4, (1, 4, 8, 16)):
        line = f"* **{c['claim']}** ({extension.CLAIM_TEXT[c['claim']]}): **{c['outcome']}** -- {c['why']}"
        assert line in sec and line in rep
    assert "**holds**" in sec and "does not hold" not in sec
    # cost: per (recipe, seed, rate) the largest time, summed -- 3 recipes x 3 seeds x (K=0 run + fine-tuning run)
    assert extension.run_seconds(data["rows"]) == 9 * 10.0 + 9 * 110.0
    assert "18 runs" in sec and "![test loss and far-position ratio against K](x/extend.png)" in sec
    with_pre = {**data, "meta": {**META, "pretrain_models": 9, "pretrain_cpu_seconds": 1800.0}}
    assert "on top of 0.50 CPU-hours of pretraining the 9 language models used" in "\n".join(
        extension.page_section(with_pre))
    flipped = "\n".join(extension.page_section(_data(direct_at_4=(3.5, 2.0, 3.1))))
    assert "**pi_beats_direct** (" in flipped and "): **does not hold** --" in flipped


def test_no_run_gives_one_line():
    assert "No extend run ships beside this page." in page_markdown(PageInputs())


def test_the_page_ships_the_extend_results_and_rederives_from_them(tmp_path):
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "results.json").write_text(json.dumps(_data(), separators=(",", ":")))
    rc = ROOT / "benchmarks" / "results" / "smollm2_context.json"
    out, jd = tmp_path / "docs" / "results.md", tmp_path / "docs" / "results" / "protocol3"
    assert main(["--extend", str(ext), "--real-context", str(rc), "--out", str(out), "--json-dir", str(jd)]) == 0
    page = out.read_text()
    back = inputs_from_json_dir(jd)
    assert page == page_markdown(back, "results/protocol3/")
    assert back.extend == _data() and (jd / "extend-results.json").read_bytes() == (ext / "results.json").read_bytes()
    assert "## Extending the context by fine-tuning" in page and "an illustration, not a ranking" in page
    assert real_context.markdown(json.loads(rc.read_text())) in page


def test_an_extend_folder_without_a_full_results_json_is_refused_by_name(tmp_path, capsys):
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "results.json").write_text(json.dumps({"protocol": {}, "fingerprint": "x", "claims": [], "kept": []}))
    out, jd = tmp_path / "results.md", tmp_path / "j"
    assert main(["--extend", str(ext), "--out", str(out), "--json-dir", str(jd)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --extend ") and "version 2" in err and len(err.splitlines()) == 1
    assert not out.exists() and not jd.exists()
