"""The markdown report of a benchmark document: target-shape tables, the length sweep and the peers."""

from __future__ import annotations

from relpos.bench.cases import MAIN_N, MODES, TARGETS
from relpos.bench.spec import AUTO_CHOICES, AUTO_TOLERANCE

__all__ = ["markdown", "peer_table", "auto_rows", "AUTO_TOLERANCE"]

_IMPLS = ("dense", "chunked", "flex", "auto")


def _cell(rec: dict | None) -> str:
    if rec is None:
        return ""
    if rec["status"] != "ok":
        return "n/a" if rec["status"] == "unsupported" else "error"
    s = f"x{rec['ratio']:.2f}"
    if rec.get("peak_mib") is not None:
        s += f" · {rec['peak_mib']:.0f} MiB"
    return s


def _main_tables(recs: list[dict], idx: dict, targets: bool = True) -> list[str]:
    impls = [i for i in _IMPLS if any(r["impl"] == i for r in recs)]
    schemes = list(dict.fromkeys(r["scheme"] for r in recs if ":" not in r["impl"]))
    Ns = sorted({r["N"] for r in recs if ":" not in r["impl"]})
    main_n = MAIN_N if MAIN_N in Ns else (Ns[-1] if Ns else None)
    lines: list[str] = []
    for mode in MODES:
        rows = [s for s in schemes if any((s, i, main_n, mode) in idx for i in impls)]
        if not rows:
            continue
        b = next((idx[k] for k in idx if k[2] == main_n and k[3] == mode and idx[k].get("baseline_ms")), None)
        bl = ""
        if b is not None:
            bl = f"Baseline {b['baseline_ms']:.0f} ms"
            if b.get("baseline_peak_mib") is not None:
                bl += f", {b['baseline_peak_mib']:.0f} MiB"
            bl += "."
        train = mode == "fwd+bwd" and targets
        lines += [f"### N = {main_n}, {mode}", "", bl, ""]
        lines += ["| scheme | " + " | ".join(impls) + " | auto picks |" + (" target | met |" if train else ""),
                  "|" + "---|" * (len(impls) + 2 + (2 if train else 0))]
        for s in rows:
            a = idx.get((s, "auto", main_n, mode))
            row = f"| {s} | " + " | ".join(_cell(idx.get((s, i, main_n, mode))) for i in impls)
            row += f" | {(a or {}).get('chosen') or ''} |"
            if train:
                tgt = TARGETS.get(s)
                met = "" if tgt is None or a is None or a.get("ratio") is None else (
                    "yes" if a["ratio"] <= tgt else "no")
                row += f" {'' if tgt is None else f'<= {tgt}'} | {met} |"
            lines.append(row)
        lines.append("")
    return lines


def auto_rows(recs: list[dict]) -> list[dict]:
    """``auto`` against the fastest timed implementation (dense, chunked, flex) of the same scheme, mask,
    N and mode: one row per cell where ``auto`` and at least one of them ran."""
    idx = {(r.get("causal", True), r["scheme"], r["impl"], r["N"], r["mode"]): r for r in recs}
    out = []
    for (causal, scheme, impl, N, mode), a in idx.items():
        if impl != "auto" or a.get("median_ms") is None:
            continue
        others = {i: idx[(causal, scheme, i, N, mode)] for i in AUTO_CHOICES
                  if (causal, scheme, i, N, mode) in idx and idx[(causal, scheme, i, N, mode)].get("median_ms")}
        if not others:
            continue
        best = min(others, key=lambda i: others[i]["median_ms"])
        ratio = a["median_ms"] / others[best]["median_ms"]
        # the implementation auto ran, timed as itself: is the *pick* within the tolerance? (auto's own time
        # adds its dispatch, and where it ran the fastest implementation its ratio is that code timed twice)
        picked = others.get(a.get("chosen"))
        pick = picked["median_ms"] / others[best]["median_ms"] if picked else None
        rt = a.get("retime")
        first = pick
        if rt and picked:  # the round robin put the pick over: its pairwise re-time decides
            pick = rt["picked_ms"] / rt["fastest_ms"]
        out.append({"causal": causal, "scheme": scheme, "N": N, "mode": mode, "auto_picks": a.get("chosen"),
                    "fastest": best, "auto_ms": a["median_ms"], "fastest_ms": others[best]["median_ms"],
                    "timed": sorted(others), "ratio": round(ratio, 3), "within": ratio <= AUTO_TOLERANCE,
                    "pick_ratio": None if pick is None else round(pick, 3),
                    "pick_within": None if pick is None else pick <= AUTO_TOLERANCE,
                    "retimed": bool(rt and picked),
                    "pick_ratio_round_robin": None if first is None else round(first, 3)})
    return out


def _retime_note(rows: list[dict]) -> str:
    rt = [r for r in rows if r.get("retimed")]
    if not rt:
        return ""
    held = [r for r in rt if not r["pick_within"]]
    cells = ", ".join("{} N = {} {} {:.2f} -> {:.2f}".format(r["scheme"], r["N"], r["mode"],
                                                             r["pick_ratio_round_robin"], r["pick_ratio"]) for r in rt)
    return (f"; {len(rt)} pick(s) over {AUTO_TOLERANCE:.2f} in the round robin were re-timed pairwise against "
            f"the fastest ({cells}), {len(held)} of them still over")


def _auto_table(recs: list[dict]) -> list[str]:
    rows = auto_rows(recs)
    if not rows:
        return []
    cols = sorted({(r["N"], r["mode"]) for r in rows}, key=lambda c: (c[0], MODES.index(c[1])))
    by = {(r["scheme"], r["N"], r["mode"]): r for r in rows}
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    worst = max(rows, key=lambda r: r["ratio"])
    n_out = sum(not r["within"] for r in rows)
    other = [r for r in rows if r["auto_picks"] != r["fastest"]]
    wo = max(other, key=lambda r: r["ratio"]) if other else None
    lines = ["### auto against the fastest implementation", "",
             f"Cell: `auto`'s time / the fastest timed implementation's (same run), and what auto picked; "
             f"bold over {AUTO_TOLERANCE:.2f}. {len(rows)} cells, {n_out} over; worst {worst['ratio']:.2f} "
             f"({worst['scheme']}, N = {worst['N']}, {worst['mode']}). auto ran the implementation that was "
             f"fastest in {len(rows) - len(other)} cells (there the ratio is run-to-run noise: the same code ran)"
             + (f"; in the other {len(other)} the worst is {wo['ratio']:.2f} ({wo['scheme']}, N = {wo['N']}, "
                f"{wo['mode']}, {wo['fastest']} was faster)." if wo else ".")
             + f" The implementation auto picked, timed as itself, is within {AUTO_TOLERANCE:.2f} of the fastest in "
             f"{sum(bool(r['pick_within']) for r in rows)} of {sum(r['pick_within'] is not None for r in rows)} "
             "cells (JSON `pick_ratio`)" + _retime_note(rows) + ".", "",
             "| scheme | " + " | ".join(f"N={n} {m}" for n, m in cols) + " |", "|---|" + "---|" * len(cols)]
    for s in schemes:
        cells = []
        for c in cols:
            r = by.get((s, *c))
            if r is None:
                cells.append("")
                continue
            v = f"{r['ratio']:.2f}"
            cells.append((v if r["within"] else f"**{v}**") + f" ({r['auto_picks'] or '?'})")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return lines + [""]


def _sweep_tables(recs: list[dict], idx: dict) -> list[str]:
    own = [r for r in recs if ":" not in r["impl"]]
    lengths_of: dict[tuple, set] = {}
    for r in own:
        lengths_of.setdefault((r["scheme"], r["impl"]), set()).add(r["N"])
    sweep = sorted(k for k, v in lengths_of.items() if len(v) > 1)
    lines: list[str] = []
    for mode in MODES:
        Ns = sorted({r["N"] for r in own if r["mode"] == mode and (r["scheme"], r["impl"]) in sweep})
        if len(Ns) < 2:
            continue
        lines += [f"### Length sweep, {mode}", "", "| scheme | impl | " + " | ".join(f"N={n}" for n in Ns) + " |",
                  "|---|---|" + "---|" * len(Ns)]
        for s, i in sweep:
            if any((s, i, n, mode) in idx for n in Ns):
                lines.append(f"| {s} | {i} | " + " | ".join(_cell(idx.get((s, i, n, mode))) for n in Ns) + " |")
        base = []
        for n in Ns:
            b = next((r for r in recs if r["N"] == n and r["mode"] == mode and r.get("baseline_ms")), None)
            base.append("" if b is None else f"{b['baseline_ms']:.0f} ms"
                        + ("" if b.get("baseline_peak_mib") is None else f" · {b['baseline_peak_mib']:.0f} MiB"))
        lines += ["| *baseline* | sdpa | " + " | ".join(base) + " |", ""]
    return lines


def _num(x, suffix: str = "") -> str:
    return "-" if x is None else f"{x}{suffix}"


def peer_table(peers: list[dict]) -> list[str]:
    """Every peer configuration, then one line per peer family in its fastest configuration."""
    if not peers:
        return []
    def mask(p: dict) -> str:
        return "causal" if p.get("causal", True) else "bidirectional"

    lines = ["### Peers: every configuration", "",
             "| peer | config | scheme | mask | N | mode | peer ms | relpos ms (impl) | speedup | peer MiB | "
             "relpos MiB | memory fraction |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in peers:
        best = " **(best)**" if p.get("best") else ""
        if p["status"] != "ok":
            note = (p.get("note") or "").split("\n")[0][:80]
            lines.append(f"| {p['family']} | {p['config']} | {p['scheme']} | {mask(p)} | {p['N']} | {p['mode']} | "
                         f"{p['status']}: {note} | | | | | |")
            continue
        lines.append(
            f"| {p['family']} | {p['config']}{best} | {p['scheme']} | {mask(p)} | {p['N']} | {p['mode']} | "
            f"{p['peer_ms']} | "
            f"{_num(p['relpos_ms'])} ({p['relpos_impl']}) | {_num(p['speedup'], 'x')} | {_num(p['peer_peak_mib'])} | "
            f"{_num(p['relpos_peak_mib'])} | {_num(p['memory_fraction'])} |")
    lines += ["", "### Peers at their best (fastest configuration of each peer, same run)", "",
              "| peer | best config | scheme | mask | N | mode | speedup of relpos | memory fraction |",
              "|---|---|---|---|---|---|---|---|"]
    for p in sorted((p for p in peers if p.get("best")), key=lambda p: (p["family"], not p.get("causal", True))):
        if p.get("best"):
            lines.append(f"| {p['family']} | {p['config']} | {p['scheme']} | {mask(p)} | {p['N']} | {p['mode']} | "
                         f"{_num(p['speedup'], 'x')} | {_num(p['memory_fraction'])} |")
    lines.append("")
    seen = set()
    for p in peers:
        if p["peer"] not in seen:
            seen.add(p["peer"])
            lines.append(f"- **{p['family']}, {p['config']}** (`{p['peer']}`): {p['description']}")
    return lines + [""]


def markdown(doc: dict) -> str:
    """The report: target-shape tables, the length sweep and the peer comparison."""
    recs = doc["records"]
    lines = [f"Shape: {doc['shape']}. Baseline: {doc['baseline']}.", "",
             f"Cells: median {doc.get('clock', 'time').split(' (')[0]} as a multiple of the baseline's (same run, "
             "same N, same mode) · peak memory growth of a fresh process running the step once.", ""]
    masks = list(dict.fromkeys(r.get("causal", True) for r in recs))
    for causal in masks:
        sub = [r for r in recs if r.get("causal", True) == causal]
        idx = {(r["scheme"], r["impl"], r["N"], r["mode"]): r for r in sub}
        if len(masks) > 1:
            lines += [f"## {'Causal' if causal else 'Bidirectional'}", ""]
        lines += _main_tables(sub, idx, targets=causal)
        lines += _auto_table(sub)
        lines += _sweep_tables(sub, idx)
    lines += peer_table(doc.get("peers") or [])
    return "\n".join(lines)
