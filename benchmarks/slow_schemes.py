"""A measured lower limit for the four slow schemes: how far is relpos from the cost of its own approach?

Issue 34 sets targets at N = 2048, forward+backward, against position-free causal
SDPA: Transformer-XL and FIRE <= 1.5x, DeBERTa and CoPE <= 3x. Where relpos misses,
this script bounds the miss: the *floor* of the approach taken (the scheme's position
term computed block by block beside a fused attention kernel) is the sum of

1. position-free causal SDPA, forward+backward (content attention must be done anyway,
   and the fused kernel with its block skipping is the fastest way this machine has); and
2. the position term alone, forward and backward, over the causal blocks of query rows
   (``--rows`` per block, keys ``0..`` the block's last row), with the cheapest
   formulation this library knows for it, timed by itself:

   * Transformer-XL: the projected sinusoid ``W_R R`` on the offsets a causal call sees
     (``d <= 0``) and its gradient, ``(q + v) . r`` as one ``(rows, keys)`` matmul
     per block against the relative keys of the offsets the block sees, and the two matmuls of its backward (``dq``
     and ``dr``);
   * FIRE: the scheme's MLP bias on the block's ``(rows, keys)`` pairs, forward and
     autograd backward (the MLP on ``N^2 / 2`` normalised distances is the term);
   * DeBERTa: ``q Kr^T`` and ``k Qr^T`` once per call (with their backward), then per
     block the two gathers and the two scatters of their gradient;
   * CoPE: the scheme's score on the block (gates ``sigmoid(q k)``, their suffix sum,
     the interpolated position logits), forward and autograd backward.

The floor leaves out everything that joins the two (adding the term to the logits,
the extra softmax passes a non-fused kernel makes), so no implementation of the
approach can go below it; ``relpos / floor`` is what relpos spends above it.

*Cost of the parts* (``floor_ds`` in the JSON): what the approach pays on top, each part timed
alone. (a) Every term's gradient needs the logits' gradient ``dS = P (dP - delta)``, which
PyTorch's fused kernel forms inside and does not return, so the approach pays either SDPA's own
backward plus forming dS beside it (recompute the logits and ``dP = dO v^T`` per block: two
matmuls), or SDPA's forward plus a backward that forms dS and derives dq, dk, dv from it
(relpos's block backward, position-free): the cheaper of the two replaces SDPA. (b) A backward
that keeps O(N) memory evaluates the term's forward again per block (the ``(N, N)`` term is not
stored; per-call tables and states are): ``recompute``, timed alone. Parts timed alone pay cache
misses that a loop over hot blocks does not, so this sum is an estimate of the approach's cost,
not a lower limit; ``relpos / cost of the parts`` near 1 says relpos spends little beyond its
parts. *bounded* is decided by the floor above (SDPA + the term), the part even a fused kernel
pays: a floor above the target means no implementation of this approach can meet it.

*The engine's own steps* (``engine_parts_ms`` in the JSON): where the engine serving the scheme times
its steps (:mod:`relpos.attention.chunked.parts`: Transformer-XL's ``relkey``, FIRE's ``piecewise``), one
more case runs ``relpos.attention(..., impl="chunked")`` forward and backward with that clock on, in the
same rounds: its content matmuls, position matmuls, fused flash forward, ``exp``, compiled kernel passes,
and what the call spends outside them. The matmuls, the flash forward and ``exp`` are what no fusion of
the elementwise work removes: their sum over SDPA (``engine_bound_x``) is the engine's measured bound,
and ``bounded_by_parts`` says it is above the target. ``--bidirectional`` runs every case without the
causal mask.

Timing: one thread, process CPU time, the cases of a scheme interleaved per round after a warm-up;
milliseconds are medians of ``--rounds`` rounds, and every multiple (of SDPA, of the floor) is the median
of the per-round ratios: the two sides were timed in the same round, so a drift of the host's speed
between rounds cancels (a ratio of two medians can take them from different rounds).

Usage::

    python benchmarks/slow_schemes.py                      # N = 2048, 3 rounds, causal
    python benchmarks/slow_schemes.py --n 1024 --rounds 5 --out /tmp/slow
    python benchmarks/slow_schemes.py --schemes fire --bidirectional --name slow_schemes-fire-kernel-bidirectional

Writes ``benchmarks/results/slow_schemes.json`` and ``.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from relpos.bench.results import per_round_ratio as _ratio

ROOT = Path(__file__).resolve().parent.parent
SCHEMES = ("transformer-xl", "fire", "deberta", "cope")
TARGETS = {"transformer-xl": 1.5, "fire": 1.5, "deberta": 3.0, "cope": 3.0}
#: Schemes defined for causal attention only (left out of ``--bidirectional`` runs).
CAUSAL_ONLY = ("cope",)
#: The engine's steps that no fusion of its elementwise work removes: its matmuls, the fused flash forward and
#: ``exp`` (:mod:`relpos.attention.chunked.parts` names them); their sum is the engine's measured bound.
BOUND_PARTS = ("content matmuls", "position matmuls", "flash forward", "exp")
#: The part of an engine call outside its named steps (Python, slicing, allocation, the delta and the sums).
OUTSIDE = "outside the named steps"


#: Causal (the default) or bidirectional attention in every case (``--bidirectional`` sets it per run).
CAUSAL = True


def _blocks(N: int, rows: int):
    for a in range(0, N, rows):
        b = min(N, a + rows)
        yield a, b, (b if CAUSAL else N)  # causal: keys 0..b-1


def _txl_inputs(enc, q):
    """Transformer-XL's relative keys, the causal call's offsets ``d = j - i`` (from ``lo = -(N - 1)``) and ``q + v``."""
    from relpos.distance import offsets_range

    N = q.shape[2]
    rk = enc.relative_keys()
    return rk, offsets_range(N, N, 0), q.detach() + rk.v.detach()[None, :, None, :], -(N - 1)


def _txl_seg(rtab, lo, a, b, C):
    """The relative keys block ``[a, b) x [0, C)`` needs: causal, the offsets ``-(b - 1) .. 0`` (``(H, C, D)``: the
    ``R - 1`` future offsets of the block's ``R + C - 1`` are left out, as the engine leaves them out);
    bidirectional, all ``R + C - 1`` offsets ``-(b - 1) .. C - 1 - a``."""
    s = -(b - 1) - lo
    return rtab[:, s: s + (C if CAUSAL else b - a + C - 1)]


def _term_txl(enc, q, rows):
    """The projected sinusoid ``W_R R`` on the offsets the call sees (causal: the past) and its gradient, the
    relative-key products per block and their two backward matmuls."""
    B, H, N, D = q.shape
    rk, offs, qv, lo = _txl_inputs(enc, q)

    def step():
        for p in enc.parameters():
            p.grad = None
        if CAUSAL:
            past = rk.keys(offs[offs <= 0])  # (H, N, D): W_R R on the offsets a causal call can see
            rtab = torch.cat([past.detach(), past.new_zeros(H, N - 1, D)], 1)  # future offsets: zero keys
        else:
            past = rk.keys(offs)  # (H, 2N - 1, D): every offset
            rtab = past.detach()
        drt = torch.zeros_like(rtab)
        for a, b, C in _blocks(N, rows):
            seg = _txl_seg(rtab, lo, a, b, C)  # (H, C, D)
            pd = torch.matmul(qv[:, :, a:b], seg.transpose(-1, -2))  # forward (B, H, R, C)
            z = pd  # stands for dS laid out by offset (same shape)
            torch.matmul(z, seg)  # dq
            _txl_seg(drt, lo, a, b, C).add_(torch.matmul(z.transpose(-1, -2), qv[:, :, a:b]).sum(0))  # dr
        past.backward(drt[:, :past.shape[1]])  # W_R's gradient
    return step


def _ds_cases(q, k, v, go, scale, rows):
    """Two ways to obtain what every term's gradient needs and SDPA does not expose: the logits' gradient dS.

    ``ds``: beside SDPA's own backward, per causal block recompute the logits and ``dP = dO v^T``
    and form ``dS = P * (dP - delta)`` (two matmuls and three elementwise passes). ``own``: SDPA's
    fused forward, then a backward that forms dS itself and derives dq, dk, dv from it (five matmuls
    per block; relpos's :func:`block_backward`). ``min(sdpa + ds, own)`` is the content attention's
    cost once dS is needed.
    """
    from relpos.attention.chunked.kernels import block_backward, exp_, flash_ops

    flash, _ = flash_ops()
    N, D = q.shape[2], q.shape[3]
    q, k, v = q.detach(), k.detach(), v.detach()
    with torch.no_grad():
        out, lse = flash(q, k, v, 0.0, CAUSAL, scale=scale)
        delta = (go * out).sum(-1)  # (B, H, N)

    def ds():  # returns dS per block (B, H, R, C); entries above the diagonal are not masked (not needed)
        blocks = []
        for a, b, C in _blocks(N, rows):
            s = torch.matmul(q[:, :, a:b], k[:, :, :C].transpose(-1, -2)).mul_(scale).sub_(lse[:, :, a:b, None])
            p = exp_(s)  # (B, H, R, C)
            dp = torch.matmul(go[:, :, a:b], v[:, :, :C].transpose(-1, -2)).sub_(delta[:, :, a:b, None])
            blocks.append(p.mul_(dp))  # dS
        return blocks

    def own():
        o, l = flash(q, k, v, 0.0, CAUSAL, scale=scale)
        dl = (go * o).sum(-1)
        B, H = q.shape[:2]
        dq, dk, dv = (torch.zeros_like(x) for x in (q, k, v))
        for a, b, C in _blocks(N, rows):
            R = b - a
            s = (-l[:, :, a:b, None]).expand(B, H, R, C).contiguous()
            if CAUSAL:
                s[:, :, :, a:].masked_fill_(torch.ones(R, R, dtype=torch.bool).triu_(1), float("-inf"))  # causal square
            s = s.view(B * H, R, C)
            buf = q.new_empty(B * H, R, C)
            gq, gk, gv = block_backward(s, q[:, :, a:b].reshape(B * H, R, D), k[:, :, :C].reshape(B * H, C, D),
                                        v[:, :, :C].reshape(B * H, C, D), go[:, :, a:b].reshape(B * H, R, D),
                                        dl[:, :, a:b, None].reshape(B * H, R, 1), scale, buf)
            dq[:, :, a:b] += gq.view(B, H, R, D)
            dk[:, :, :C] += gk.view(B, H, C, D)
            dv[:, :, :C] += gv.view(B, H, C, D)
        return dq, dk, dv
    return ds, own


def _term_autograd(fn, N, rows, leaves):
    """``fn(a, b, C)`` per block, forward then backward with a fixed upstream gradient."""

    def step():
        for t in leaves:
            t.grad = None
        for a, b, C in _blocks(N, rows):
            out = fn(a, b, C)
            out.backward(torch.ones_like(out))
    return step


def _term_fire(enc, q, rows):
    N = q.shape[2]
    pos = torch.arange(N)[None]
    leaves = [p for p in enc.parameters() if p.requires_grad]
    return _term_autograd(lambda a, b, C: enc.bias(pos[:, a:b], pos[:, :C]), N, rows, leaves)


def _term_cope(enc, q, k, scale, rows):
    N = q.shape[2]
    pos = torch.arange(N)[None]
    leaves = [q, k] + [p for p in enc.parameters() if p.requires_grad]
    return _term_autograd(lambda a, b, C: enc.score(q[:, :, a:b], k[:, :, :C], pos[:, a:b], pos[:, :C], scale),
                          N, rows, leaves)


def _term_deberta(enc, q, k, scale, rows):
    N = q.shape[2]
    pos = torch.arange(N)[None]
    leaves = [q, k] + [p for p in enc.parameters() if p.requires_grad]

    def step():
        for t in leaves:
            t.grad = None
        state = enc.score_state(q, k, pos, pos, scale)
        st = [t.detach() for t in state.tensors]
        grads = [torch.zeros_like(t) for t in st]
        whole = type(state)(tuple(st), state.axes, state.meta)
        gwhole = type(state)(tuple(grads), state.axes, state.meta)
        for a, b, C in _blocks(N, rows):
            s = enc.score_with(whole.block(st, a, b, C), pos[:, a:b], pos[:, :C])
            enc.score_with_backward(gwhole.block(grads, a, b, C), pos[:, a:b], pos[:, :C], s)
        torch.autograd.backward(list(state.tensors), grads)
    return step


def _engine_parts(enc, q, k, v, go, clock: dict):
    """One forward+backward through ``chunked`` with the engine's own steps timed as it runs them
    (:mod:`relpos.attention.chunked.parts`): ``clock`` receives the milliseconds of each named step."""
    import relpos
    from relpos.attention.chunked import parts

    params = [p for p in enc.parameters() if p.requires_grad]

    def step():
        for t in [q, k, v, *params]:
            t.grad = None
        clock.clear()
        parts.clock = clock
        try:
            relpos.attention(q, k, v, enc, causal=CAUSAL, impl="chunked").backward(go)
        finally:
            parts.clock = None
    return step


def _recompute(name, enc, q, k, scale, rows):
    """The position term's forward alone over the causal blocks, as a backward that keeps O(N) memory must
    evaluate it again (the (N, N) term is not stored; per-call tables and states are)."""
    N = q.shape[2]
    pos = torch.arange(N)[None]
    q, k = q.detach(), k.detach()
    with torch.no_grad():
        if name == "transformer-xl":
            rk, offs, qv, lo = _txl_inputs(enc, q)
            rtab = rk.keys(offs)

            def fn(a, b, C):
                torch.matmul(qv[:, :, a:b], _txl_seg(rtab, lo, a, b, C).transpose(-1, -2))
        elif name == "deberta":
            state = enc.score_state(q, k, pos, pos, scale)

            def fn(a, b, C):
                enc.score_with(state.block(state.tensors, a, b, C), pos[:, a:b], pos[:, :C])
        elif name == "fire":
            def fn(a, b, C):
                enc.bias(pos[:, a:b], pos[:, :C])
        else:
            def fn(a, b, C):
                enc.score(q[:, :, a:b], k[:, :, :C], pos[:, a:b], pos[:, :C], scale)

    def step():
        with torch.no_grad():
            for a, b, C in _blocks(N, rows):
                fn(a, b, C)
    return step


def measure(N: int, rounds: int, rows: int, log=print, schemes=SCHEMES, batch: int = 1, heads: int = 8,
            head_dim: int = 64, causal: bool = True) -> dict:
    import relpos
    from relpos.bench.spec import BenchSpec
    from relpos.bench.steps import make_encoding

    global CAUSAL
    CAUSAL = causal
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    spec = BenchSpec(memory=False, batch=batch, heads=heads, head_dim=head_dim)
    B, H, D = spec.batch, spec.heads, spec.head_dim
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, N, D, generator=g, requires_grad=True) for _ in range(3))  # (B, H, N, D)
    go = torch.randn(B, H, N, D, generator=g)
    rows_out = []
    for name in schemes:
        enc = make_encoding(name, spec, N)
        params = [p for p in enc.parameters() if p.requires_grad]
        scale = enc.attention_scale(D) if hasattr(enc, "attention_scale") else D ** -0.5

        def sdpa():
            for t in (q, k, v):
                t.grad = None
            F.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL).backward(go)

        def rel(enc=enc, params=params):
            for t in [q, k, v, *params]:
                t.grad = None
            relpos.attention(q, k, v, enc, causal=CAUSAL, impl="auto").backward(go)

        term = {"transformer-xl": lambda: _term_txl(enc, q, rows), "fire": lambda: _term_fire(enc, q, rows),
                "deberta": lambda: _term_deberta(enc, q, k, scale, rows),
                "cope": lambda: _term_cope(enc, q, k, scale, rows)}[name]()
        ds, own = _ds_cases(q, k, v, go, scale, rows)
        cases = {"sdpa": sdpa, "relpos": rel, "term": term, "ds": ds, "own": own,
                 "recompute": _recompute(name, enc, q, k, scale, rows)}
        clock: dict[str, float] = {}
        cases["engine"] = _engine_parts(enc, q, k, v, go, clock)
        for f in cases.values():  # warm-up
            f()
        if not clock:  # the engine serving this scheme times no steps of its own
            del cases["engine"]
        times: dict[str, list[float]] = {c: [] for c in cases}
        part_times: dict[str, list[float]] = {}
        for r in range(rounds):
            order = list(cases)[r % len(cases):] + list(cases)[:r % len(cases)]
            for c in order:
                t0 = time.process_time()
                cases[c]()
                times[c].append((time.process_time() - t0) * 1000)
                if c == "engine":
                    for key, ms in clock.items():
                        part_times.setdefault(key, []).append(ms)
                    part_times.setdefault(OUTSIDE, []).append(times[c][-1] - sum(clock.values()))
        med = {c: statistics.median(ts) for c, ts in times.items()}
        # per round: the floor, and the content attention once dS is needed + the term + its recompute
        floor_r = [s + t for s, t in zip(times["sdpa"], times["term"])]
        floor_ds_r = [min(s + d, o) + t + rc for s, d, o, t, rc in
                      zip(times["sdpa"], times["ds"], times["own"], times["term"], times["recompute"])]
        relpos_x, floor_x, floor_ds_x = (round(_ratio(a, times["sdpa"]), 2) for a in (times["relpos"], floor_r, floor_ds_r))
        row = {"scheme": name, "N": N, "sdpa_ms": round(med["sdpa"], 1), "relpos_ms": round(med["relpos"], 1),
               "term_ms": round(med["term"], 1), "floor_ms": round(statistics.median(floor_r), 1),
               "relpos_x": relpos_x, "floor_x": floor_x,
               "relpos_over_floor": round(_ratio(times["relpos"], floor_r), 2), "target_x": TARGETS[name],
               "ds_ms": round(med["ds"], 1), "own_ms": round(med["own"], 1), "recompute_ms": round(med["recompute"], 1),
               "floor_ds_ms": round(statistics.median(floor_ds_r), 1),
               "floor_ds_x": floor_ds_x, "relpos_over_floor_ds": round(_ratio(times["relpos"], floor_ds_r), 2),
               "bounded": floor_x > TARGETS[name],
               "met": relpos_x <= TARGETS[name], "times_ms": times,
               "causal": CAUSAL}
        if part_times:  # the engine's own steps: medians over the rounds, and per-round multiples of SDPA
            pm = {key: statistics.median(ts) for key, ts in part_times.items()}
            row["engine_ms"] = round(med["engine"], 1)
            row["engine_parts_ms"] = {key: round(ms, 1) for key, ms in pm.items()}
            row["engine_parts_x"] = {key: round(_ratio(ts, times["sdpa"]), 2) for key, ts in part_times.items()}
            bound_r = [sum(vals) for vals in zip(*(part_times.get(key, [0.0] * rounds) for key in BOUND_PARTS))]
            row["engine_bound_x"] = round(_ratio(bound_r, times["sdpa"]), 2)
            row["bounded_by_parts"] = row["engine_bound_x"] > TARGETS[name]
        log(f"{name:15s} relpos {row['relpos_x']:.2f}x  floor {row['floor_x']:.2f}x  parts "
            f"{row['floor_ds_x']:.2f}x  relpos/parts {row['relpos_over_floor_ds']:.2f}  (sdpa {row['sdpa_ms']} ms, "
            f"ds {row['ds_ms']}, own {row['own_ms']}, recompute {row['recompute_ms']})")
        rows_out.append(row)
    return {"rows": rows_out}


def markdown(doc: dict) -> str:
    lines = ["# The four slow schemes against the floor of their approach", "",
             f"Command: `{doc['command']}`", "",
             f"{doc['machine']}; one thread, process CPU time, {doc['rounds']} interleaved rounds: ms are medians, "
             "multiples the median of the per-round ratios; "
             f"N = {doc['N']}, B = {doc.get('batch', 1)}, H = {doc.get('heads', 8)}, D = {doc.get('head_dim', 64)}, "
             f"float32, {'causal' if doc.get('causal', True) else 'bidirectional'}, forward+backward; blocks of "
             f"{doc['block_rows']} query rows. Load average at the start / end: {doc['load_start']} / {doc['load_end']}.",
             "", f"*floor* = position-free {'causal' if doc.get('causal', True) else 'bidirectional'} SDPA + the "
             "position term alone (forward and backward): *bounded* when it is above the target. *cost of the "
             "parts* = the content attention once the logits' gradient dS is formed (the cheaper of SDPA + "
             "forming dS beside it, and SDPA's forward + a backward that forms dS itself) + the term + the term's "
             "forward again, as a backward with O(N) memory recomputes it; each "
             "part timed alone, so an estimate, not a limit (see the script's docstring). Multiples of SDPA.", "",
             "| scheme | relpos | target | met | floor | cost of the parts | relpos / cost of the parts "
             "| result | SDPA ms | term ms | dS ms | own bwd ms | recompute ms | relpos ms |",
             "|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in doc["rows"]:
        result = ("met" if r["met"] else "bounded" if r["bounded"] else
                  "bounded by its parts" if r.get("bounded_by_parts") else "**not bounded**")
        lines.append(f"| {r['scheme']} | {r['relpos_x']:.2f}x | {r['target_x']}x | {'yes' if r['met'] else '**no**'} "
                     f"| {r['floor_x']:.2f}x | {r['floor_ds_x']:.2f}x | {r['relpos_over_floor_ds']:.2f} | {result} "
                     f"| {r['sdpa_ms']} | {r['term_ms']} | {r['ds_ms']} | {r['own_ms']} | {r['recompute_ms']} "
                     f"| {r['relpos_ms']} |")
    for r in doc["rows"]:
        if "engine_parts_ms" in r:
            ms, x = r["engine_parts_ms"], r["engine_parts_x"]
            verdict = ("above" if r["bounded_by_parts"] else "not above") + f" the {r['target_x']}x target"
            lines += ["", f"{r['scheme']}: the `chunked` engine's own steps, timed one by one as it runs them "
                      f"in the same rounds ({r['engine_ms']} ms in all; ms, multiple of SDPA): "
                      + ", ".join(f"{key} {ms[key]} ({x[key]:.2f}x)" for key in ms)
                      + f". Its matmuls, flash forward and exp alone: **{r['engine_bound_x']:.2f}x** SDPA, "
                      f"{verdict} (the bound of this engine: its elementwise passes and everything outside the "
                      "named steps at no cost)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2048, help="sequence length (default 2048)")
    p.add_argument("--rounds", type=int, default=3, help="timed interleaved rounds (default 3)")
    p.add_argument("--rows", type=int, default=128, help="query rows per block of the floor's term (default 128)")
    p.add_argument("--schemes", default=None, help="comma-separated subset (default: all four; with --bidirectional "
                   "the three that are not causal-only)")
    p.add_argument("--batch", type=int, default=1, help="batch B (default 1)")
    p.add_argument("--heads", type=int, default=8, help="heads H (default 8)")
    p.add_argument("--head-dim", type=int, default=64, help="head width D (default 64; `small`/1024: --batch 4 "
                   "--heads 4 --head-dim 32 --n 1024)")
    p.add_argument("--bidirectional", action="store_true", help="bidirectional attention in every case (default causal)")
    p.add_argument("--name", default="slow_schemes", help="output file stem (default slow_schemes)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="results folder")
    args = p.parse_args(argv)
    if args.schemes is None:
        schemes = tuple(x for x in SCHEMES if not (args.bidirectional and x in CAUSAL_ONLY))
    else:
        schemes = tuple(x for x in args.schemes.split(",") if x)
    if not schemes or set(schemes) - set(SCHEMES):
        print(f"slow_schemes.py: --schemes must be a subset of {','.join(SCHEMES)}", file=sys.stderr)
        return 2
    if args.bidirectional and set(schemes) & set(CAUSAL_ONLY):
        print(f"slow_schemes.py: --bidirectional does not take {','.join(sorted(set(schemes) & set(CAUSAL_ONLY)))} "
              "(defined for causal attention only)", file=sys.stderr)
        return 2
    if args.n < 16 or args.rounds < 1 or args.rows < 1 or min(args.batch, args.heads, args.head_dim) < 1:
        print("slow_schemes.py: --n must be >= 16, --rounds, --rows, --batch, --heads and --head-dim >= 1",
              file=sys.stderr)
        return 2
    import os

    load0 = [round(x, 2) for x in os.getloadavg()]
    t0 = time.time()
    doc = measure(args.n, args.rounds, args.rows, schemes=schemes, batch=args.batch, heads=args.heads,
                  head_dim=args.head_dim, causal=not args.bidirectional)
    import relpos
    from relpos import kernels

    doc.update({"command": "python benchmarks/slow_schemes.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
                           f"relpos {getattr(relpos, '__version__', '?')}, kernels {kernels.status()}",
                "N": args.n, "batch": args.batch, "heads": args.heads, "head_dim": args.head_dim,
                "causal": not args.bidirectional, "rounds": args.rounds, "block_rows": args.rows, "seconds": round(time.time() - t0, 1),
                "load_start": load0, "load_end": [round(x, 2) for x in os.getloadavg()]})
    from relpos.bench.results import write_results
    write_results(args.out, args.name, doc, markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
