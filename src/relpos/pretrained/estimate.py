"""The ``--dry-run`` time estimate of a pretrained checkpoint's evaluation, summed from its parts.

What it estimates: **wall-clock seconds of the whole command, at this process's torch thread count, on this
machine as loaded when the dry run runs** -- not CPU time, and not a quiet machine's time. Nothing is
assumed about the hardware's speed: every part is timed here, on a small sample of its own work, and scaled
by how much of that work the evaluation does (:func:`forward_passes` lists it from the same settings the job
reads). Each sample is the median of at least :data:`MIN_CALLS` calls after a warm-up call (the process's
first calls are warmed up once before any is timed):

- ``startup``: the age of this process when the estimate starts (Python, torch and transformers imports);
- ``tokenizer``: building a GGUF file's tokenizer (first run only; later runs read it from the cache) and
  reading it once per scaling and once more for the fingerprint, each timed here;
- ``corpus``: reading every file of the corpus and tokenizing its validation and test splits (about 15 % of
  its bytes: 5 % and 10 % of its documents), at the rates of a sample of up to :data:`SAMPLE_BYTES` of it
  read and tokenized here (first run only: the splits are cached);
- ``model load``: dequantising a GGUF file's tensors (one tensor of each quantisation type dequantised here,
  scaled by that type's bytes) and building the model (a one-layer model of the same shape built here,
  scaled by parameters), then the check that runs 8 tokens through it;
- per scaling, the forward passes of the language-modelling windows, the fixed-target blocks and the
  passkey prompts, batch by batch as the job runs them (:func:`forward_passes`). One decoder layer is timed
  at each length (a one-layer model of the checkpoint's shape with random weights), on 1 row and on as
  many rows as the job's largest batch holds up to :data:`CAL_TOKENS` tokens; a fixed and a per-row cost are
  fitted to the two (on a loaded machine a call waits for a core at every operation, whatever its size),
  longer lengths take the per-row cost scaled by the layer's FLOPs (attention's ``L**2`` included), and
  the sum is multiplied by the number of layers. The output layer with its float64 log-softmax is timed on
  up to :data:`HEAD_ROWS` rows and charged for every row whose logits the job computes.

The model's weights are never read (the one-layer model is random) and nothing is written.
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["Pass", "forward_passes", "Estimate", "Calibration", "calibrate", "estimate", "CAL_TOKENS",
           "HEAD_ROWS", "SAMPLE_BYTES", "EVAL_SHARE", "MIN_CALLS", "MIN_SECONDS", "process_age"]

#: most tokens of one timed call of the one-layer model (longer lengths are timed at this length and scaled)
CAL_TOKENS = 1024
#: most rows of the output layer and float64 log-softmax timed (two of its chunks where they fit)
HEAD_ROWS = 512
#: each timed sample repeats at least this many times and for at least this long (seconds)
MIN_CALLS = 5
MIN_SECONDS = 0.3
#: bytes of the corpus read and tokenized to time both
SAMPLE_BYTES = 256 << 10
#: the share of a corpus's bytes that an evaluation tokenizes: its validation and test splits (5 % + 10 %
#: of the documents, by a hash of their names)
EVAL_SHARE = 0.15


@dataclass(frozen=True)
class Pass:
    """One forward call of the evaluation: ``rows`` sequences of ``length`` tokens; ``head_rows`` rows of
    logits (and float64 log-softmax) per sequence: ``length`` for a loss, the answer's tokens for passkey."""

    what: str  # "windows", "fixed-target blocks" or "passkey prompts"
    rows: int
    length: int
    head_rows: int


def _chunks(what: str, rows: int, length: int, head: int, max_tokens: int) -> list[Pass]:
    step = max(1, max_tokens // length)  # as token_losses and Passkey.score split rows
    return [Pass(what, min(step, rows - s), length, head) for s in range(0, rows, step)]


def forward_passes(spec: dict, plan: dict, passkey=None) -> list[Pass]:
    """The forward calls of one scaling's job, in its order: windows at each length, fixed-target blocks at each
    length, then passkey prompts per length and depth (``passkey``: the job's
    :class:`~relpos.tasks.passkey.Passkey`, or None)."""
    from relpos.tasks.lm import LanguageModelling

    lengths = plan["lengths"]
    lm = LanguageModelling(train_len=plan["original"], eval_lengths=lengths, eval_tokens=spec["eval_tokens"],
                           blocks=spec["blocks"], target_len=spec["target_len"],
                           max_eval_tokens=spec["max_eval_tokens"], n_val=1)
    longest = max(lm.eval_lengths)
    count = max(1, lm.eval_tokens // longest)
    out: list[Pass] = []
    for n in lm.eval_lengths:
        out += _chunks("windows", count * max(1, longest // n), n, n, lm.max_eval_tokens)
    for c in lm.eval_lengths:
        if c >= lm.target_len:
            out += _chunks("fixed-target blocks", lm.blocks, c, c, lm.max_eval_tokens)
    if passkey is not None:
        for L in passkey.lengths:
            for d in passkey.depths:
                _, exs = passkey.batch(L, d)
                out += _chunks("passkey prompts", len(exs), L, max(e.answer_len for e in exs), passkey.max_tokens)
    return out


@dataclass
class Estimate:
    """Seconds by part (``parts``, in order), their sum, and what was measured to get them (``notes``)."""

    parts: dict
    threads: int
    device: str
    notes: list

    @property
    def seconds(self) -> float:
        return float(sum(self.parts.values()))

    def lines(self) -> list[str]:
        s = self.seconds
        where = f"{self.threads} torch thread(s)" if self.device == "cpu" else self.device
        load = ""
        if hasattr(os, "getloadavg"):
            load = f", load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        out = [f"estimated time: ~{s:,.0f} s ({s / 60:,.1f} min) wall-clock at {where} on this machine now{load}; "
               "each part timed here on a sample of its work:"]
        out += [f"  {k}: {v:,.1f} s" for k, v in self.parts.items()]
        out += [f"  ({n})" for n in self.notes]
        return out


class Calibration:
    """Seconds of each part of the work on this machine now (see the module docstring); built by :func:`calibrate`.

    ``layer[L]``: ``(fixed, per_row)`` seconds of one decoder layer on rows of ``L`` tokens (``L <=
    CAL_TOKENS``), fitted to two timed calls (1 row and up to ``CAL_TOKENS // L`` rows): on a loaded machine a
    call's fixed cost (waiting for a core at every operation) is not proportional to its work; ``call[L]``:
    the same for the rest of the call (embeddings, rotary, masks, final norm); ``head_row``: the output layer
    and float64 log-softmax of one row; ``layer_flops(L)``: FLOPs of one layer for one row of ``L`` tokens.
    """

    def __init__(self, *, layers: int, layer: dict, call: dict, head_row: float, layer_flops, load: float = 0.0,
                 startup: float = 0.0, tokenizer_build: float = 0.0, tokenizer_read: float = 0.0,
                 corpus: float = 0.0, notes: list | None = None) -> None:
        self.layers, self.layer, self.call = layers, layer, call
        self.head_row, self.layer_flops = head_row, layer_flops
        self.load, self.startup, self.tokenizer_build, self.tokenizer_read = load, startup, tokenizer_build, \
            tokenizer_read
        self.corpus = corpus
        self.notes = list(notes or [])

    def timed_length(self, L: int) -> int:
        return L if L in self.layer else max(self.layer)

    def pass_seconds(self, p: Pass) -> float:
        """Seconds of one forward call: ``layers`` x its decoder layer, the rest of the call, and its logits
        (a length longer than any timed: the longest timed, its per-row cost scaled by the layer's FLOPs)."""
        t = self.timed_length(p.length)
        (lf, lr), (cf, cr) = self.layer[t], self.call[t]
        scale = self.layer_flops(p.length) / self.layer_flops(t)
        return (self.layers * (lf + lr * p.rows * scale) + cf + cr * p.rows * p.length / t
                + self.head_row * p.rows * p.head_rows)


def _fit(lo: tuple[int, float], hi: tuple[int, float]) -> tuple[float, float]:
    """``(fixed, per_row)`` through two timings ``(rows, seconds)``, both >= 0."""
    (r1, t1), (r2, t2) = lo, hi
    if r2 <= r1:
        return 0.0, t2 / r2
    per = max(0.0, (t2 - t1) / (r2 - r1))
    return max(0.0, t1 - per * r1), per


def estimate(spec: dict, plan: dict, passes: list[Pass], cal: Calibration, *, device: str = "cpu",
             threads: int | None = None) -> Estimate:
    """The parts of an evaluation's time: once (startup, tokenizer, corpus, model), then per scaling the forward
    passes of ``passes`` (one scaling's, :func:`forward_passes`) by kind, times the number of scalings."""
    n_scalings = len(plan["scalings"])
    parts = {"startup (imports)": cal.startup,
             "tokenizer (built once if not cached; read once per scaling and for the fingerprint)":
                 cal.tokenizer_build + cal.tokenizer_read * (n_scalings + 1),
             "corpus (read, validation and test tokenized; first run only)": cal.corpus,
             "model load (dequantise, build, check)": cal.load}
    per: dict[str, float] = {}
    count: dict[str, int] = {}
    for p in passes:
        per[p.what] = per.get(p.what, 0.0) + cal.pass_seconds(p)
        count[p.what] = count.get(p.what, 0) + p.rows
    for what, secs in per.items():
        parts[f"{what}: {n_scalings} scaling(s) x {count[what]} sequences, {secs:,.1f} s each"] = secs * n_scalings
    return Estimate(parts, threads if threads is not None else torch.get_num_threads(), device, cal.notes)


# ------------------------------------------------------------------ timing here


def process_age() -> float | None:
    """Wall seconds since this process started (Linux ``/proc``), else None."""
    try:
        start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        up = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, up - start / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _typical_time(fn, sync=None) -> float:
    """Median seconds of ``fn()`` after one warm-up call, over at least :data:`MIN_CALLS` calls and
    :data:`MIN_SECONDS` (a median: one call slowed by a burst of other work must not set the rate of a run
    that makes thousands of them)."""
    fn()  # warm-up: first-call costs are paid once per process, not per pass
    if sync:
        sync()
    out: list[float] = []
    t0 = time.perf_counter()
    while len(out) < MIN_CALLS or time.perf_counter() - t0 < MIN_SECONDS:
        t = time.perf_counter()
        fn()
        if sync:
            sync()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def _one_layer(cfg, dtype, device):
    """A randomly initialised one-layer model of ``cfg``'s shape, its build seconds and parameter count."""
    from transformers import AutoModelForCausalLM

    c = copy.deepcopy(cfg)
    c.num_hidden_layers = 1
    if isinstance(getattr(c, "layer_types", None), list) and c.layer_types:
        c.layer_types = c.layer_types[:1]
    t = time.perf_counter()
    m = AutoModelForCausalLM.from_config(c, dtype=dtype, attn_implementation="sdpa").to(device).eval()
    return m, time.perf_counter() - t, sum(p.numel() for p in m.parameters())


def _dequant_seconds(path) -> tuple[float, str]:
    """Seconds to dequantise every tensor of a GGUF file: for each type, a tensor of that type and shape made of
    zero bytes (no data of the file is read) is dequantised here, and the time scaled by the type's bytes."""
    import numpy as np
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    from relpos.pretrained.gguf import read_gguf_header

    head = read_gguf_header(path)
    by_type: dict[int, list] = {}
    for te in head.tensors:
        by_type.setdefault(te.ggml_type, []).append(te)
    total = 0.0
    for t, tes in by_type.items():
        small = [te for te in tes if te.n_bytes <= 4 << 20] or [min(tes, key=lambda e: e.n_bytes)]
        te = max(small, key=lambda e: e.n_bytes)  # the largest up to 4 MB: long enough to time, cheap to make
        qt = GGMLQuantizationType(t)
        block, nb = GGML_QUANT_SIZES[qt]
        shape = tuple(reversed(te.dims))
        arr = np.zeros(te.n_bytes, dtype=np.uint8).reshape(*shape[:-1], shape[-1] // block * nb)
        secs = _typical_time(lambda: dequantize(arr, qt))
        total += secs * sum(e.n_bytes for e in tes) / max(1, te.n_bytes)
    return total, f"{len(head.tensors)} GGUF tensors of {len(by_type)} type(s)"


def _corpus_seconds(corpus: dict, tok) -> tuple[float, str]:
    from relpos.corpus.readers import detect_kind, file_signature, read_docs

    p = Path(corpus["path"]).expanduser().resolve()
    kind = detect_kind(p)
    total = sum(int(r[1]) for r in file_signature(p, kind, corpus.get("glob")))
    t = time.perf_counter()
    texts, n = [], 0
    for doc in read_docs(p, kind, glob=corpus.get("glob"), text_field=corpus.get("text_field", "text")):
        try:
            for piece in doc.pieces():
                texts.append(piece)
                n += len(piece.encode("utf-8", "replace"))
                if n >= SAMPLE_BYTES:
                    break
        except Exception:  # an undecodable document is skipped by the real read too
            continue
        if n >= SAMPLE_BYTES:
            break
    read = time.perf_counter() - t
    if not n:
        return 0.0, "corpus: nothing readable sampled"
    t = time.perf_counter()
    for s in texts:
        tok.encode(s, add_special_tokens=False)
    enc = time.perf_counter() - t
    secs = total * read / n + EVAL_SHARE * total * enc / n
    return secs, f"corpus {total:,} bytes; sampled {n:,} bytes: read at {n / max(read, 1e-9) / 1e6:,.1f} MB/s, " \
                 f"tokenized at {n / max(enc, 1e-9) / 1e6:,.2f} MB/s"


def calibrate(spec: dict, cfg, plan: dict, passes: list[Pass], *, src, tok, tokenizer_seconds: tuple[float, float],
              startup: float | None = None, device: str = "cpu") -> Calibration:
    """Time each part of the evaluation here (see the module docstring). ``tok``: the model's tokenizer;
    ``tokenizer_seconds``: (build, read) of it and ``startup`` (:func:`process_age` before anything else of the
    dry run) as the caller timed them."""
    from relpos.pretrained.evaluate import HFCausalLM
    from relpos.pretrained.load import DTYPES

    notes = [] if startup is not None else ["startup not measured: no /proc here"]
    dt = DTYPES[spec["dtype"]]
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    t0 = time.perf_counter()
    hf, build, n1 = _one_layer(cfg, dt, device)
    model = HFCausalLM(hf, name="calibration", original=plan["original"])
    layer_mod = hf.model.layers[0]
    n_layer = sum(p.numel() for p in layer_mod.parameters())
    heads = int(getattr(cfg, "num_attention_heads", 1))
    head_dim = int(getattr(cfg, "head_dim", None) or int(cfg.hidden_size) // heads)

    def flops(L: int) -> float:  # one layer, one row of L tokens: weights and attention's L**2
        return 2.0 * n_layer * L + 4.0 * heads * head_dim * L * L

    spent: list[float] = []
    layer_mod.register_forward_pre_hook(lambda *_: spent.append(-time.perf_counter()))
    layer_mod.register_forward_hook(lambda *_: spent.append(time.perf_counter()))
    layer, call = {}, {}
    vocab = int(cfg.vocab_size)
    timed_lengths = sorted({min(p.length, CAL_TOKENS) for p in passes} or {min(plan["lengths"])})
    with torch.no_grad():  # the process's first calls (allocator, thread pool, kernels) are not a pass's cost
        for L in (timed_lengths[-1], timed_lengths[0]):
            hf.model(input_ids=torch.randint(0, vocab, (max(1, CAL_TOKENS // L), L), device=device),
                     use_cache=False)
    for L in timed_lengths:
        most = max(1, min(max((p.rows for p in passes if min(p.length, CAL_TOKENS) == L), default=1),
                          CAL_TOKENS // L))
        got = {}
        for rows in sorted({1, most}):
            x = torch.randint(0, vocab, (rows, L), device=device)
            times: list[tuple[float, float]] = []

            def run():
                spent.clear()
                t = time.perf_counter()
                with torch.no_grad():
                    hf.model(input_ids=x, use_cache=False)
                if sync:
                    sync()
                times.append((time.perf_counter() - t, sum(spent)))

            _typical_time(run)
            timed = times[1:]  # less the warm-up
            got[rows] = (statistics.median(v[0] for v in timed), statistics.median(v[1] for v in timed))
        lo, hi = min(got), max(got)
        layer[L] = _fit((lo, got[lo][1]), (hi, got[hi][1]))
        call[L] = _fit((lo, got[lo][0] - got[lo][1]), (hi, got[hi][0] - got[hi][1]))
    from relpos.pretrained.evaluate import _CHUNK_BYTES

    n_head = min(HEAD_ROWS, 2 * max(1, _CHUNK_BYTES // (8 * vocab)))  # two of the loss's chunks, when they fit
    h = torch.randn(1, n_head, int(cfg.hidden_size), dtype=dt, device=device)
    y = torch.randint(0, vocab, (1, n_head), device=device)
    head_row = _typical_time(lambda: model.losses_from_hidden(h, y), sync=sync) / n_head
    layers = int(cfg.num_hidden_layers)
    try:
        from relpos.pretrained.load import estimate_params

        n_full = estimate_params(cfg.to_dict())
    except (ValueError, KeyError, TypeError):
        n_full = n1 + (layers - 1) * n_layer
    # the loader's pass over the weights: the dtype conversion and the finite check of every one
    weights = _typical_time(lambda: [bool(torch.isfinite(q.to(dt)).all()) for q in hf.parameters()], sync=sync)
    load = build + weights * n_full / n1
    what = (f"a 1-layer model built in {build:.2f} s (with its imports), its weights converted and checked in "
            f"{weights:.2f} s, scaled by parameters")
    if src.gguf:
        dq, tensors = _dequant_seconds(src.path)
        load += dq
        what = f"{tensors} dequantised at the rate timed on one of each ({dq:.1f} s); " + what
    notes.append("model load: " + what + ("" if src.gguf else "; reading the weights not counted"))
    cal = Calibration(layers=layers, layer=layer, call=call, head_row=head_row,
                      layer_flops=flops, startup=startup or 0.0, tokenizer_build=tokenizer_seconds[0],
                      tokenizer_read=tokenizer_seconds[1], notes=notes)
    cal.load = load + cal.pass_seconds(Pass("check", 1, 8, 8))
    cal.corpus, what = _corpus_seconds(spec["corpus"], tok)
    cal.notes.append(what)
    cal.notes.append(f"forward passes: one decoder layer timed at lengths {', '.join(map(str, sorted(layer)))} "
                      f"(1 row and up to {CAL_TOKENS} tokens; x {layers} layers), the output layer and float64 loss "
                      f"on {n_head} rows; calibration took {time.perf_counter() - t0:.1f} s")
    return cal
