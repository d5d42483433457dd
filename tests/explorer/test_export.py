"""The static export and the bundler that makes its ES modules work from file://."""

from __future__ import annotations

import json
import os
import re

import pytest

from relpos.explorer import Explorer, export_html
from relpos.explorer.bundle import bundle
from relpos.explorer.export import DEFAULT_COMPOSE, DEFAULT_COMPOSE_ZH, DEFAULT_SENTENCE, render_html, snapshot, snapshot_key
from relpos.explorer.server import STATIC_FILES, static_text


def _modules(files: dict[str, str]):
    return lambda path: files[path]


def test_bundle_orders_modules_after_their_imports_and_runs_each_once():
    files = {
        "app.js": "import { b } from './lib/b.js';\nimport a, { x as y } from './a.js';\nb(y);",
        "a.js": "export const x = 1;\nexport default { k: 2 };",
        "lib/b.js": "import * as A from '../a.js';\nexport function b(v) { return v + A.x; }",
    }
    out = bundle("app.js", _modules(files))
    order = re.findall(r"__modules\['([^']+)'\] = ", out)
    assert order == ["a.js", "lib/b.js", "app.js"]
    assert "const { b } = __modules['lib/b.js'];" in out
    assert "const A = __modules['a.js'];" in out and "return { b };" in out
    assert "return { x, default: __default };" in out
    assert not re.search(r"^\s*(import|export)\b", out, re.M)


def test_bundle_refuses_what_it_cannot_translate():
    with pytest.raises(ValueError, match="cycle"):
        bundle("a.js", _modules({"a.js": "import { b } from './b.js';", "b.js": "import { a } from './a.js';"}))
    with pytest.raises(ValueError, match="relative"):
        bundle("a.js", _modules({"a.js": "import { b } from 'b';"}))
    with pytest.raises(ValueError, match="cannot bundle"):
        bundle("a.js", _modules({"a.js": "export { x };"}))


def test_every_page_module_is_served_and_bundled():
    js = [p for p in STATIC_FILES if p.endswith(".js")]
    assert {"/app.js", "/api.js", "/dom.js", "/heatmap.js", "/linechart.js", "/i18n/en.js", "/i18n/zh.js",
            "/views/bias.js"} <= set(js)
    out = bundle("app.js", static_text)
    for p in js:
        assert f"__modules['{p[1:]}']" in out, p
    for p in js:  # no module over 500 lines
        assert static_text(p[1:]).count("\n") <= 500, p


def test_i18n_tables_have_the_same_keys():
    def keys(name):
        return set(re.findall(r"(?:^|,)\s*'([\w.-]+)':", static_text(name), re.M))

    en, zh = keys("i18n/en.js"), keys("i18n/zh.js")
    # Chinese builds error sentences from codes (err.*); English shows the server's own message
    assert len(en) > 100 and all(k.startswith("err.") for k in zh - en), sorted(zh - en)
    assert not (en - zh), sorted(en - zh)
    # panels stack on a phone: no text may place them "left" and "right" (issue 14)
    assert not re.search(r"\b(Left|Right):", static_text("i18n/en.js"))
    assert not re.search(r"[左右]图", static_text("i18n/zh.js"))
    from relpos.explorer.export import DEFAULT_SENTENCE_ZH

    assert f"compose_sentence: '{DEFAULT_COMPOSE_ZH}'" in static_text("i18n/zh.js")
    assert f"compose_sentence: '{DEFAULT_COMPOSE}'" in static_text("i18n/en.js")
    assert f'value="{DEFAULT_COMPOSE}"' in static_text("index.html")

    assert f"default_sentence: '{DEFAULT_SENTENCE_ZH}'" in static_text("i18n/zh.js")
    assert f"default_sentence: '{DEFAULT_SENTENCE}'" in static_text("i18n/en.js")


def test_exported_page_has_no_module_scripts_or_external_loads(tmp_path):
    html = render_html({"created": "now", "version": "x", "responses": {}})
    assert 'type="module"' not in html and "src=" not in html.split("<body", 1)[1]
    assert not re.search(r"^\s*import\s.+from\s+'", html, re.M)


def test_snapshot_holds_every_bias_scheme_of_the_view():
    ex = Explorer()
    snap = snapshot(ex)
    keys = [json.loads(k.split("?", 1)[1]) for k in snap["responses"] if k.startswith("bias?")]
    shown = {dict(k)["scheme"] for k in keys}
    assert shown == {b["key"] for b in ex.get("info", {})["bias_schemes"]}
    assert all("data" in v or "error" in v for v in snap["responses"].values())


def test_export_writes_atomically_and_refuses_bad_paths(tmp_path):
    ex = Explorer()
    out = export_html(ex, tmp_path / "page.html")
    assert out.read_text(encoding="utf-8").startswith("<!doctype html>") or "<html" in out.read_text()
    assert not list(tmp_path.glob(".relpos-export-*"))
    with pytest.raises(ValueError, match=".html"):
        export_html(ex, tmp_path / "page.txt")
    with pytest.raises(FileNotFoundError):
        export_html(ex, tmp_path / "missing" / "page.html")


# ------------------------------------------------ the export (moved from test_api.py)


@pytest.fixture(scope="module")
def ex(results_dir, checkpoint_dir):
    return Explorer(results=[results_dir], checkpoints=[checkpoint_dir])



def test_export_is_self_contained(ex, tmp_path):
    out = export_html(ex, tmp_path / "explorer.html")
    html = out.read_text(encoding="utf-8")
    # no external resources: no src= or stylesheet links at all, only inline script/style
    assert not re.search(r"<(script|img|iframe|link|source|video|audio)[^>]*\s(src|href)=[\"'](?!data:)", html, re.I)
    assert "@import" not in html and "url(http" not in html
    assert "connect-src 'none'" in html
    snap = json.loads(re.search(r"window\.RELPOS_SNAPSHOT = (.*?);</script>", html, re.S).group(1))
    assert snapshot_key("info", {}) in snap["responses"]
    key = snapshot_key("offsets", {"text": DEFAULT_SENTENCE, "convention": "j-i", "clip": "2"})
    assert snap["responses"][key]["data"]["clipped"][3] == [-2, -2, -1, 0, 1, 2, 2]
    fox = snapshot_key("bias", {"scheme": "fox", "text": DEFAULT_SENTENCE, "causal": "true", "n_heads": "4",
                                "head": "1", "seed": "0", "head_dim": "64"})
    assert snap["responses"][fox]["data"]["tokens"] == DEFAULT_SENTENCE.split()
    # view 5 reads view 0's sentence: the snapshot holds it in both languages
    for text in (DEFAULT_COMPOSE, DEFAULT_COMPOSE_ZH):
        att = snapshot_key("attention", {"checkpoint": "0", "text": text, "layer": "0"})
        assert len(snap["responses"][att]["data"]["maps"]) == 2
    assert out.stat().st_size < 8_000_000  # a grid of settings (issue 14): N = 16, 32, 64, compose, both languages
    with pytest.raises(ValueError, match=".html"):
        export_html(ex, tmp_path / "x.txt")


def test_page_defaults_match_export():
    html = static_text("index.html")
    assert f'value="{DEFAULT_SENTENCE}"' in html
    # view 5's text box starts on view 0's sentence (the view follows view 0)
    assert f'<textarea id="v5-text" rows="3" maxlength="1000" spellcheck="false">{DEFAULT_COMPOSE}</textarea>' in html


def test_snapshot_key_matches_javascript():
    """app.js builds keys as route + JSON.stringify(sorted [name, String(value)] pairs)."""
    js = static_text("api.js")
    assert "route + '?' + JSON.stringify(entries)" in js
    assert snapshot_key("bias", {"n": "3", "head": "0", "text": "猫 \"x\""}) == \
        'bias?[["head","0"],["n","3"],["text","猫 \\"x\\""]]'


def test_cli_export_and_errors(tmp_path, results_dir, capsys):
    from relpos.cli import main

    out = tmp_path / "page.html"
    assert main(["explore", "--export", str(out), "--results", str(results_dir)]) == 0
    assert out.exists() and "wrote" in capsys.readouterr().out
    assert main(["explore", "--export", str(out), "--results", str(tmp_path / "missing")]) == 2
    assert "no results.json" in capsys.readouterr().err
    assert main(["explore", "--port", "70000"]) == 2


def test_cli_serves_on_loopback_and_stops_on_ctrl_c():
    """`relpos explore` prints its address, serves the page and the API, opens nothing, stops on Ctrl+C."""
    import signal
    import subprocess
    import sys
    import urllib.request

    env = dict(os.environ, BROWSER="false")  # a stray webbrowser.open would run `false`, not a browser
    # -X faulthandler: if it ever hangs, SIGABRT below prints every thread's stack into the failure
    # SIGINT back to its default in the child: a test runner's worker (pytest-xdist) may ignore it, and
    # an ignored SIGINT is inherited, so Python would never raise KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "relpos.cli", "explore"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, line + proc.stderr.read() if proc.poll() is not None else line
        url = m.group(0)
        with urllib.request.urlopen(url, timeout=10) as r:
            assert b"relpos explorer" in r.read()
        with urllib.request.urlopen(url + "api/offsets?text=a%20b", timeout=10) as r:
            assert json.loads(r.read())["offsets"] == [[0, 1], [-1, 0]]
        proc.send_signal(signal.SIGINT)
        try:
            # stopping takes 0.5 s on an idle machine and 2 s beside two busy processes; a loaded CI
            # machine (two test workers, Chromium) gets a generous limit
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"relpos explore did not stop within 60 s of Ctrl+C; its threads:\n{err[-6000:]}")
        assert proc.returncode == 0 and "stopped" in out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
