"""The scale a published claim was tested at on the results page, beside the paper's own
(:mod:`relpos.report.results_claims` quotes both under every verdict): a claim that does not hold at
0.1M parameters and a million examples says less than one that does not hold at the paper's size."""

from __future__ import annotations

from relpos.report.model import ResultsModel, as_model

__all__ = ["PAPER_SCALE", "scale_here"]

#: The scale each paper tested at, as this page quotes it (parameters, examples seen, lengths).
PAPER_SCALE = {
    "press": "about 247M parameters trained on WikiText-103 (about 103M tokens; a 1.3B model on a larger "
             "corpus too)",
    "kazemnejad": "about 107M parameters, 50,000 steps x batch 256 (about 12.8M examples), trained on lengths up "
                  "to 20 and tested to 40",
    "ruoss": "batch 128 for on the order of 10^6 steps (about 10^8 examples), trained on lengths up to 40 and "
             "tested to 500",
    "deletang": "batch 128 for on the order of 10^6 steps (about 10^8 examples), trained on lengths up to 40 and "
                "tested to 500",
}


def _span(xs) -> str:
    xs = sorted(xs)
    if not xs:
        return "?"
    f = (lambda x: f"{x / 1e6:.2f}M") if xs[-1] >= 1e5 else (lambda x: f"{x:,}")  # noqa: E731
    return f(xs[0]) if f(xs[0]) == f(xs[-1]) else f"{f(xs[0])}-{f(xs[-1])}"


def scale_here(results: dict | ResultsModel, tasks, claim: str) -> str:
    """The scale a claim was tested at here, from the fitted base rows of its ``tasks``: parameters, examples
    seen by the kept model (its steps x batch size) and lengths (trained at L, scored at 2L, or the longest
    language-modelling length), beside the paper's (:data:`PAPER_SCALE`)."""
    model = as_model(results)
    results = model.results
    cfg = results.get("config") or {}
    params, seen, lens = [], [], set()
    for r, ok in zip(results["runs"], model.fitted):
        if not ok or r["task"] not in tasks or r.get("variant"):
            continue
        tr = r.get("train") or {}
        batch = ((cfg.get("task_train") or {}).get(r["task"]) or {}).get("batch_size", cfg.get("batch_size"))
        if tr.get("params"):
            params.append(int(tr["params"]))
        if tr.get("steps") and batch:
            seen.append(int(tr["steps"]) * int(batch))
        L = r["train_len"]
        far = 2 * L if r["task"] != "lm" else max((m["eval_len"] for m in r.get("metrics") or []), default=L)
        lens.add(f"{r['task']} {L} -> {far}" + {"lm": " bytes", "mqar": " pairs"}.get(r["task"], ""))
    if not params:
        return f"Scale: nothing fitted here to test at; the paper: {PAPER_SCALE[claim]}."
    return (f"Scale: here {_span(params)} parameters, {_span(seen)} training sequences seen (steps x batch), "
            f"lengths trained -> scored {', '.join(sorted(lens))}; the paper: {PAPER_SCALE[claim]}.")
