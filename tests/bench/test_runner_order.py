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


def test_every_timed_run_follows_an_untimed_run_of_the_same_case(monkeypatch):
    """Settled timing: what ran just before a timed run is the same case (steady state), whatever the order."""
    events: list[tuple[str, str]] = []

    def build_step(case, spec):
        def step():
            events.append(("run", case.impl))
        step.name = case.impl
        return step, (lambda: None)

    def timed(step, spec):
        step()
        events.append(("timed", step.name))
        return 1.0, 1.0

    monkeypatch.setattr(runner, "build_step", build_step)
    monkeypatch.setattr(runner, "timed", timed)
    group = [Case("t5", impl, 64, "fwd") for impl in ("dense", "chunked", "auto")]
    runner._time_group(64, group, BenchSpec(memory=False, repeats=2), {}, log=lambda s: None, deadline=None)
    timed_at = [i for i, e in enumerate(events) if e[0] == "timed"]
    assert timed_at
    for i in timed_at[-6:]:  # the timed rounds: each timed run (events[i - 1]) follows a run of the same case
        assert events[i - 2] == ("run", events[i][1]), events[i - 3:i + 1]
    events.clear()  # without settling, a timed run does follow other cases (the check above can fail)
    runner._time_group(64, group, BenchSpec(memory=False, repeats=2, settle=False), {}, log=lambda s: None,
                       deadline=None)
    timed_at = [i for i, e in enumerate(events) if e[0] == "timed" and i >= 2]
    assert any(events[i - 2] != ("run", events[i][1]) for i in timed_at)
