"""Screenshots of every explorer view at 1280x800, for the docs and the README.

Run ``python -m relpos.explorer.screenshots`` (needs Playwright and a Chromium;
``/usr/bin/chromium`` by default). Views 0 and 5 show the trained models that
ship with relpos (``relpos/explorer/data/models``); only when none ships and no
``--checkpoint`` is given does it train a tiny byte-level model for a few hundred
steps. View 4 shows the documented results that ship with relpos (or the
``--results`` folders given first). ``--only NAME,...`` retakes some of the shots (no
model is trained unless view 5 is among them). The test suite never runs this.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

VIEWS = (("0-compose", "compose"), ("1-relative-distance", "offsets"), ("2-bias-matrices", "bias"), ("2b-content-fox", "bias:fox"),
         ("2c-rope-geometry", "bias:rope-geometry"), ("3-absolute-vs-relative", "shift"), ("4-extrapolation", "extrap"),
         ("5-attention-maps", "attn"))
#: (file name, view[:scheme of view 2], language, window width) of every shot: every view in both languages
SHOTS = tuple((name, view, "en", 1280) for name, view in VIEWS) + tuple(
    ("zh-" + name, view, "zh", 1280) for name, view in VIEWS) + (("narrow-1-relative-distance", "offsets", "en", 400),)


def train_demo_checkpoint(out: Path, steps: int, scheme: str = "alibi") -> Path:
    """A tiny byte-level LM trained briefly on the standard library (for the attention view)."""
    from relpos.training import checkpoint
    from relpos.data import ByteLMSource, stdlib_corpus
    from relpos.model import ModelConfig
    from relpos.training.loop import TrainConfig, train

    cfg = ModelConfig.preset("tiny", scheme=scheme, n_heads=4, d_model=64)
    data = ByteLMSource(stdlib_corpus("train", max_bytes=2_000_000), batch_size=16, seq_len=64, seed=0)
    res = train(cfg, TrainConfig(steps=steps, batch_size=16, seq_len=64, lr=3e-3, warmup=20, progress=False), data)
    print(f"trained a demo {scheme} model: loss {res.losses[0]:.2f} -> {res.losses[-1]:.2f} in {res.seconds:.0f}s")
    checkpoint.save(out, res.model, cfg)
    return out


def _prepare(page, view: str) -> None:
    """Put each view in a telling state before the shot."""
    if view == "compose":
        page.wait_for_selector("#v0-walk [data-step=logit]")
        page.focus("[data-key='logits']")
        for _ in range(3):
            page.keyboard.press("ArrowDown")
        page.keyboard.press("ArrowRight")
        page.evaluate("window.scrollTo(0, 0)")
    elif view == "offsets":
        page.click("#v1-tokens .tok[data-j='3']")
    elif view == "bias:rope-geometry":  # view 2's RoPE section
        page.wait_for_selector("#rope-circles .rope-pair")
        page.wait_for_selector("#rope-freqs svg")
        page.evaluate("document.querySelector('#v2-rope').scrollIntoView()")
    elif view.startswith("bias:"):  # a content-dependent scheme on its example sentence
        page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.length > 0")
        page.select_option("#v2-scheme", view.split(":", 1)[1])
        page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.includes('Score') ||"
                               " document.querySelector('#v2-hm-cap').textContent.includes('打分')")
        page.focus("#v2-heatmap canvas")
        for _ in range(5):
            page.keyboard.press("ArrowDown")
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        page.evaluate("window.scrollTo(0, 0)")  # focusing the canvas scrolled the header away
    elif view == "bias":
        page.wait_for_function("() => document.querySelector('#v2-hm-cap').textContent.length > 0")
        page.focus("#v2-heatmap canvas")
        for _ in range(20):
            page.keyboard.press("ArrowDown")
        for _ in range(9):
            page.keyboard.press("ArrowRight")
    elif view == "shift":
        page.wait_for_selector("#v3-rows canvas")
        page.hover("#v3-rows canvas[data-key='absolute-diff']", position={"x": 120, "y": 80})
    elif view == "extrap":
        page.wait_for_selector("#v4-legend li")
        page.wait_for_timeout(300)
    elif view == "attn":  # view 0's model on view 0's sentence: a query late in it, a key early on
        page.wait_for_selector("#v5-thumbs .thumb")
        page.focus("#v5-heatmap canvas")
        n = len(page.input_value("#v5-text").encode("utf-8"))
        for _ in range(n - 3):
            page.keyboard.press("ArrowDown")
        for _ in range(4 if n > 20 else 3):
            page.keyboard.press("ArrowRight")
        page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(250)


def shoot(url: str, out: Path, chromium: str, *, zh: bool = True, narrow: bool = True,
          only: set[str] | None = None) -> list[Path]:
    """Take the screenshots from a running explorer at ``url``; return the files written.

    ``only`` restricts them to these file names (without ``.png``).
    """
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--disable-quic"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        try:
            jobs = [j for j in SHOTS if (zh or j[2] != "zh") and (narrow or j[3] >= 1280)
                    and (only is None or j[0] in only)]
            for name, view, lang, width in jobs:
                ctx = browser.new_context(viewport={"width": width, "height": 800}, device_scale_factor=1)
                page = ctx.new_page()
                page.goto(f"{url}?lang={lang}#{view.split(':')[0]}")
                page.wait_for_selector("body[data-ready=true]")
                page.wait_for_timeout(400)
                _prepare(page, view)
                path = out / f"{name}.png"
                page.screenshot(path=str(path), full_page=width < 1280)
                written.append(path)
                ctx.close()
        finally:
            browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m relpos.explorer.screenshots", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/screenshots", help="folder for the PNG files (default docs/screenshots)")
    ap.add_argument("--results", action="append", default=[], metavar="DIR", help="relpos compare output folder(s)")
    ap.add_argument("--checkpoint", action="append", default=[], metavar="DIR", help="checkpoint folder(s)")
    ap.add_argument("--train-steps", type=int, default=300, help="steps of the demo model (default 300)")
    ap.add_argument("--chromium", default="/usr/bin/chromium", help="Chromium executable")
    ap.add_argument("--no-zh", action="store_true", help="skip the Chinese screenshots")
    ap.add_argument("--only", default=None, metavar="NAME,...",
                    help="retake only these shots (file names without .png, e.g. 2b-content-fox)")
    args = ap.parse_args(argv)
    if not Path(args.chromium).exists():
        print(f"no Chromium at {args.chromium}", file=sys.stderr)
        return 2
    only = None
    if args.only:
        only = {x.strip() for x in args.only.split(",") if x.strip()}
        unknown = sorted(only - {j[0] for j in SHOTS})
        if unknown:
            print(f"unknown shot(s) {unknown}; known: {', '.join(j[0] for j in SHOTS)}", file=sys.stderr)
            return 2
    need_model = only is None or any(j[1] == "attn" for j in SHOTS if j[0] in only)

    from relpos.explorer import Explorer
    from relpos.explorer.server import make_server, serve_in_thread

    with tempfile.TemporaryDirectory(prefix="relpos-shots-") as tmp:
        from relpos.explorer.models import shipped_model_dirs

        ckpts = args.checkpoint
        if not ckpts and need_model and not shipped_model_dirs():
            ckpts = [str(train_demo_checkpoint(Path(tmp) / "demo-alibi", args.train_steps))]
        srv = make_server(Explorer(results=args.results, checkpoints=ckpts))
        serve_in_thread(srv)
        try:
            files = shoot(srv.url, Path(args.out), args.chromium, zh=not args.no_zh, only=only)
        finally:
            srv.shutdown()
            srv.server_close()
    for f in files:
        print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
