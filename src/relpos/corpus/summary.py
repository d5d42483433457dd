"""A corpus in console and report lines: its hash, documents, bytes and tokens per split, and the files
skipped and why (from :meth:`relpos.corpus.Corpus.report`).

>>> corpus_lines({"path": "docs", "kind": "folder", "fingerprint": "ab12", "splits": {"train": {"docs": 3,
...     "bytes": 1200, "tokens": 1200}}})
['corpus docs (folder), hash ab12', '  train: 3 documents, 1,200 bytes, 1,200 bytes', '  skipped: none']
"""

from __future__ import annotations

__all__ = ["corpus_lines"]


def corpus_lines(rep: dict) -> list[str]:
    """The corpus as :meth:`relpos.corpus.Corpus.report` describes it: hash, splits, files skipped and why."""
    unit = "tokens" if rep.get("tokenizer") else "bytes"
    lines = [f"corpus {rep.get('path')} ({rep.get('kind')}), hash {rep.get('fingerprint')}"
             + (f", tokenizer {rep.get('tokenizer')}" if rep.get("tokenizer") else "")]
    splits = rep.get("splits") or {}
    eval_only = bool((rep.get("dedup") or {}).get("eval_only"))
    for name, s in sorted(splits.items(), key=lambda kv: ("train", "val", "test").index(kv[0])
                          if kv[0] in ("train", "val", "test") else 3):
        n = "not tokenized (an evaluation never reads it)" if eval_only and name == "train" else \
            f"{s.get('tokens', 0):,} {unit}"
        lines.append(f"  {name}: {s.get('docs', 0):,} documents, {s.get('bytes', 0):,} bytes, {n}")
    skipped = {k: v for k, v in (rep.get("skipped") or {}).items() if v}
    why = {"binary": "binary", "undecodable": "not UTF-8", "unreadable": "unreadable"}
    if skipped:
        ex = rep.get("skipped_examples") or {}
        lines.append("  skipped: " + "; ".join(
            f"{n} {why.get(k, k)} ({', '.join(map(str, ex.get(k, [])[:3]))}{', ...' if n > 3 else ''})"
            for k, n in skipped.items()))
    else:
        lines.append("  skipped: none")
    ident = rep.get("identity") or {}
    if ident:
        removed = {k: v.get("removed_tokens", 0) for k, v in (ident.get("splits") or {}).items()
                   if v.get("removed_tokens")}
        # the split lines above count what is left: say what the removed count is out of
        left = {k: (splits.get(k) or {}).get("tokens", 0) for k in removed}
        lines.append(f"  content sha256 {str(ident.get('sha256', '?'))[:16]}; leak window {ident.get('leak_window')}"
                     + (": removed as also in train " + ", ".join(
                         f"{n:,} of {k}'s {n + left[k]:,} {unit} before deduplication ({left[k]:,} left)"
                         for k, n in removed.items()) if removed else
                        ": not applied (the training split is not tokenized)" if eval_only else ": nothing removed"))
    return lines
