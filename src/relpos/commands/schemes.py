"""``relpos schemes``: list every scheme, where it acts and its learned-parameter count."""

from __future__ import annotations

import argparse
import inspect
import json

HELP = "list every position scheme, where it acts, and its learned-parameter count"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--d-model", type=int, default=512, help="model width C (default 512)")
    p.add_argument("--heads", type=int, default=8, help="attention heads H (default 8)")
    p.add_argument("--k", type=int, default=8, help="clip distance k of the schemes that take one (Shaw; default 8)")
    p.add_argument("--max-len", type=int, default=512, help="longest sequence for learned tables (default 512)")
    p.add_argument("--bidirectional", action="store_true", help="count for bidirectional attention")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


#: Largest --d-model and --heads this command accepts (the counts are exact up to these).
MAX_D_MODEL = 1 << 20
MAX_HEADS = 1024


def rows(d_model: int = 512, heads: int = 8, k: int = 8, max_len: int = 512, causal: bool = True) -> list[dict]:
    """One dict per registered scheme: name, acts_on, params, summary, paper.

    The encodings are built on the ``meta`` device: counting parameters allocates
    nothing, whatever the sizes.

    Raises:
        TypeError / ValueError: a size of the wrong type or outside its range
            (named by its flag).
    """
    import torch

    from relpos.encodings import SCHEMES, get_scheme, make_encoding, scheme_names
    from relpos.validation import MAX_POSITIONS, MAX_TABLE, check_bool, check_int

    check_int("--d-model", d_model, 1, MAX_D_MODEL)
    check_int("--heads", heads, 1, MAX_HEADS)
    check_int("--k", k, 0, MAX_TABLE)
    check_int("--max-len", max_len, 1, MAX_POSITIONS)
    check_bool("causal", causal)
    if d_model % heads:
        raise ValueError(f"--d-model ({d_model}) must be divisible by --heads ({heads})")
    with torch.device("meta"):
        return _rows(d_model, heads, k, max_len, causal, SCHEMES, get_scheme, make_encoding, scheme_names)


def _rows(d_model, heads, k, max_len, causal, SCHEMES, get_scheme, make_encoding, scheme_names) -> list[dict]:
    out = []
    for name in scheme_names():
        cls, _ = get_scheme(name)
        opts = {"k": k} if "k" in inspect.signature(cls).parameters else {}  # schemes with a clip distance
        # causal-only schemes are counted in their causal form
        enc = make_encoding(name, n_heads=heads, head_dim=d_model // heads, d_model=d_model,
                            max_len=max_len, causal=causal or cls.causal_only, **opts)
        d = enc.describe()
        d["name"] = name
        d["summary"] = SCHEMES[name].summary
        out.append(d)
    out.append({
        "name": "randomized",
        "acts_on": ["positions"],
        "params": 0,
        "relative": None,
        "causal_only": False,
        "paper": "https://arxiv.org/abs/2305.16843",
        "summary": "training-time option: random sorted positions for integer-position schemes",
    })
    return out


def main(args: argparse.Namespace) -> int:
    data = rows(args.d_model, args.heads, args.k, args.max_len, causal=not args.bidirectional)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    w = max(len(r["name"]) for r in data)
    print(f"{'scheme':<{w}}  {'acts on':<18} {'params':>10}  summary")
    for r in data:
        print(f"{r['name']:<{w}}  {','.join(r['acts_on']) or '-':<18} {r['params']:>10,}  {r['summary']}")
    print(f"\n(d_model={args.d_model}, heads={args.heads}, k={args.k}, max_len={args.max_len}, "
          f"{'bidirectional' if args.bidirectional else 'causal'})")
    return 0
