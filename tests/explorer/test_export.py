"""The static export and the bundler that makes its ES modules work from file://."""

from __future__ import annotations

import json
import re

import pytest

from relpos.explorer import Explorer, export_html
from relpos.explorer.bundle import bundle
from relpos.explorer.export import render_html, snapshot
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
    from relpos.explorer.export import DEFAULT_COMPOSE, DEFAULT_COMPOSE_ZH, DEFAULT_SENTENCE, DEFAULT_SENTENCE_ZH

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
