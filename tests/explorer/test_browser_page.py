"""The explorer in a real browser, the page as a whole: language switch, keyboard tabs, narrow windows, views
without data, numbers as shown, the shipped trained values (fixtures: browser_support.py)."""

from __future__ import annotations

import math

import pytest

from tests.explorer.browser_support import MINUS, _own_server, browser, num, server, view  # noqa: F401 - fixtures

pytestmark = pytest.mark.browser


def test_language_switch_and_keyboard_tabs(view):
    page, watch = view("offsets")
    page.wait_for_selector("#v1-tokens .tok")
    assert page.text_content("#view-offsets h2") == "Relative distance"
    page.click(".lang button[data-lang=zh]")
    assert page.text_content("#view-offsets h2") == "相对距离"
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    assert "查询" in page.text_content("#v1-readout")
    # tabs by keyboard: arrow keys move between views
    page.focus("#tab-offsets")
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("#view-bias:not([hidden])")
    assert page.get_attribute("#tab-bias", "aria-selected") == "true"
    page.wait_for_function("() => document.querySelector('#v2-scheme-text').textContent.includes('T5')")
    assert "桶" in page.text_content("#v2-scheme-text")
    page.click(".lang button[data-lang=en]")
    assert page.text_content("#view-bias h2") == "Bias matrices"
    for name in ("shift", "extrap", "attn"):
        page.click(f"#tab-{name}")
        page.wait_for_selector(f"#view-{name}:not([hidden])")
        assert page.locator(f"#view-{name} .explain p").first.text_content().strip()


@pytest.mark.parametrize("name", ["offsets", "bias", "bias:fox", "shift", "attn"])
def test_narrow_window_has_no_horizontal_scroll(view, name):
    page, watch = view(name.split(":")[0], width=400, height=800)
    wait = {"offsets": "#v1-tokens .tok", "bias": "#v2-heatmap canvas", "bias:fox": "#v2-gate-table",
            "shift": "#v3-rows canvas", "attn": "#v5-thumbs .thumb"}[name]
    if name == "bias:fox":
        page.wait_for_selector("#v2-heatmap canvas")
        page.select_option("#v2-scheme", "fox")
    page.wait_for_selector(wait)
    page.wait_for_timeout(100)
    sw = page.evaluate("document.documentElement.scrollWidth")
    assert sw <= 401, f"page is {sw}px wide in a 400px window"


def test_views_without_results_or_checkpoint_explain_what_to_do(browser):
    # the package's shipped results are hidden from explorer tests (conftest), as if none shipped
    with _own_server(browser, "extrap") as page:
        page.wait_for_function("() => document.querySelector('#v4-chart').textContent.includes('--results')")
        page.click("#tab-attn")
        page.wait_for_selector("#v5-error:not([hidden])")
        assert "--checkpoint" in page.text_content("#v5-error")
        page.click(".lang button[data-lang=zh]")
        assert "检查点" in page.text_content("#v5-error")


def test_numbers_shown_use_real_minus_and_finite_values(view):
    page, watch = view("bias")
    page.select_option("#v2-scheme", "alibi")
    page.wait_for_function("() => document.querySelector('#v2-formula').textContent.includes('m_h')")
    # the heatmap is redrawn after the API answers; wait for its colour-bar labels
    page.wait_for_function(
        "() => document.querySelectorAll('#v2-heatmap .hm-bar-labels span').length >= 2")
    labels = page.locator("#v2-heatmap .hm-bar-labels span").all_text_contents()
    # ALiBi's bias is all <= 0: a one-sided scale from its minimum up to 0 (issue 14)
    assert labels[0].startswith(MINUS) and labels[2].startswith("0")
    assert all(math.isfinite(num(x.split()[0])) for x in labels if x)


@pytest.mark.shipped_data
def test_bias_view_shows_the_shipped_trained_values_by_default(browser):
    """With the trained values the package ships, view 2 opens on them (T5), says where they come from,
    shows them causally (a causal LM trained only d <= 0), and switches back to the initial values."""
    with _own_server(browser, "bias") as page:
        page.wait_for_function("() => document.querySelector('#v2-made-by') !== null")
        assert page.input_value("#v2-scheme") == "t5" and page.input_value("#v2-values") == "trained"
        assert "relpos compare" in page.text_content("#v2-made-by")
        assert page.is_checked("#v2-causal") and page.is_disabled("#v2-causal")
        assert "trained ones" in page.text_content("#v2-learned")
        page.select_option("#v2-values", "initial")
        page.wait_for_function("() => document.querySelector('#v2-made-by') === null")
        assert not page.is_disabled("#v2-causal")
        assert "seeded random initialisation" in page.text_content("#v2-learned")
