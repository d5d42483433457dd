"""The scale a published claim was tested at on the results page, beside the paper's own
(:mod:`relpos.report.results_claims` quotes both under every verdict): a claim that does not hold at
0.1M parameters and a million examples says less than one that does not hold at the paper's size."""

from __future__ import annotations

from relpos.report.model import ResultsModel, as_model

__all__ = ["PAPER_SCALE", "scale_here"]

#: The scale each paper tested at, as this page quotes it (parameters, examples seen, lengths). Sources, checked
#: against the papers' code where the papers' bodies were out of reach (the search tool returns their openings):
#:
#: * press (arXiv 2108.12409): 247M parameters is the WikiText-103 model of Baevski & Auli (fairseq
#:   ``transformer_lm_wiki103``: 16 layers of width 1024, 8 heads, feed-forward 4096, adaptive input; paper
#:   section 2.1); 286,000 updates of up to 9,216 tokens per GPU and L = 64-3,072 (the README's training command and
#:   its released checkpoints, ofirpress/attention_with_linear_biases); the 1.3B model trained at 1,024 and tested at
#:   2,048 (abstract).
#: * kazemnejad (arXiv 2305.19466): t5-base's shape decoder-only (configs/t5_dec_base.jsonnet ->
#:   configs/models/t5_base.jsonnet: 12 layers of width 768, about 110M parameters with its 32,128-token
#:   vocabulary; the paper says about 107M), 40,000 steps x batch 64 (configs/trainer/base_model.jsonnet, which
#:   overrides trainer/default.jsonnet's 50,000 x 256), lengths by task split (README: SCAN ``mdlen_tr25_ts48``)
#:   in McGill-NLP/length-generalization.
#: * ruoss (arXiv 2305.16843): 5 layers of width 64, 8 heads, feed-forward 256 (models/transformer.py
#:   TransformerConfig defaults; experiments/example.py), about 0.25M parameters; batch 128, lengths 1-40 uniformly
#:   (experiments/example.py), randomized positions from [0, 2,048) (example.py ``noise_max_length``), tested to
#:   500 and trained for on the order of 10^6 steps (paper section 4, not re-read here) in
#:   google-deepmind/randomized_positional_encodings.
#: * deletang (arXiv 2207.02098): the same Transformer (models/transformer.py: 5 layers of width 64, 8 heads,
#:   widening factor 4), batch 128, lengths 1-40 (training/example.py) in
#:   google-deepmind/neural_networks_chomsky_hierarchy; tested to 500 and on the order of 10^6 steps (paper section 4,
#:   not re-read here).
#: * zoology (arXiv 2312.04927), MQAR, quoted where MQAR's setup is compared (no claim rule reads it): 2 layers,
#:   1 attention head, no MLP, d_model 64-512, 100,000 training examples x 64 epochs (6.4M examples seen), 4-16
#:   key-value pairs in 64-256 tokens (zoology/experiments/paper_configs/iclr24_zoology_figure2/configs.py in
#:   HazyResearch/zoology).
PAPER_SCALE = {
    "press": "247M parameters (16 layers of width 1,024) trained on WikiText-103 (about 103M tokens) for 286,000 "
             "updates of up to 9,216 tokens per GPU, at L = 64-3,072 tokens; a 1.3B model trained at 1,024 tokens "
             "and tested at 2,048 too",
    "kazemnejad": "about 10^8 parameters (T5-base's 12 layers of width 768, decoder only), 40,000 steps x batch 64 "
                  "(about 2.6M examples), trained on short instances of each task and tested on longer ones (e.g. "
                  "SCAN to length 25 and to 48)",
    "ruoss": "about 0.25M parameters (5 layers of width 64), batch 128 for on the order of 10^6 steps (about 10^8 "
             "examples), trained on lengths 1-40 (randomized positions from [0, 2,048)) and tested to 500",
    "deletang": "about 0.25M parameters (5 layers of width 64), batch 128 for on the order of 10^6 steps (about 10^8 "
                "examples), trained on lengths 1-40 and tested to 500",
    "zoology": "2 layers with 1 attention head and no MLP, d_model 64-512, 100,000 examples x 64 epochs (6.4M "
               "examples seen), 4-16 key-value pairs",
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
