"""The explorer in a real browser: headless Chromium (system package) driven by Playwright.

Each view is clicked through and the values it shows are checked against the
library; every request must stay on 127.0.0.1 and the console must stay free
of errors.
"""

from __future__ import annotations

import contextlib

import math
import os
import re
from urllib.parse import urlsplit

import pytest
import torch

import relpos
from relpos import distance
from relpos.explorer import Explorer
from relpos.explorer.server import make_server, serve_in_thread
from tests.explorer.conftest import content_reference

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
MINUS = "\u2212"


def num(text: str) -> float:
    """Parse a number the page printed (with a real minus sign, maybe in e-notation)."""
    return float(text.replace(MINUS, "-"))


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"Chromium not found at {CHROMIUM} (CI installs it with `make browser`)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(results_dir, checkpoint_dir):
    srv = make_server(Explorer(results=[results_dir], checkpoints=[checkpoint_dir]))
    serve_in_thread(srv)
    yield srv
    srv.shutdown()
    srv.server_close()


class Watch:
    """Requests and console messages of one page."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.foreign: list[str] = []
        self.errors: list[str] = []
        self.allowed_errors: list[str] = []

    def check(self) -> None:
        assert not self.foreign, f"requests left 127.0.0.1: {self.foreign}"
        bad = [e for e in self.errors if not any(re.search(a, e) for a in self.allowed_errors)]
        assert not bad, f"console errors: {bad}"


def _open_context(browser, width=1280, height=800):
    ctx = browser.new_context(viewport={"width": width, "height": height}, locale="en-US")
    watch = Watch()

    def route(r):
        u = urlsplit(r.request.url)
        if u.scheme in ("data", "file", "blob") or u.hostname == "127.0.0.1":
            r.continue_()
        else:
            watch.foreign.append(r.request.url)
            r.abort()

    ctx.route("**/*", route)
    page = ctx.new_page()
    page.set_default_timeout(15000)

    def on_request(req):
        watch.requests.append(req.url)
        u = urlsplit(req.url)
        if not (u.scheme in ("data", "file", "blob") or u.hostname == "127.0.0.1"):
            watch.foreign.append(req.url)

    page.on("request", on_request)
    page.on("console", lambda m: watch.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: watch.errors.append(f"pageerror: {e}"))
    return ctx, page, watch


@pytest.fixture
def view(browser, server):
    """Open the page at a view: ``page, watch = view("bias")``; checks requests and console after the test."""
    opened = []

    def go(name: str, *, width=1280, height=800):
        ctx, page, watch = _open_context(browser, width, height)
        opened.append((ctx, watch))
        page.goto(server.url + "#" + name)
        page.wait_for_selector("body[data-ready=true]")
        return page, watch

    yield go
    for ctx, watch in opened:
        ctx.close()
        watch.check()
        assert watch.requests, "the page made no requests at all"


def cell_readout(page, canvas: str, readout: str, i: int, j: int) -> str:
    """Move the heatmap's keyboard cursor to (i, j) and return the readout text."""
    page.focus(canvas)
    page.keyboard.press("Home")
    for _ in range(70):  # back to row 0
        page.keyboard.press("PageUp")
    for _ in range(i):
        page.keyboard.press("ArrowDown")
    for _ in range(j):
        page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "([sel, i, j]) => document.querySelector(sel).textContent.includes(`i = ${i}`) &&"
        " document.querySelector(sel).textContent.includes(`j = ${j}`)", arg=[readout, i, j])
    return page.text_content(readout)


# ------------------------------------------------------------------- view 1


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


# ------------------------------------------------------------------- view 2


def _t5(n_heads=4, n=32, causal=False, seed=0):
    torch.manual_seed(seed)
    return relpos.make_encoding("t5", n_heads=n_heads, head_dim=64, causal=causal, max_len=n,
                                num_buckets=32, max_distance=128, init_std=0.02)


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


# ------------------------------------------------------------------- view 3


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


# ------------------------------------------------------------------- view 4


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


# ------------------------------------------------------------------- view 5


def test_attention_view_matches_model(view, checkpoint_dir):
    from relpos import checkpoint

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


# ---------------------------------------------------------- language, layout, keys


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


@contextlib.contextmanager
def _own_server(browser, fragment: str):
    """A page on a fresh server (no results, no checkpoint) opened at ``#fragment``; closed after."""
    srv = make_server(Explorer())
    serve_in_thread(srv)
    ctx, page, watch = _open_context(browser)
    try:
        page.goto(srv.url + "#" + fragment)
        page.wait_for_selector("body[data-ready=true]")
        yield page
    finally:
        ctx.close()
        srv.shutdown()
        srv.server_close()
    watch.check()


def test_views_without_results_or_checkpoint_explain_what_to_do(browser):
    # the package's shipped results are hidden from explorer tests (conftest), as if none shipped
    with _own_server(browser, "extrap") as page:
        page.wait_for_function("() => document.querySelector('#v4-chart').textContent.includes('--results')")
        page.click("#tab-attn")
        page.wait_for_selector("#v5-error:not([hidden])")
        assert "--checkpoint" in page.text_content("#v5-error")
        page.click(".lang button[data-lang=zh]")
        assert "检查点" in page.text_content("#v5-error")


# ------------------------------------------------------------------- export


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
