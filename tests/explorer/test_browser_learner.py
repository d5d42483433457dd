"""Browser tests for issue 33, view 5 and the learner's path: the page opened with no arguments shows a
trained model's logits on the default sentence (its position term moving some row's argmax), then that
model's attention maps on that same sentence with token labels, then the documented results with units.
Each test failed on the page before its fix."""

from __future__ import annotations

import pytest
import torch

from tests.explorer.browser_support import browser, cell_readout, num  # noqa: F401 - fixtures
from tests.explorer.test_browser_issue33 import _chart_ready, learner, row_probs, select_cell, shipped_server  # noqa: F401

pytestmark = pytest.mark.browser

# ------------------------------------------------------------------- view 5 and the learner's path


def test_attention_view_is_not_empty_on_arrival_and_decodes_chinese(learner, shipped_server):
    page, _ = learner(hash_="#attn")
    page.wait_for_selector("#v5-thumbs .thumb")
    assert page.is_hidden("#v5-error")
    ck = shipped_server.explorer.checkpoints[int(page.input_value("#v5-ckpt"))]
    assert ck.shipped and page.locator("#v5-thumbs .thumb").count() == ck.config.n_heads
    assert "fitted" in page.text_content("#v5-ckpt-info")
    page.fill("#v5-text", "猫坐在垫子上")
    page.wait_for_function("() => document.querySelector('#v5-cap').textContent.includes('18')")
    page.focus("#v5-heatmap canvas.hm-canvas")
    page.keyboard.press("Home")
    page.wait_for_function("() => document.querySelector('#v5-readout').textContent.includes('猫')")
    assert "xE7" not in page.text_content("#v5-readout")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_attention_view_reads_view0s_sentence_and_model(learner, shipped_server, lang):
    """View 5 shows the model view 0 shows on the sentence typed in view 0, until the learner types
    their own text there (a button gives view 0's sentence back); the example follows the language."""
    ex = shipped_server.explorer
    page, _ = learner(lang=lang)
    page.wait_for_selector("#v0-walk [data-step=logit]")
    other = next(c for c in range(len(ex.checkpoints)) if c != ex.default_model)
    mine = "A dog ran." if lang == "en" else "狗跑了。"
    page.fill("#v0-text", mine)
    page.select_option("#v0-model", str(other))
    page.wait_for_function("(s) => document.querySelector('#v0-model-note').textContent.includes(s)",
                           arg=ex.checkpoints[other].config.scheme)
    page.click("#tab-attn")
    page.wait_for_selector("#v5-thumbs .thumb")
    assert page.input_value("#v5-text") == mine and page.input_value("#v5-ckpt") == str(other)
    n = len(mine.encode("utf-8"))
    page.wait_for_function("(n) => document.querySelector('#v5-cap').textContent.includes(String(n))", arg=n)
    note = page.text_content("#v5-text-note")
    assert ("view 0" in note) if lang == "en" else ("视图 0" in note)
    assert page.is_hidden("#v5-text-sync")
    shown = cell_readout(page, "#v5-heatmap canvas.hm-canvas", "#v5-readout", 0, 0)
    assert f"“{mine[0]}”" in shown
    # the learner's own text here stays theirs when view 0's sentence changes; the button takes it back
    page.fill("#v5-text", "xyz")
    page.wait_for_function("() => document.querySelector('#v5-cap').textContent.includes('3')")
    assert page.is_visible("#v5-text-sync")
    page.click("#tab-compose")
    page.fill("#v0-text", mine + mine)
    page.click("#tab-attn")
    assert page.input_value("#v5-text") == "xyz"
    page.click("#v5-text-sync")
    assert page.input_value("#v5-text") == mine + mine
    page.wait_for_function("(n) => document.querySelector('#v5-cap').textContent.includes(String(n))", arg=2 * n)
    # a model chosen here stays chosen
    page.select_option("#v5-ckpt", str(ex.default_model))
    page.click("#tab-compose")
    page.click("#tab-attn")
    assert page.input_value("#v5-ckpt") == str(ex.default_model)


def test_attention_view_follows_the_example_sentence_into_chinese(learner):
    page, _ = learner(hash_="#attn")
    page.wait_for_selector("#v5-thumbs .thumb")
    assert page.input_value("#v5-text") == "The cat sat on the mat"
    page.click(".lang button[data-lang=zh]")
    page.wait_for_function("() => document.querySelector('#v5-text').value === '猫坐在垫子上'")
    page.wait_for_function("() => document.querySelector('#v5-cap').textContent.includes('18')")
    shown = cell_readout(page, "#v5-heatmap canvas.hm-canvas", "#v5-readout", 3, 0)
    assert "“猫”" in shown and "“坐”" in shown and "xE" not in shown
    # a masked key reads in Chinese too ("p = 0 (masked)" was English inside the Chinese page)
    shown = cell_readout(page, "#v5-heatmap canvas.hm-canvas", "#v5-readout", 0, 3)
    assert "已遮蔽" in shown and "masked" not in shown


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_learners_path(learner, shipped_server, lang):
    """Open with no arguments -> view 0: a trained model's logits on the default sentence, its position
    term visibly changing the softmax -> view 5: that model's attention maps with token labels -> view 4:
    the documented results with units."""
    page, _ = learner(lang=lang)
    ex = shipped_server.explorer
    # view 0
    page.wait_for_selector("#v0-walk [data-step=logit]")
    assert page.get_attribute("#tab-compose", "aria-selected") == "true"
    text = page.input_value("#v0-text")
    assert text == ("The cat sat on the mat" if lang == "en" else "猫坐在垫子上")
    model_index = int(page.input_value("#v0-model"))
    ck = ex.checkpoints[model_index]
    assert ck.shipped and ck.extra.get("fitted") is True
    moves = ex.get("compose", {"text": text, "model": str(model_index)})["argmax_moves"]
    assert moves
    r = moves[0]
    select_cell(page, r, 0)
    on = row_probs(page)
    page.uncheck("#v0-on")
    page.wait_for_selector("#v0-walk [data-step=logit_off]")
    off = row_probs(page)
    assert max(range(len(on)), key=on.__getitem__) != max(range(len(off)), key=off.__getitem__)
    page.check("#v0-on")
    # view 5: the same model's maps ON THE SAME SENTENCE, with its tokens on the axes and in the readout
    page.click("#tab-attn")
    page.wait_for_selector("#v5-thumbs .thumb")
    assert int(page.input_value("#v5-ckpt")) == model_index
    assert page.input_value("#v5-text") == text
    assert lang == "en" or "built-in corpus" not in page.text_content("#v5-ckpt-info")
    assert page.locator("#v5-thumbs .thumb").count() == ck.config.n_heads
    data = text.encode("utf-8")
    n_word = "bytes" if lang == "en" else "字节"
    assert f"{len(data)} {n_word}" in page.text_content("#v5-cap") or f"{len(data)}{n_word}" in page.text_content("#v5-cap")
    assert page.get_attribute("#v5-heatmap canvas.hm-canvas", "data-axes") == "tokens"
    with torch.no_grad():
        maps = ck.model.attention_maps(torch.tensor([list(data)]))
    shown = cell_readout(page, "#v5-heatmap canvas.hm-canvas", "#v5-readout", r, 0)
    assert num(shown.rsplit("=", 1)[1]) == pytest.approx(maps[0][0, 0, r, 0].item(), abs=2e-4)
    first = text[0]  # "T", or the character 猫 (decoded, never its bytes)
    assert f"“{first}”" in shown and "xE" not in shown
    # view 4: the documented results, with the unit of the task on the axis
    page.click("#tab-extrap")
    _chart_ready(page)
    assert ("bytes" if lang == "en" else "字节") in page.text_content("#v4-chart svg text.axis")
    assert page.locator("#v4-legend li").count() >= 10
