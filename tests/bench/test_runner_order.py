"""``relpos bench``'s round robin: the order of the cases rotates every round (scripted steps, no real timing)."""

from __future__ import annotations

from relpos.bench import runner
from relpos.bench.spec import BenchSpec, Case


def test_every_case_follows_different_predecessors_across_rounds(monkeypatch):
    calls: list[str] = []

    def build_step(case, spec):
        def step():
            return None
        step.name = case.impl
        return step, (lambda: None)

    def timed(step, spec):
        calls.append(step.name)
        return 1.0, 1.0

    monkeypatch.setattr(runner, "build_step", build_step)
    monkeypatch.setattr(runner, "timed", timed)
    group = [Case("t5", impl, 64, "fwd") for impl in ("dense", "chunked", "auto")]
    spec = BenchSpec(memory=False, repeats=3)
    records: dict = {}
    runner._time_group(64, group, spec, records, log=lambda s: None, deadline=None)
    rounds = runner.MORE_ROUNDS * spec.repeats  # a scripted 1 ms case is far under GROUP_S
    timed_calls = calls[-rounds * 4:]  # the timed rounds: baseline + three cases each
    orders = [tuple(timed_calls[i * 4:(i + 1) * 4]) for i in range(rounds)]
    # what runs right before "auto" changes from round to round (it did not: always "chunked")
    before_auto = {o[o.index("auto") - 1] for o in orders if o.index("auto") > 0}
    assert len(before_auto) >= 2, orders[:4]
    assert all(sorted(o) == sorted(orders[0]) for o in orders)  # every case once per round
    assert all(r.runs == rounds for r in records.values())
