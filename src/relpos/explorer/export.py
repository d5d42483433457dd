"""``relpos explore --export FILE.html``: one self-contained page with a data snapshot.

The file inlines the page's CSS and JavaScript and embeds the API answers for
the default settings of every view (both sign conventions and every clip value
of the example sentence; every bias scheme and head at the default length,
causal and not, the content-dependent ones on the example sentence; shifts 0..24 and a few larger; every task and metric of the
loaded results; every layer of each loaded checkpoint on view 0's sentence in both languages). The
page looks answers up by the same key it would send to a live server, so an
exported page shows exactly what ``relpos explore`` shows for those settings,
with no server and no network (its Content-Security-Policy forbids any
connection).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path

from relpos.explorer.api import ApiError, Explorer
from relpos.explorer.bundle import bundle
from relpos.explorer.server import static_text
from relpos.explorer.views.compose import DEFAULT_K

__all__ = ["export_html", "snapshot", "snapshot_key", "print_progress", "DEFAULT_SENTENCE", "DEFAULT_SENTENCE_ZH",
           "DEFAULT_COMPOSE", "DEFAULT_COMPOSE_ZH"]

#: Defaults the page starts with (they are also written in static/index.html).
DEFAULT_SENTENCE = "The cat sat on the warm mat"
#: The example sentence of the Chinese page (static/i18n/zh.js: default_sentence).
DEFAULT_SENTENCE_ZH = "猫坐在温暖的垫子上"
#: The compose view's starting sentence (static/index.html, #v0-text; view 5 reads the same sentence).
DEFAULT_COMPOSE = "The cat sat on the mat"
#: ... in Chinese (static/i18n/zh.js: compose_sentence).
DEFAULT_COMPOSE_ZH = "猫坐在垫子上"
DEFAULT_CLIP = 2
BIAS_N = 32
#: Lengths of the bias view in the snapshot (the page starts at BIAS_N).
BIAS_NS = (16, 32, 64)
BIAS_HEADS = 4
SHIFT_N = 12
#: View 2 at H = 8 for these schemes (the teaching articles' ALiBi example: slopes 1/2 ... 1/256).
ALIBI_H8 = ("alibi",)
#: (i, j) of the RoPE section in the snapshot: the start, and the same pair moved together and apart.
ROPE_POSITIONS = ((2, 7), (12, 17), (2, 12))
SHIFT_CS = list(range(0, 25)) + [32, 48, 64]

EXPORT_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "connect-src 'none'; base-uri 'none'; form-action 'none'"
)


def snapshot_key(route: str, params: dict[str, str]) -> str:
    """The key the page's ``snapKey`` builds: route + JSON of the sorted (name, value) pairs."""
    entries = [[k, str(params[k])] for k in sorted(params)]
    return route + "?" + json.dumps(entries, ensure_ascii=False, separators=(",", ":"))


def _requests(ex: Explorer, info: dict) -> list[tuple[str, dict[str, str]]]:
    """Every request the page makes for its default settings (mirrors app.js)."""
    reqs: list[tuple[str, dict[str, str]]] = [("info", {})]
    # view 0: the default trained model on both example sentences, every layer and head; every other
    # model's first layer and head; every scheme at its initial values, both heads, both directions
    texts = (DEFAULT_COMPOSE, DEFAULT_COMPOSE_ZH)
    for ck in info["checkpoints"]:
        default = ck["index"] == info.get("default_model")
        layers = range(int(ck["n_layers"] or 0)) if default else range(1)
        heads = range(int(ck["n_heads"] or 0)) if default else range(1)
        for text in texts if default else texts[:1]:
            for layer in layers:
                for head in heads:
                    reqs.append(("compose", {"text": text, "model": str(ck["index"]), "layer": str(layer),
                                             "head": str(head), "causal": "true" if ck.get("causal", True) else "false"}))
    for sc in info["compose_schemes"]:
        for head in ("0", "1"):
            for causal in ("true",) if sc["causal_only"] else ("false", "true"):
                for text in texts:
                    p = {"text": text, "model": "initial", "scheme": sc["name"], "head": head, "causal": causal,
                         "seed": "0"}
                    if sc["position"] == "table":
                        p["k"] = str(DEFAULT_K)
                    reqs.append(("compose", p))
    # view 1
    for sentence in (DEFAULT_SENTENCE, DEFAULT_SENTENCE_ZH):
        n_tokens = len(ex.offsets({"text": sentence})["tokens"])
        for conv in ("j-i", "i-j"):
            for k in range(0, max(1, n_tokens - 1) + 1):
                reqs.append(("offsets", {"text": sentence, "convention": conv, "clip": str(k)}))
    # view 2
    for e in info["bias_schemes"]:
        if not e["available"]:
            continue
        for causal in ("true",) if e.get("causal_only") else ("false", "true"):
            if e["kind"] == "content":  # content-dependent schemes read the example sentence
                bases = [{"scheme": e["key"], "text": s, "causal": causal}
                         for s in (DEFAULT_SENTENCE, DEFAULT_SENTENCE_ZH)]
            else:
                bases = [{"scheme": e["key"], "n": str(n), "causal": causal} for n in BIAS_NS]
            for base in bases:
                if not e["per_head"]:
                    reqs.append(("bias", base))
                    continue
                for h in range(BIAS_HEADS):
                    p = dict(base, n_heads=str(BIAS_HEADS), head=str(h), seed="0")
                    shows = ("bias", "bucket") if e["kind"] == "bucketed" else (None,)
                    for show in shows:
                        for values in ("trained", "initial") if e.get("trained") else (None,):
                            q = dict(p)
                            if e["head_dim"] and values != "trained":  # trained values bring their own D
                                q["head_dim"] = "64"
                            if show:
                                q["show"] = show
                            if values:
                                q["values"] = values
                            reqs.append(("bias", q))
    # ALiBi with H = 8: the articles' slopes 1/2 ... 1/256
    for e in info["bias_schemes"]:
        if e["available"] and e["key"] in ALIBI_H8:
            for causal in ("false", "true"):
                for h in range(8):
                    reqs.append(("bias", {"scheme": e["key"], "n": str(BIAS_N), "causal": causal, "n_heads": "8",
                                          "head": str(h), "seed": "0"}))
    # view 2's RoPE section: every scaling and head width at the starting positions and two shifts of them
    for scaling in ("none", "linear", "ntk", "yarn"):
        for d in ("8", "16", "32"):
            for i, j in ROPE_POSITIONS:
                reqs.append(("rope", {"i": str(i), "j": str(j), "scaling": scaling, "head_dim": d}))
    # view 3 (the page's default pair)
    a, r = info["shift_defaults"]["absolute"], info["shift_defaults"]["relative"]
    # every other scheme against the default partner, at the page's starting shift
    for sc in info["schemes"]:
        if not sc.get("available") or sc["name"] in (a, r) or "relative" not in sc:
            continue
        pair = {"absolute": a, "relative": sc["name"]} if sc["relative"] else {"absolute": sc["name"], "relative": r}
        for h in ("0", "1"):
            reqs.append(("shift", dict(pair, n=str(SHIFT_N), c="5", seed="0", head=h)))
    if a and r:
        for c in SHIFT_CS:
            for h in ("0", "1"):
                reqs.append(("shift", {"absolute": a, "relative": r, "n": str(SHIFT_N), "c": str(c), "seed": "0",
                                       "head": h}))
    # view 4
    for src in info["results"]:
        s = str(src["index"])
        reqs.append(("results", {"source": s}))
        agg = ex.results_view({"source": s})
        for task in agg["tasks"]:
            reqs.append(("results", {"source": s, "task": task}))
            metrics = ex.results_view({"source": s, "task": task})["metrics"]
            for m in metrics:
                reqs.append(("results", {"source": s, "task": task, "metric": m}))
    # view 5: every model on view 0's sentence (the view follows view 0), both languages
    for ck in info["checkpoints"]:
        for text in texts:
            for layer in range(int(ck["n_layers"] or 0)):
                reqs.append(("attention", {"checkpoint": str(ck["index"]), "text": text, "layer": str(layer)}))
    return reqs


def print_progress(done: int, total: int, *, stream=None) -> None:
    """A progress callback for :func:`export_html`: one line every 10% (to stderr)."""
    import sys

    stream = stream or sys.stderr
    step = max(1, total // 10)
    if done == total or done % step == 0:
        print(f"relpos explore: exporting {done}/{total} answers ({100 * done // max(1, total)}%)", file=stream,
              flush=True)


def snapshot(ex: Explorer, progress=None) -> dict:
    """The data an exported page embeds: ``{"created", "responses": {key: {"data"|"error": ...}}}``.

    Args:
        progress: called as ``progress(done, total)`` after each answer (e.g. :func:`print_progress`).
    """
    info = ex.info({})
    responses: dict[str, dict] = {}
    reqs = _requests(ex, info)
    for n, (route, params) in enumerate(reqs, 1):
        if progress is not None:
            progress(n, len(reqs))
        key = snapshot_key(route, params)
        if key in responses:
            continue
        try:
            responses[key] = {"data": ex.get(route, params)}
        except ApiError as e:
            responses[key] = {"error": e.to_json()}
    created = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return {"created": created, "version": info["version"], "responses": responses}


def _script_json(obj) -> str:
    s = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # "<" never appears raw inside a <script> element; U+2028/9 are escaped for old parsers
    return s.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_html(snap: dict) -> str:
    """The self-contained page for a snapshot."""
    html = static_text("index.html")
    css = static_text("style.css")
    # ES modules do not load from file://, so the page's modules are bundled into one classic script
    js = bundle("app.js", static_text).replace("</script", "<\\/script")
    link = '<link rel="stylesheet" href="style.css">'
    script = '<script type="module" src="app.js"></script>'
    if link not in html or script not in html:  # pragma: no cover - guards a broken edit of index.html
        raise RuntimeError("index.html lost its stylesheet link or script tag; cannot inline them")
    html = html.replace('<meta charset="utf-8">',
                        f'<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy" content="{EXPORT_CSP}">',
                        1)
    html = html.replace(link, "<style>\n" + css.replace("</style", "<\\/style") + "\n</style>", 1)
    html = html.replace(script, "<script>window.RELPOS_SNAPSHOT = " + _script_json(snap) + ";</script>\n"
                        "<script>\n" + js + "\n</script>", 1)
    return html


def export_html(explorer: Explorer, path: str | os.PathLike, *, progress=None) -> Path:
    """Write the self-contained page to ``path`` (atomically) and return the path.

    ``progress(done, total)`` is called while the answers are computed (see :func:`print_progress`).
    """
    out = Path(path)
    if out.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"the export file must end in .html, got {str(out)!r}")
    if not out.parent.exists():
        raise FileNotFoundError(f"folder {str(out.parent)!r} does not exist")
    html = render_html(snapshot(explorer, progress))
    fd, tmp = tempfile.mkstemp(prefix=".relpos-export-", suffix=".html", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(html)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
