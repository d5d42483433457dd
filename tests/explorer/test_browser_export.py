"""The exported page in a real browser, opened from file:// with zero network requests."""

from __future__ import annotations

import pytest
import torch

from relpos.explorer import export_html
from tests.explorer.browser_support import _open_context, _t5, browser, cell_readout, num, server  # noqa: F401

pytestmark = pytest.mark.browser


def test_exported_file_works_offline(browser, server, tmp_path):
    path = export_html(server.explorer, tmp_path / "explorer.html")
    ctx, page, watch = _open_context(browser)
    try:
        page.goto(path.as_uri() + "#offsets")
        page.wait_for_selector("body[data-ready=true]")
        page.wait_for_selector("#v1-tokens .tok")
        assert not page.is_hidden("#snapshot-banner")
        assert page.locator("#v1-tokens .tok").count() == 7
        assert page.is_editable("#v1-text") is True  # view 1 is computed in the page (issue 33)
        page.check("#v1-flip")
        page.wait_for_function("() => document.querySelector('#v1-conv').textContent.includes('i − j')")
        page.click("#tab-bias")
        page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.length > 0")
        pos = torch.arange(32)[None]
        with torch.no_grad():
            want = _t5().bias(pos, pos)[0, 0, 1, 4].item()
        text = cell_readout(page, "#v2-heatmap canvas", "#v2-readout", 1, 4)
        assert num(text.rsplit("=", 1)[1]) == pytest.approx(want, rel=1e-5, abs=1e-7)
        # a setting outside the snapshot says so instead of failing silently
        page.fill("#v2-seed", "7")
        page.wait_for_selector("#v2-error:not([hidden])")
        assert "snapshot" in page.text_content("#v2-error")
        for name in ("shift", "extrap", "attn"):
            page.click(f"#tab-{name}")
            page.wait_for_selector(f"#view-{name}:not([hidden])")
        page.wait_for_selector("#v5-thumbs .thumb")
        assert page.is_hidden("#v5-error")
        assert all(u.startswith("file:") or u.startswith("data:") for u in watch.requests), watch.requests
    finally:
        ctx.close()
    watch.check()


def test_exported_page_offline_at_another_length_and_scheme_and_compose(browser, server, tmp_path):  # noqa: F811
    """Issue 14: the export holds a grid (several N, every scheme), fades plots it has no data for,
    and the compose view works from file:// with zero network requests."""
    from relpos import distance
    from relpos.explorer import export_html
    from tests.explorer.browser_support import _open_context

    lines = []
    path = export_html(server.explorer, tmp_path / "explorer.html", progress=lambda d, t: lines.append((d, t)))
    assert lines and lines[-1][0] == lines[-1][1]
    ctx, page, watch = _open_context(browser)
    try:
        page.goto(path.as_uri() + "#bias")
        page.wait_for_selector("body[data-ready=true]")
        page.select_option("#v2-scheme", "alibi")
        page.fill("#v2-n", "64")
        page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.includes('64')")
        assert page.is_hidden("#v2-error")
        assert not page.evaluate("() => document.querySelector('#view-bias .visual').classList.contains('stale')")
        page.fill("#v2-n", "48")  # not in the snapshot: an error, and the old plot is faded, not left as current
        page.wait_for_selector("#v2-error:not([hidden])")
        assert page.evaluate("() => document.querySelector('#view-bias .visual').classList.contains('stale')")
        page.click("#tab-compose")
        page.wait_for_selector("#v0-walk [data-step=logit]")
        page.select_option("#v0-scheme", "alibi")
        page.wait_for_selector("#v0-walk [data-step=position_bias]")
        slope = distance.alibi_slopes(2)[0].item()
        text = page.text_content("#v0-walk [data-step=position_bias] .v")
        assert num(text) == pytest.approx(-1 * slope, rel=1e-5)  # default cell (2, 1): d = -1
        assert all(u.startswith("file:") or u.startswith("data:") for u in watch.requests), watch.requests
    finally:
        ctx.close()
    watch.check()
