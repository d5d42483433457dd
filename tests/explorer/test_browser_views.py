"""The explorer in a real browser, views 3 to 5: a shift of every position, extrapolation curves of results,
attention maps of a checkpoint; the values shown are checked against the library and the API
(fixtures: browser_support.py)."""

from __future__ import annotations

import re

import pytest
import torch

from tests.explorer.browser_support import browser, cell_readout, num, server, view  # noqa: F401 - fixtures

pytestmark = pytest.mark.browser


def test_shift_view_absolute_changes_relative_does_not(view, server):
    page, watch = view("shift")
    page.wait_for_selector("#v3-verdict-relative")
    assert "changed" in page.get_attribute("#v3-verdict-absolute", "class")
    assert "same" in page.get_attribute("#v3-verdict-relative", "class")
    abs_name = page.input_value("#v3-abs")
    rel_name = page.input_value("#v3-rel")
    api = server.explorer.get("shift", {"absolute": abs_name, "relative": rel_name, "n": "12", "c": "5"})
    shown = num(re.search(r"= ([^ ]+?) ", page.text_content("#v3-verdict-absolute")).group(1))
    assert shown == pytest.approx(api["absolute"]["max_abs_diff"], rel=1e-2)
    assert api["relative"]["max_abs_diff"] < 1e-4
    text = cell_readout(page, "#v3-rows canvas[data-key='absolute-diff']", "#v3-readout-absolute", 2, 5)
    assert num(text.rsplit(" ", 1)[1]) == pytest.approx(api["absolute"]["diff"][2][5], rel=1e-2, abs=1e-3)
    # no shift: nothing to compare, and the page says so instead of a verdict
    page.fill("#v3-c-num", "0")
    page.wait_for_function("() => document.querySelector('#v3-verdict-absolute').textContent.includes('c = 0')")
    assert page.get_attribute("#v3-verdict-absolute", "class") == "verdict"


def test_extrapolation_view(view, server):
    page, watch = view("extrap")
    page.wait_for_selector("#v4-legend li")
    labels = [x.strip() for x in page.locator("#v4-legend li").all_text_contents()]
    assert labels == ["alibi", "rope", "rope (yarn)", "sinusoidal"]
    svg = page.locator("#v4-chart svg")
    assert "train length 128" in svg.text_content()
    assert svg.locator("g.series").count() == 4
    # lines can be switched off from the legend (keyboard-reachable buttons)
    page.click("#v4-legend li:nth-child(2) button")
    page.wait_for_selector("#v4-legend li:nth-child(2) button[aria-pressed=false]")
    assert page.locator("#v4-chart svg g.series").count() == 3
    page.focus("#v4-legend li:nth-child(2) button")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelectorAll('#v4-chart svg g.series').length === 4")
    page.click("#v4-details summary")
    agg = server.explorer.get("results", {"source": "0"})
    rows = page.locator("#v4-numbers tr").all()[1:]
    want = [(s["label"], p) for s in agg["series"] for p in s["points"]]
    assert len(rows) == len(want)
    for row, (label, p) in zip(rows, want):
        cells = [c.strip() for c in row.locator("td").all_text_contents()]
        assert cells[0] == label and int(cells[1]) == p["eval_len"]
        assert num(cells[2]) == pytest.approx(p["mean"], rel=1e-4)
    page.select_option("#v4-task", "copy")
    page.wait_for_function("() => document.querySelector('#v4-chart svg').textContent.includes('train length 32')")
    assert page.input_value("#v4-metric") == "accuracy"
    assert "accuracy" in page.text_content("#v4-cap")


def test_attention_view_matches_model(view, checkpoint_dir):
    from relpos.training import checkpoint
    page, watch = view("attn")
    page.wait_for_selector("#v5-thumbs .thumb")
    text = page.input_value("#v5-text")
    model, cfg = checkpoint.load(checkpoint_dir)
    with torch.no_grad():
        maps = model.attention_maps(torch.tensor([list(text.encode())]))
    shown = cell_readout(page, "#v5-heatmap canvas", "#v5-readout", 5, 2)
    assert num(shown.rsplit("=", 1)[1]) == pytest.approx(maps[0][0, 0, 5, 2].item(), rel=2e-3, abs=1e-4)
    assert page.locator("#v5-thumbs .thumb").count() == cfg.n_heads
    page.click("#v5-thumbs .thumb[data-head='1']")
    page.wait_for_selector("#v5-thumbs .thumb[data-head='1'][aria-pressed=true]")
    assert "head 2" in page.text_content("#v5-cap")
    shown = page.text_content("#v5-readout")
    assert num(shown.rsplit("=", 1)[1]) == pytest.approx(maps[0][0, 1, 5, 2].item(), rel=2e-3, abs=1e-4)
    page.select_option("#v5-layer", "1")
    page.wait_for_function("() => document.querySelector('#v5-cap').textContent.includes('layer 2')")
    shown = page.text_content("#v5-readout")
    assert num(shown.rsplit("=", 1)[1]) == pytest.approx(maps[1][0, 1, 5, 2].item(), rel=2e-3, abs=1e-4)
