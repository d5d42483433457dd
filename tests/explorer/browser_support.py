"""The explorer in a real browser: shared fixtures and helpers of the browser tests (test_browser*.py).

Headless Chromium (the system package) driven by Playwright; every request must stay on 127.0.0.1 and the
console must stay free of errors (:class:`Watch`, checked after each page closes).
"""

from __future__ import annotations

import contextlib
import os
import re
from urllib.parse import urlsplit

import pytest
import torch

import relpos
from relpos.explorer import Explorer
from relpos.explorer.server import make_server, serve_in_thread

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


@contextlib.contextmanager
def serving(ex: Explorer):
    """``ex`` served on a free local port for the block, shut down after."""
    srv = make_server(ex)
    serve_in_thread(srv)
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def explorer_as_shipped(*, checkpoints=(), bundled_results: bool = False) -> Explorer:
    """An Explorer over the models relpos really ships (and, with ``bundled_results``, its documented results),
    as ``relpos explore`` starts; the test session otherwise patches both out (tests/explorer/conftest.py)."""
    from relpos.explorer import api as api_mod
    from relpos.explorer import models as models_mod
    from tests.explorer.conftest import _REAL

    mp = pytest.MonkeyPatch()
    mp.setattr(models_mod, "shipped_model_dirs", _REAL["models"])
    if bundled_results:
        mp.setattr(api_mod, "bundled_results", _REAL["bundled"])
    try:
        return Explorer(checkpoints=list(checkpoints))
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def server(results_dir, checkpoint_dir):
    with serving(Explorer(results=[results_dir], checkpoints=[checkpoint_dir])) as srv:
        yield srv


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


class Pages:
    """The pages one test opens: each waits until the explorer is ready; :meth:`close` checks them all."""

    def __init__(self, browser) -> None:
        self.browser, self.opened = browser, []

    def open(self, url: str, *, width=1280, height=800):
        ctx, page, watch = _open_context(self.browser, width, height)
        self.opened.append((ctx, watch))
        page.goto(url)
        page.wait_for_selector("body[data-ready=true]")
        return page, watch

    def close(self, *, require_requests: bool = False) -> None:
        for ctx, watch in self.opened:
            ctx.close()
            watch.check()
            if require_requests:
                assert watch.requests, "the page made no requests at all"


@pytest.fixture
def view(browser, server):
    """Open the page at a view: ``page, watch = view("bias")``; checks requests and console after the test."""
    pages = Pages(browser)
    yield lambda name, *, width=1280, height=800: pages.open(server.url + "#" + name, width=width, height=height)
    pages.close(require_requests=True)


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


@contextlib.contextmanager
def _own_server(browser, fragment: str):
    """A page on a fresh server (no results, no checkpoint) opened at ``#fragment``; closed after."""
    with serving(Explorer()) as srv:
        ctx, page, watch = _open_context(browser)
        try:
            page.goto(srv.url + "#" + fragment)
            page.wait_for_selector("body[data-ready=true]")
            yield page
        finally:
            ctx.close()
    watch.check()


def _t5(n_heads=4, n=32, causal=False, seed=0):
    torch.manual_seed(seed)
    return relpos.make_encoding("t5", n_heads=n_heads, head_dim=64, causal=causal, max_len=n,
                                num_buckets=32, max_distance=128, init_std=0.02)
