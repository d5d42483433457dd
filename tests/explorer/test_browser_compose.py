"""The compose view (issue 14, section 1) in a real browser: content + position = logit -> softmax."""

from __future__ import annotations

import pytest
import torch

import relpos
from tests.explorer.browser_support import browser, num, server, view  # noqa: F401 - fixtures

pytestmark = pytest.mark.browser


def select_cell(page, i: int, j: int) -> None:
    page.focus("[data-key='logits']")
    for _ in range(20):
        page.keyboard.press("ArrowUp")
    page.keyboard.press("Home")
    for _ in range(i):
        page.keyboard.press("ArrowDown")
    for _ in range(j):
        page.keyboard.press("ArrowRight")
    page.wait_for_function("([i, j]) => { const s = document.querySelector('#v0-walk [data-step=pair]');"
                           " return s && s.textContent.includes(`i = ${i}`) && s.textContent.includes(`j = ${j}`); }",
                           arg=[i, j])


def printed(page, step: str) -> float:
    return num(page.text_content(f"#v0-walk [data-step='{step}'] .v"))


def test_clicked_cell_logit_is_content_plus_bias_and_rows_sum_to_one(view):
    page, _ = view("compose")
    page.wait_for_selector("#v0-walk [data-step=logit]")
    assert page.input_value("#v0-scheme") == "t5"
    select_cell(page, 3, 1)
    content, bias, logit = printed(page, "content"), printed(page, "position_bucketed"), printed(page, "logit")
    assert logit == pytest.approx(content + bias, abs=2e-6 * max(1.0, abs(logit)))
    # the walk-through's steps are the library's: d, bucket, and B(i, j) of T5 built as the view builds it
    assert "d = j − i = 1 − 3 = −2" in page.text_content("#v0-walk [data-step=d]")
    torch.manual_seed(0)
    enc = relpos.make_encoding("t5", n_heads=2, head_dim=16, causal=False, max_len=64)
    pos = torch.arange(6)[None]
    with torch.no_grad():
        want = enc.bias(pos, pos)[0, 0, 3, 1].item()
    assert bias == pytest.approx(want, rel=1e-5, abs=1e-7)
    bucket = int(enc.buckets(torch.tensor(-2)))
    assert f"= {bucket}" in page.text_content("#v0-walk [data-step=bucket]")
    ps = [num(x) for x in page.locator("#v0-row-table tr[data-row=p] td").all_text_contents()]
    assert len(ps) == 6 and sum(ps) == pytest.approx(1.0, abs=2e-3)
    assert num(page.text_content("#v0-row-sum").split()[-1].rstrip(".")) == pytest.approx(1.0, abs=1e-6)
    # switching the position term off: the logit is the content alone
    page.uncheck("#v0-on")
    page.wait_for_selector("#v0-walk [data-step=logit_off]")
    assert printed(page, "logit_off") == pytest.approx(content, abs=1e-9)


def test_shaw_walks_through_the_clip_and_shows_the_value_side(view):
    page, _ = view("compose")
    page.wait_for_selector("#v0-walk [data-step=logit]")
    page.select_option("#v0-scheme", "shaw-kv")
    page.wait_for_selector("#v0-walk [data-step=clip]")
    select_cell(page, 5, 0)
    assert "clip(−5" in page.text_content("#v0-walk [data-step=clip]")
    assert "aᴷ" in page.text_content("#v0-walk [data-step=row]")
    content, pos, logit = printed(page, "content"), printed(page, "position_table"), printed(page, "logit")
    assert logit == pytest.approx(content + pos, abs=2e-6 * max(1.0, abs(logit)))
    assert "Σ" in page.text_content("#v0-value")


def test_parameter_panel_counts_like_the_article(view):
    page, _ = view("compose")
    page.wait_for_selector("#v0-params [data-role=absolute]")
    assert "262,144" in page.text_content("#v0-params [data-role=absolute]")
    assert "1,088" in page.text_content("#v0-params [data-role=table]")
    page.fill("#v0-p-k", "16")
    page.wait_for_function("() => document.querySelector('#v0-params [data-role=table]').textContent.includes('2,112')")
