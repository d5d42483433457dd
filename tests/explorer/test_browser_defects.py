"""Browser tests for the defects of issue 14, section 4 (each failed on the page before its fix)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch

from relpos import distance
from tests.explorer.browser_support import MINUS, browser, num, server, view  # noqa: F401 - fixtures

pytestmark = pytest.mark.browser


def hover(page, canvas: str, i: int, j: int, n: int) -> None:
    """Move the mouse over cell (i, j) of an n x n heatmap drawn with ticks (30 px left, 22 px top margins)."""
    box = page.locator(canvas).bounding_box()
    cs = (box["width"] - 34) / n
    page.mouse.move(box["x"] + 30 + (j + 0.5) * cs, box["y"] + 22 + (i + 0.5) * cs)


def wait_cap(page, text: str) -> None:
    page.wait_for_function("(s) => document.querySelector('#v2-hm-cap').textContent.includes(s)", arg=text)


# ------------------------------------------------------------------- view 2


def test_readout_never_keeps_the_previous_schemes_value(view):
    page, _ = view("bias")
    wait_cap(page, "32")
    hover(page, "#v2-heatmap canvas.hm-canvas", 5, 1, 32)
    page.wait_for_function("() => document.querySelector('#v2-readout').textContent.includes('i = 5')")
    t5_text = page.text_content("#v2-readout")
    page.select_option("#v2-scheme", "alibi")
    page.wait_for_function("(old) => document.querySelector('#v2-readout').textContent !== old", arg=t5_text)
    shown = page.text_content("#v2-readout")
    slope = distance.alibi_slopes(4)[0].item()
    assert "i = 5" in shown and num(shown.rsplit("=", 1)[1].split()[0]) == pytest.approx(-4 * slope, rel=1e-5)
    # a cell that does not exist in the next matrix is not shown at all
    hover(page, "#v2-heatmap canvas.hm-canvas", 22, 3, 32)
    page.wait_for_function("() => document.querySelector('#v2-readout').textContent.includes('i = 22')")
    page.select_option("#v2-scheme", "fox")
    page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.length > 0 && "
                           "!document.querySelector('#v2-readout').textContent.includes('i = 22')")


def test_one_signed_bias_uses_a_one_sided_scale(view):
    page, _ = view("bias")
    page.select_option("#v2-scheme", "alibi")
    wait_cap(page, "32")
    page.wait_for_function("() => document.querySelectorAll('#v2-heatmap .hm-bar-labels span').length === 3")
    labels = page.locator("#v2-heatmap .hm-bar-labels span").all_text_contents()
    assert labels[2].startswith("0") and labels[0].startswith(MINUS), labels


def test_t5_at_256_has_readable_bucket_lines_and_a_head_legend(view):
    page, _ = view("bias")
    page.fill("#v2-n", "256")
    wait_cap(page, "256")
    dotted = page.locator("#v2-curve line[stroke-dasharray='2 3']").count()
    assert dotted <= 16
    assert page.locator("#v2-curve-legend li").count() == 4  # one per head


def test_sandwich_offers_no_seed_and_fox_gates_do_not_overflow(view):
    page, _ = view("bias")
    page.select_option("#v2-scheme", "sandwich")
    wait_cap(page, "32")
    assert page.is_hidden("#v2-seed-wrap")
    page.select_option("#v2-scheme", "fox")
    page.fill("#v2-text", " ".join(f"word{k}" for k in range(40)))
    page.wait_for_selector("#v2-gate-table")
    page.wait_for_function("() => document.querySelectorAll('#v2-gate-table tr:first-child td').length === 40")
    assert page.is_visible("#v2-seed-wrap")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_errors_say_it_once_in_english_and_only_in_chinese(view):
    page, watch = view("bias")
    watch.allowed_errors.append(r"status of 400")
    wait_cap(page, "32")
    page.fill("#v2-n", "1000")
    page.wait_for_selector("#v2-error:not([hidden])")
    msg = page.text_content("#v2-error")
    assert len(re.findall("too large", msg, re.I)) == 1 and "256 tokens" in msg
    page.click(".lang button[data-lang=zh]")
    page.fill("#v2-n", "999")
    page.wait_for_function("() => document.querySelector('#v2-error').textContent.includes('999')")
    zh = page.text_content("#v2-error")
    assert "最多 256 个词元" in zh and not re.search(r"[A-Za-z]{4,} [A-Za-z]{3,}", zh), zh


# ------------------------------------------------------------------- view 3


def test_shift_maps_are_wide_with_true_ticks_and_white_noise(view):
    page, _ = view("shift", width=1400, height=900)
    page.wait_for_selector("#v3-verdict-relative")
    page.wait_for_function("() => document.querySelectorAll('[data-key=\"relative-diff\"]').length === 1")
    widths = page.evaluate("() => [...document.querySelectorAll('#v3-rows canvas.hm-canvas')].map(c => c.clientWidth)")
    assert min(widths) >= 200, widths
    assert page.get_attribute("[data-key='relative-shifted']", "data-first-tick") == "5"
    assert page.get_attribute("[data-key='relative-base']", "data-first-tick") == "0"
    # the relative scheme's difference is float32 noise: every cell draws (near) white
    rgb = page.evaluate("""() => {
        const c = document.querySelector('[data-key="relative-diff"]');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let worst = 255;
        // sample the cell area (skip the tick margins)
        for (let y = Math.floor(c.height * 0.2); y < c.height * 0.95; y += 3)
          for (let x = Math.floor(c.width * 0.2); x < c.width * 0.95; x += 3) {
            const k = 4 * (y * c.width + x);
            if (d[k + 3] === 0) continue;
            worst = Math.min(worst, d[k], d[k + 1], d[k + 2]);
          }
        return worst;
    }""")
    assert rgb >= 225, rgb


def test_fire_is_labelled_and_its_normaliser_explained(view):
    page, _ = view("shift")
    page.wait_for_selector("#v3-verdict-absolute")
    option = page.locator("#v3-abs option[value='fire']").text_content()
    assert "not purely relative" in option
    page.select_option("#v3-abs", "fire")
    page.wait_for_function("() => document.querySelector('#v3-rows h3').textContent.startsWith('fire')")
    assert "max(L, i)" in page.text_content("#v3-note-absolute")


# ------------------------------------------------------------------- view 5


def test_attention_colour_bar_marks_the_cut(view):
    page, _ = view("attn")
    page.wait_for_selector("#v5-thumbs .thumb")
    page.wait_for_function("() => document.querySelectorAll('#v5-heatmap .hm-bar-labels span').length === 3")
    top = page.locator("#v5-heatmap .hm-bar-labels span").nth(2).text_content()
    assert top.startswith("≥ "), top


# ------------------------------------------------------------------- view 1


def test_offsets_error_clears_tokens_and_long_text_wraps(view):
    page, watch = view("offsets")
    watch.allowed_errors.append(r"status of 400")
    page.wait_for_selector("#v1-tokens .tok")
    assert "k" in page.text_content("#v1-k-note") and "d" in page.text_content("#v1-k-note")
    page.fill("#v1-text", " ".join(["w"] * 70))
    page.wait_for_selector("#v1-error:not([hidden])")
    assert page.locator("#v1-tokens .tok").count() == 0 and page.text_content("#v1-readout") == ""
    page.fill("#v1-text", " ".join(f"w{k}" for k in range(60)))
    page.wait_for_selector("#v1-error", state="hidden")
    page.wait_for_function("() => document.querySelectorAll('#v1-tokens .tok').length === 60")
    assert page.evaluate("() => { const t = document.querySelector('#v1-table');"
                         " return t.scrollWidth <= t.clientWidth + 1; }")


def test_offsets_full_matrix_with_numbers(view):
    page, _ = view("offsets")
    page.wait_for_selector("#v1-tokens .tok")
    page.click("#v1-matrix-wrap summary")
    page.wait_for_selector("#v1-matrix-table")
    rows = page.locator("#v1-matrix-table tr").all()
    cells = [[c.text_content() for c in r.locator("td").all()] for r in rows[1:]]
    want = distance.relative_positions(7)
    clipped = distance.clip_relative(want, 2)
    for i in range(7):
        for j in range(7):
            d, c = int(want[i, j]), int(clipped[i, j])
            text = (str(d) + (f"→{c}" if c != d else "")).replace("-", MINUS)
            assert cells[i][j] == text, (i, j, cells[i][j], text)


# ------------------------------------------------------------------- Chinese


def test_chinese_default_sentence_and_terms(view):
    page, _ = view("offsets")
    page.wait_for_selector("#v1-tokens .tok")
    page.click(".lang button[data-lang=zh]")
    page.wait_for_function("() => document.querySelector('#v1-tokens .tok .tok-text').textContent === '猫'")
    assert page.input_value("#v1-text") == "猫坐在温暖的垫子上"
    from relpos.explorer.server import static_text

    zh = static_text("i18n/zh.js")
    assert "截断" not in zh and "变了" not in zh and "没变" not in zh


def _has_cjk_font() -> bool:
    if not shutil.which("fc-list"):
        return False
    return bool(subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout.strip())


@pytest.mark.skipif(not _has_cjk_font(), reason="no CJK font installed (CI installs fonts-wqy-microhei)")
def test_chinese_renders_as_glyphs_not_boxes(view):
    page, _ = view("offsets")
    page.click(".lang button[data-lang=zh]")
    page.wait_for_selector("html[lang=zh-CN]")
    # draw a CJK character and a code point no font has (a box) in the page's font; they must differ
    same = page.evaluate("""() => {
        const font = getComputedStyle(document.body).fontFamily;
        const draw = (s) => {
            const c = document.createElement('canvas'); c.width = 40; c.height = 40;
            const x = c.getContext('2d'); x.font = '28px ' + font; x.fillText(s, 4, 30);
            return [x.measureText(s).width, Array.from(x.getImageData(0, 0, 40, 40).data).join(',')];
        };
        const [w1, p1] = draw('猫'), [w2, p2] = draw('\\u{10FFFD}');
        return p1 === p2 || Math.abs(w1 - w2) < 0.01;
    }""")
    assert not same


# ------------------------------------------------------------------- view 4


def test_extrapolation_series_have_their_own_colours_and_the_region_past_training_is_shaded(view):
    page, _ = view("extrap")
    page.wait_for_selector("#v4-chart svg .series")
    styles = page.evaluate("""() => [...document.querySelectorAll('#v4-chart svg g.series')].map((g) => {
        const p = g.querySelector('path[fill=none]');
        const m = g.querySelector('circle, rect, path[fill]:not([fill=none]), path[stroke-width="2.2"]:not([fill=none])');
        return p.getAttribute('stroke') + '|' + (m ? m.tagName + (m.getAttribute('d') || '').slice(0, 1) : '');
    })""")
    assert len(styles) >= 4 and len(set(s.split("|")[0] for s in styles)) == len(styles), styles
    assert page.locator("#v4-chart svg rect.beyond").count() == 1
    assert "beyond the training length" in page.text_content("#v4-chart svg")
