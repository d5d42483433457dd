"""The explorer in a real browser, views 1 and 2: relative distance, and bias matrices (position-only and
content-dependent schemes). Each view is clicked through and the values it shows are checked against the
library; every request must stay on 127.0.0.1 and the console must stay free of errors
(fixtures: browser_support.py)."""

from __future__ import annotations

import re

import pytest
import torch

from relpos import distance
from tests.explorer.browser_support import MINUS, _t5, browser, cell_readout, num, server, view  # noqa: F401 - fixtures
from tests.explorer.conftest import content_reference

pytestmark = pytest.mark.browser


def test_relative_distance_view(view):
    page, watch = view("offsets")
    page.fill("#v1-text", "one two three four five six seven")
    page.wait_for_function("() => document.querySelectorAll('#v1-tokens .tok').length === 7 &&"
                           " document.querySelector('#v1-tokens .tok-text').textContent === 'one'")
    page.click("#v1-tokens .tok[data-j='3']")
    page.wait_for_selector("#v1-tokens .tok[data-j='3'][aria-pressed=true]")
    want = distance.relative_positions(7)[3].tolist()
    assert want == [-3, -2, -1, 0, 1, 2, 3]

    def shown():
        return [num(t.split("=")[1]) for t in page.locator("#v1-tokens .tok-off").all_text_contents()]

    assert shown() == want
    colours = page.eval_on_selector_all("#v1-tokens .tok", "els => els.map(e => getComputedStyle(e).backgroundColor)")
    left, selfc, right = "rgb(0, 114, 178)", "rgb(0, 0, 0)", "rgb(230, 159, 0)"
    assert colours == [left] * 3 + [selfc] + [right] * 3
    glyphs = page.locator("#v1-tokens .tok-side").all_text_contents()
    assert glyphs == ["◀"] * 3 + ["●"] + ["▶"] * 3  # side is not told by colour alone

    # clip k = 2 (default): offsets beyond +-2 saturate
    clipped = distance.clip_relative(torch.tensor(want), 2).tolist()
    sat = page.eval_on_selector_all("#v1-tokens .tok", "els => els.map(e => e.classList.contains('saturated'))")
    assert sat == [c != d for c, d in zip(clipped, want)]
    assert page.text_content("#v1-tokens .tok[data-j='0'] .tok-clip").strip() == f"→ {MINUS}2"
    # the clip slider, by keyboard: k = 1
    page.focus("#v1-clip")
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("() => document.querySelector('#v1-readout').textContent.includes('k = 1')")
    clipped1 = distance.clip_relative(torch.tensor(want), 1).tolist()
    page.wait_for_function("() => document.querySelectorAll('#v1-tokens .tok.saturated').length === 4")
    clip_texts = page.locator("#v1-tokens .tok-clip").all_text_contents()
    for c, d, tx in zip(clipped1, want, clip_texts):
        assert (tx.strip() == "→ " + str(c).replace("-", MINUS)) if c != d else tx.strip() == ""

    # the sign switch: d = i - j
    page.check("#v1-flip")
    page.wait_for_function("() => document.querySelector('#v1-tokens .tok-off').textContent.includes('= 3')")
    assert shown() == distance.relative_positions(7, convention="i-j")[3].tolist()
    colours2 = page.eval_on_selector_all("#v1-tokens .tok", "els => els.map(e => getComputedStyle(e).backgroundColor)")
    assert colours2 == colours  # sides do not depend on the sign convention
    assert "i − j" in page.text_content("#v1-conv")

    # keyboard: focus the first token and press Enter
    page.focus("#v1-tokens .tok[data-j='0']")
    page.keyboard.press("Enter")
    page.wait_for_selector("#v1-tokens .tok[data-j='0'][aria-pressed=true]")
    assert shown() == distance.relative_positions(7, convention="i-j")[0].tolist()


def test_bias_view_heatmap_cells_equal_library(view):
    page, watch = view("bias")
    page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.length > 0")
    pos = torch.arange(32)[None]
    with torch.no_grad():
        bias = _t5().bias(pos, pos)[0]  # (H, N, N)
    text = cell_readout(page, "#v2-heatmap canvas", "#v2-readout", 3, 7)
    assert "d = j − i = 4" in text
    assert num(text.rsplit("=", 1)[1]) == pytest.approx(bias[0, 3, 7].item(), rel=1e-5, abs=1e-7)

    page.select_option("#v2-head", "2")
    page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.includes('head 3')")
    text = page.text_content("#v2-readout")
    assert num(text.rsplit("=", 1)[1]) == pytest.approx(bias[2, 3, 7].item(), rel=1e-5, abs=1e-7)

    # bucket ids and the boundary table
    page.select_option("#v2-show", "bucket")
    page.wait_for_function("() => document.querySelector('#v2-readout').textContent.includes('bucket =')")
    text = page.text_content("#v2-readout")
    assert num(text.rsplit("=", 1)[1]) == distance.t5_bucket(torch.tensor(4)).item()
    rows = page.locator("#v2-buckets tr").all()
    offs = torch.arange(-31, 32)
    ids = distance.t5_bucket(offs).tolist()
    ranges = []
    for d, b in zip(offs.tolist(), ids):
        if ranges and ranges[-1][0] == b:
            ranges[-1][2] = d
        else:
            ranges.append([b, d, d])
    assert len(rows) == len(ranges) + 1  # header row
    first = [c.strip() for c in rows[1].locator("td").all_text_contents()]
    b, lo, hi = ranges[0]
    assert first == [str(b), f"{lo} … {hi}".replace("-", MINUS), str(hi - lo + 1)]

    # ALiBi: a causal cell and a masked one
    page.select_option("#v2-scheme", "alibi")
    page.check("#v2-causal")
    page.wait_for_function("() => document.querySelector('#v2-formula').textContent.includes('m_h')")
    text = cell_readout(page, "#v2-heatmap canvas", "#v2-readout", 6, 2)
    slope = distance.alibi_slopes(4)[2].item()
    assert num(text.rsplit("=", 1)[1]) == pytest.approx(-slope * 4, rel=1e-6)
    page.keyboard.press("ArrowRight")
    page.keyboard.press("End")
    page.wait_for_function("() => document.querySelector('#v2-readout').textContent.includes('masked')")
    assert "Slopes" in page.text_content("#v2-params")


def test_bias_view_rejects_oversize_input_with_a_clear_message(view):
    page, watch = view("bias")
    watch.allowed_errors.append(r"status of 400")  # the browser logs the refused request itself
    page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.length > 0")
    page.fill("#v2-n", "100000")
    page.wait_for_selector("#v2-error:not([hidden])")
    msg = page.text_content("#v2-error")
    assert "256" in msg and "tokens" in msg
    page.fill("#v2-n", "16")
    page.wait_for_selector("#v2-error", state="hidden")
    # the same message in Chinese
    page.click(".lang button[data-lang=zh]")
    page.fill("#v2-n", "99999")
    page.wait_for_selector("#v2-error:not([hidden])")
    assert "最多 256 个词元" in page.text_content("#v2-error")


def _score(text: str) -> float:
    """The number after "score = " in a readout."""
    return num(re.search(r"score = ([^;\s]+)", text).group(1))


def test_content_scheme_follows_the_typed_text(view, server):
    """FoX: the heatmap is the library's score for the typed text; typing another sentence changes it."""
    page, watch = view("bias")
    page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.length > 0")
    page.select_option("#v2-scheme", "fox")
    page.wait_for_selector("#v2-gate-table")
    assert page.is_visible("#v2-text") and page.is_hidden("#v2-n")
    assert page.is_checked("#v2-causal") and page.is_disabled("#v2-causal")  # FoX is causal only
    assert "content" in page.text_content("#v2-content-note")
    text = page.input_value("#v2-text")
    init_std = float(page.input_value("#v2-opt-init_std"))
    ref = content_reference("fox", text, init_std=init_std)
    shown = cell_readout(page, "#v2-heatmap canvas", "#v2-readout", 4, 1)
    assert f"“{ref['tokens'][4]}”" in shown and f"“{ref['tokens'][1]}”" in shown
    api = server.explorer.get("bias", {"scheme": "fox", "text": text, "causal": "true", "n_heads": "4",
                                       "head": "0", "seed": "0", "head_dim": "64"})
    assert _score(shown) == pytest.approx(api["matrix"][4][1], rel=1e-5, abs=1e-6)
    assert _score(shown) == pytest.approx(ref["score"][0, 4, 1].item(), rel=1e-4, abs=1e-5)
    first = _score(shown)
    # the gate table: tokens and f_t of the shown head, as the library computes them
    toks = page.locator("#v2-gate-table tr[data-row=tok] td").all_text_contents()
    assert toks == ref["tokens"]
    enc, k = ref["enc"], ref["k"]
    with torch.no_grad():
        f = torch.sigmoid(torch.einsum("nd,d->n", k[0, 0], enc.gate_weight[0].double()) + enc.gate_bias[0].double())
    gates = [num(x) for x in page.locator("#v2-gate-table tr[data-row=gate] td").all_text_contents()]
    assert gates == pytest.approx(f.tolist(), rel=2e-3)
    for _ in range(4):  # to (4, 5): a later key
        page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('#v2-readout').textContent.includes('masked')")

    # another sentence, same length: a different matrix, again the library's
    other = "A dog ran under the old car"
    page.fill("#v2-text", other)
    page.wait_for_function("() => document.querySelector('#v2-gate-table tr[data-row=tok] td').textContent === 'A'")
    ref2 = content_reference("fox", other, init_std=init_std)
    shown2 = cell_readout(page, "#v2-heatmap canvas", "#v2-readout", 4, 1)
    assert "“the”" in shown2
    assert _score(shown2) == pytest.approx(ref2["score"][0, 4, 1].item(), rel=1e-4, abs=1e-5)
    assert _score(shown2) != pytest.approx(first, rel=1e-3)

    # CoPE: the readout also gives the contextual position p_ij
    page.select_option("#v2-scheme", "cope")
    page.wait_for_function("() => document.querySelector('#v2-curve-cap').textContent.includes('Contextual')")
    assert page.locator("#v2-gates table").count() == 0 and page.is_hidden("#v2-curve")
    shown3 = cell_readout(page, "#v2-heatmap canvas", "#v2-readout", 5, 2)
    cope = content_reference("cope", other, init_std=float(page.input_value("#v2-opt-init_std")))
    assert _score(shown3) == pytest.approx(cope["score"][0, 5, 2].item(), rel=1e-4, abs=1e-5)
    with torch.no_grad():
        p = cope["enc"].positions(cope["q"], cope["k"], cope["pos"], cope["pos"], cope["scale"])[0, 0, 5, 2].item()
    assert num(shown3.rsplit("=", 1)[1]) == pytest.approx(p, rel=1e-4)

    # too many tokens: a clear message, in the page's language
    watch.allowed_errors.append(r"status of 400")
    page.fill("#v2-text", " ".join(["w"] * 65))
    page.wait_for_selector("#v2-error:not([hidden])")
    assert "64" in page.text_content("#v2-error") and "tokens" in page.text_content("#v2-error")
    page.fill("#v2-text", other)
    page.wait_for_selector("#v2-error", state="hidden")

    # back to a position-only scheme: the length control and the free causal switch return
    page.select_option("#v2-scheme", "t5")
    page.wait_for_function("() => document.querySelector('#v2-formula').textContent.includes('bucket')")
    assert page.is_visible("#v2-n") and page.is_hidden("#v2-text") and page.is_hidden("#v2-content-note")
    assert page.is_enabled("#v2-causal") and not page.is_checked("#v2-causal")


def test_content_scheme_in_chinese(view):
    page, watch = view("bias")
    page.click(".lang button[data-lang=zh]")
    page.select_option("#v2-scheme", "deberta")
    page.wait_for_function("() => document.querySelector('#v2-curve-cap').textContent.includes('δ')")
    assert "i − j" in page.text_content("#v2-scheme-text") and "依赖内容" in page.text_content("#v2-content-note")
    shown = cell_readout(page, "#v2-aux canvas", "#v2-aux-readout", 3, 1)
    assert "i − j = 2" in shown
