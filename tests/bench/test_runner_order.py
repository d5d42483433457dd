"""``relpos bench``'s round robin: the order of the cases rotates every round (scripted steps, no real timing)."""

from __future__ import annotations

from relpos.bench import runner
from relpos.bench.spec import BenchSpec, Case


def _named_step(case, spec):
    """A scripted ``build_step``: a step that does nothing, named by its implementation."""
    def step():
        return None
    step.name = case.impl
    return step, (lambda: None)


def test_every_case_follows_different_predecessors_across_rounds(monkeypatch):
    calls: list[str] = []

    def timed(step, spec):
        calls.append(step.name)
        return 1.0, 1.0

    monkeypatch.setattr(runner, "build_step", _named_step)
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


def _scripted(monkeypatch, ms_by_impl, chosen="dense"):
    """Steps whose timed cost is ``ms_by_impl[impl]()``; auto reports ``chosen``; returns the event log."""
    events: list[tuple[str, str]] = []

    def build_step(case, spec):
        def step():
            events.append(("run", case.impl))
        step.name = case.impl
        return step, (lambda: chosen if case.impl == "auto" else None)

    def timed(step, spec):
        step()
        events.append(("timed", step.name))
        ms = ms_by_impl.get(step.name, lambda: 1.0)()
        return ms, ms

    monkeypatch.setattr(runner, "build_step", build_step)
    monkeypatch.setattr(runner, "timed", timed)
    return events


def _auto_row(records):
    from relpos.bench.report import auto_rows

    recs = [r.to_json() for r in records.values()]
    return next(r for r in auto_rows(recs) if r["scheme"] == "t5")


def test_a_pick_that_looks_slow_is_re_timed_pairwise(monkeypatch):
    # the round robin puts auto's pick (dense) at 2x chunked; timed pairwise the two are equal: noise, not the pick
    phase = {"retime": False}
    events = _scripted(monkeypatch, {"dense": lambda: 1.0 if phase["retime"] else 2.0, "chunked": lambda: 1.0,
                                     "auto": lambda: 2.0})
    real = runner._retime_pick

    def retime(*a, **k):
        phase["retime"] = True
        n = len(events)
        real(*a, **k)
        retime.events = events[n:]

    monkeypatch.setattr(runner, "_retime_pick", retime)
    group = [Case("t5", impl, 64, "fwd") for impl in ("dense", "chunked", "auto")]
    records: dict = {}
    runner._time_group(64, group, BenchSpec(memory=False, repeats=2), records, log=lambda s: None, deadline=None)
    rt = records[("t5", "auto", 64, "fwd")].retime
    assert rt == {"picked": "dense", "fastest": "chunked", "rounds": runner.RETIME_ROUNDS,
                  "picked_ms": 1.0, "fastest_ms": 1.0}
    timed_pairs = [e[1] for e in retime.events if e[0] == "timed"]
    assert timed_pairs[:4] == ["dense", "chunked", "chunked", "dense"]  # alternating which goes first
    assert len(timed_pairs) == 2 * runner.RETIME_ROUNDS
    row = _auto_row(records)
    assert row["retimed"] and row["pick_ratio_round_robin"] == 2.0 and row["pick_ratio"] == 1.0 and row["pick_within"]


def test_a_slow_pick_stays_slow_when_re_timed(monkeypatch):
    _scripted(monkeypatch, {"dense": lambda: 2.0, "chunked": lambda: 1.0, "auto": lambda: 2.0})
    group = [Case("t5", impl, 64, "fwd") for impl in ("dense", "chunked", "auto")]
    records: dict = {}
    runner._time_group(64, group, BenchSpec(memory=False, repeats=2), records, log=lambda s: None, deadline=None)
    row = _auto_row(records)
    assert row["retimed"] and row["pick_ratio"] == 2.0 and row["pick_within"] is False
    from relpos import bench

    md = bench.markdown({"shape": "B=1", "baseline": "sdpa", "records": [r.to_json() for r in records.values()],
                         "peers": []})
    assert "t5 N = 64 fwd 2.00 -> 2.00), 1 of them still over" in md


def test_a_fast_pick_is_not_re_timed(monkeypatch):
    _scripted(monkeypatch, {"dense": lambda: 1.0, "chunked": lambda: 1.04, "auto": lambda: 1.0})
    group = [Case("t5", impl, 64, "fwd") for impl in ("dense", "chunked", "auto")]
    records: dict = {}
    runner._time_group(64, group, BenchSpec(memory=False, repeats=2), records, log=lambda s: None, deadline=None)
    assert records[("t5", "auto", 64, "fwd")].retime is None and not _auto_row(records)["retimed"]


def test_a_slow_compiled_case_is_timed_after_its_compile_not_by_it(monkeypatch):
    """On CUDA flex (and auto, which may pick it) compiles on its first run: a slow case is timed by its last
    warm-up, which must come after the compile. The first GPU check reported 2-12 s compiles as flex step times."""
    runs: dict = {}

    def timed(step, spec):
        n = runs[step.name] = runs.get(step.name, 0) + 1
        if step.name == "flex":
            return (5000.0, 5000.0) if n == 1 else (3000.0, 3000.0)  # compile, then a slow (> SLOW_S) step
        return 1.0, 1.0

    monkeypatch.setattr(runner, "build_step", _named_step)
    monkeypatch.setattr(runner, "timed", timed)
    for device, expected in (("cuda", 3000.0), ("cpu", 5000.0)):  # CPU flex is not compiled: one warm-up
        runs.clear()
        records: dict = {}
        runner._time_group(64, [Case("t5", "flex", 64, "fwd")], BenchSpec(memory=False, repeats=1, device=device),
                           records, log=lambda s: None, deadline=None)
        rec = records[("t5", "flex", 64, "fwd")]
        assert (rec.median_ms, rec.runs) == (expected, 1)


def test_a_ratio_to_the_baseline_is_the_median_of_its_rounds(monkeypatch):
    """The host slows down two rounds earlier for the case than for the baseline (the slow-down began between
    them): per round the case costs 2x the baseline, but the ratio of the two medians reads 6x."""
    runs: dict = {}

    def timed(step, spec):
        n = runs[step.name] = runs.get(step.name, 0) + 1
        r = n - 2  # the first call is the warm-up
        if step.name == "sdpa":
            ms = 1.0 if r < 9 else 3.0
        else:
            ms = 2.0 if r < 7 else 6.0
        return ms, ms

    monkeypatch.setattr(runner, "build_step", _named_step)
    monkeypatch.setattr(runner, "timed", timed)
    records: dict = {}
    spec = BenchSpec(memory=False, repeats=3)
    runner._time_group(64, [Case("t5", "dense", 64, "fwd")], spec, records, log=lambda s: None, deadline=None)
    rec = records[("t5", "dense", 64, "fwd")]
    assert rec.runs == runner.MORE_ROUNDS * spec.repeats == 15
    assert (rec.median_ms, rec.baseline_ms) == (6.0, 1.0)  # the ratio of medians would read 6
    assert rec.ratio == 2.0 and rec.wall_ratio == 2.0
