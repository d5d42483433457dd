"""The markdown report of a benchmark document: target-shape tables, the length sweep and the peers."""

from __future__ import annotations

from relpos.bench.cases import MAIN_N, MODES, TARGETS

__all__ = ["markdown", "peer_table"]

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


def _main_tables(recs: list[dict], idx: dict) -> list[str]:
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
        train = mode == "fwd+bwd"
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
    lines = ["### Peers: every configuration", "",
             "| peer | config | scheme | N | mode | peer ms | relpos ms (impl) | speedup | peer MiB | relpos MiB | "
             "memory fraction |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in peers:
        best = " **(best)**" if p.get("best") else ""
        if p["status"] != "ok":
            note = (p.get("note") or "").split("\n")[0][:80]
            lines.append(f"| {p['family']} | {p['config']} | {p['scheme']} | {p['N']} | {p['mode']} | "
                         f"{p['status']}: {note} | | | | | |")
            continue
        lines.append(
            f"| {p['family']} | {p['config']}{best} | {p['scheme']} | {p['N']} | {p['mode']} | {p['peer_ms']} | "
            f"{_num(p['relpos_ms'])} ({p['relpos_impl']}) | {_num(p['speedup'], 'x')} | {_num(p['peer_peak_mib'])} | "
            f"{_num(p['relpos_peak_mib'])} | {_num(p['memory_fraction'])} |")
    lines += ["", "### Peers at their best (fastest configuration of each peer, same run)", "",
              "| peer | best config | scheme | N | mode | speedup of relpos | memory fraction |",
              "|---|---|---|---|---|---|---|"]
    for p in peers:
        if p.get("best"):
            lines.append(f"| {p['family']} | {p['config']} | {p['scheme']} | {p['N']} | {p['mode']} | "
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
    idx = {(r["scheme"], r["impl"], r["N"], r["mode"]): r for r in recs}
    lines = [f"Shape: {doc['shape']}. Baseline: {doc['baseline']}.", "",
             f"Cells: median {doc.get('clock', 'time').split(' (')[0]} as a multiple of the baseline's (same run, "
             "same N, same mode) · peak memory growth of a fresh process running the step once.", ""]
    lines += _main_tables(recs, idx)
    lines += _sweep_tables(recs, idx)
    lines += peer_table(doc.get("peers") or [])
    return "\n".join(lines)
