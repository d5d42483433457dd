"""Do the results page's decisions depend on the bootstrap's seed?

    python benchmarks/bootstrap_stability.py [docs/results/protocol3/full-results.json] [--seeds 5]
        [--n-boot N] [--json benchmarks/results/bootstrap_stability.json]

Recomputes the ranking (:func:`relpos.report.ranking.ranking`) and the published-claim verdicts
(:func:`relpos.report.results_claims.findings`) of a shipped results file under bootstrap seeds 0..S-1,
and lists every decision that differs between seeds: each base scheme's rank on each task, each tie with the
task's best, whether each compared task is at chance (then in no MRR), the overall order and its MRRs, each
RoPE view's tie or sign against plain RoPE, and each claim's
verdict. Prints one table (decision, value under each seed) of the decisions that move, the number of
borderline intervals (a bound within 0.005 of 0) under seed 0, and writes the same as JSON. Exit status 1 when
any decision moves.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from relpos.report import results_claims as claims  # noqa: E402
from relpos.report.ranking import N_BOOT_REPORT, borderline_decisions, ranking  # noqa: E402


def decisions(res: dict, seed: int, n_boot: int) -> tuple[dict, dict]:
    """``{decision: value}`` under one bootstrap seed, and the ranking."""
    rk = ranking(res, seed=seed, n_boot=n_boot)
    out = {}
    for t, pt in rk["per_task"].items():
        for lab, r in pt["rank"].items():
            out[f"rank {t} {lab}"] = r
            out[f"tie-with-best {t} {lab}"] = bool(pt["tie"][lab])
    for t in rk["compared"]:
        out[f"at chance {t}"] = t in rk["at_chance"]  # in no MRR when at chance
    out["overall order"] = " > ".join(lab for lab, m, _ in rk["order"] if m == m)
    for lab, m, _ in rk["order"]:
        if m == m:
            out[f"MRR (common tasks) {lab}"] = round(m, 2)
    for lab, (m, _) in rk["own"].items():
        if m == m:
            out[f"MRR (own tasks) {lab}"] = round(m, 2)
    for t, d in rk["variants"].items():
        for lab, (iv, _) in d.items():
            if iv is not None and iv.lo == iv.lo:
                out[f"view {t} {lab}"] = "tie" if iv.tie else ("better" if iv.lo > 0 else "worse")
    if claims.N_BOOT_REPORT != n_boot:  # the claims read the module's resamples
        claims.N_BOOT_REPORT = n_boot
    for f in claims.findings(res, rk, seed=seed):
        out[f"claim {f.claim.key}"] = f.verdict
    return out, rk


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="?", default=str(ROOT / "docs/results/protocol3/full-results.json"))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--n-boot", type=int, default=N_BOOT_REPORT)
    p.add_argument("--json", default=str(ROOT / "benchmarks/results/bootstrap_stability.json"))
    a = p.parse_args(argv)
    res = json.loads(Path(a.results).read_text())
    t0 = time.perf_counter()
    per_seed, rk0 = [], None
    for s in range(a.seeds):
        d, rk = decisions(res, s, a.n_boot)
        per_seed.append(d)
        rk0 = rk0 or rk
        print(f"seed {s}: {len(d)} decisions ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    keys = sorted(set().union(*per_seed))
    moved = {k: [d.get(k) for d in per_seed] for k in keys if len({json.dumps(d.get(k)) for d in per_seed}) > 1}
    near = borderline_decisions(rk0)
    print(f"{a.results}: {len(keys)} decisions, {a.seeds} bootstrap seeds, {a.n_boot:,} resamples: "
          f"{len(moved)} move; borderline intervals under seed 0: {near['n']} of {near['of']}")
    if moved:
        print("| decision | " + " | ".join(f"seed {s}" for s in range(a.seeds)) + " |")
        print("|---|" + "---|" * a.seeds)
        for k, vs in moved.items():
            print(f"| {k} | " + " | ".join(str(v) for v in vs) + " |")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    from relpos.outdir import write_text_atomic  # a regular file, never through a link

    write_text_atomic(a.json, json.dumps({
        "results": str(Path(a.results).resolve().relative_to(ROOT)) if Path(a.results).resolve().is_relative_to(ROOT)
        else a.results, "fingerprint": res.get("fingerprint"), "seeds": a.seeds, "n_boot": a.n_boot,
        "decisions": len(keys), "moved": moved, "borderline": near["n"], "intervals": near["of"],
        "borderline_list": sorted(f"{k} {t} {lab}" for k in ("vs_best", "rank", "variants") for t, lab in near[k]),
        "seconds": round(time.perf_counter() - t0, 1), "decisions_seed0": per_seed[0]}, indent=1) + "\n")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
