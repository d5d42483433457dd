"""`relpos explore --checkpoint DIR` in a real browser, with the shipped models loaded too: views 0 and 5 open on
the user's checkpoint, not on the shipped default model (the shipped ones stay in the menus)."""

from __future__ import annotations

import pytest

from tests.explorer.browser_support import _open_context, browser, explorer_as_shipped, serving  # noqa: F401

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def user_server(checkpoint_dir):
    """A server as `relpos explore --checkpoint DIR` starts: the user's checkpoint, then the shipped models."""
    ex = explorer_as_shipped(checkpoints=[checkpoint_dir])
    if not any(c.shipped for c in ex.checkpoints):
        pytest.skip("no shipped model in relpos/explorer/data/models (python -m relpos.explorer.make_models)")
    with serving(ex) as srv:
        yield srv


@pytest.mark.parametrize("first", ["attn", "compose"])
def test_views_0_and_5_open_on_the_users_checkpoint(browser, user_server, first):
    ctx, page, watch = _open_context(browser)
    try:
        page.goto(user_server.url + "#" + first)
        page.wait_for_selector("body[data-ready=true]")
        for tab in (first, "compose" if first == "attn" else "attn"):
            page.click(f"#tab-{tab}")
            if tab == "attn":
                page.wait_for_selector("#v5-thumbs .thumb")
                assert page.input_value("#v5-ckpt") == "0"
                assert "alibi" in page.text_content("#v5-ckpt-info")
            else:
                page.wait_for_selector("#v0-walk [data-step=logit]")
                assert page.input_value("#v0-model") == "0"
                assert page.input_value("#v0-scheme") == "alibi" and page.is_disabled("#v0-scheme")
        labels = page.locator("#v5-ckpt option").all_text_contents()
        assert len(labels) == len(user_server.explorer.checkpoints) and "tiny-alibi" in labels[0]
    finally:
        ctx.close()
    watch.check()
