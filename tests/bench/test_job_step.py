"""``benchmarks/job_step.py`` (issue 52): the quick run end to end, the bare loop's shapes, the prediction."""

from __future__ import annotations

import json
import sqlite3
import statistics

import pytest

from tests.bench.scripts import load_script


@pytest.fixture(scope="module")
def mod():
    return load_script("job_step")


def test_quick_run_writes_the_table(mod, tmp_path):
    assert mod.main(["--quick", "--rounds", "3", "--provisional", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "job_step.json").read_text())
    assert "shared" in doc["provisional"]  # a provisional run says so in its metadata
    (cell,) = doc["cells"]
    assert cell["cell"] == "ci-lm" and (cell["batch"], cell["seq_len"]) == (8, 32)
    # the bare loop trains a model of exactly the job's size (NoPE has no position parameters)
    assert cell["bare_params"] == cell["job_params"] > 0
    rows = {r["scheme"]: r for r in cell["rows"]}
    assert list(rows) == ["nope", "alibi"]
    assert rows["nope"]["vs_nope"] == 1.0 and rows["alibi"]["target"] == 1.3
    for r in rows.values():
        # the job step counts 1 / val_every of a validation
        assert r["job_step_ms"] == pytest.approx(r["step_ms"] + r["validation_ms"] / cell["val_every"])
        assert r["validation_ms"] > 0 and "compiled_job_step_ms" not in r
    # every ratio is the median over rounds of the ratio within a round, read back from the rounds' own times
    rt = {k: v for k, v in cell["round_ms"].items()}
    assert all(len(v) == cell["rounds"] for v in rt.values())

    def job(s):
        return [a + b / cell["val_every"] for a, b in zip(rt[f"job/{s}"], rt[f"validate/{s}"])]

    def med_ratio(num, den):
        return statistics.median(a / b for a, b in zip(num, den))

    base = [a + b for a, b in zip(rt["bare/nope"], rt["data/nope"])]
    assert cell["nope_vs_bare"] == pytest.approx(med_ratio(job("nope"), rt["bare/nope"]), rel=1e-3)
    # the task's batch generator is timed alone; the target reads the bare loop plus it
    assert cell["data_ms"] > 0 and cell["nope_vs_bare_data"] == pytest.approx(med_ratio(job("nope"), base), rel=1e-3)
    assert cell["bare_met"] == (cell["nope_vs_bare_data"] <= 1.15)
    # like for like: the bare loop's own validation of the same set, amortised over the same interval
    val = [a + b + c / cell["val_every"] for a, b, c in zip(rt["bare/nope"], rt["data/nope"], rt["bare_validate/nope"])]
    assert cell["bare_validation_ms"] > 0
    assert cell["nope_vs_bare_data_val"] == pytest.approx(med_ratio(job("nope"), val), rel=1e-3)
    assert rows["alibi"]["vs_nope"] == pytest.approx(med_ratio(job("alibi"), job("nope")), rel=1e-3)
    md = (tmp_path / "job_step.md").read_text()
    assert "**Provisional**" in md and "| ci-lm | 8 x 32 |" in md and "| alibi (1.3x) |" in md
    assert f"Run took {doc['seconds']:.0f} s." in md
    # the first table also splits the validation off NoPE's job step
    n = rows["nope"]
    assert (f"| {cell['data_ms']:.1f} | {n['job_step_ms']:.1f} | {n['validation_ms'] / cell['val_every']:.2f} ms | "
            f"{cell['nope_vs_bare']:.2f}x | {cell['nope_vs_bare_data']:.2f}x | {n['step_vs_bare_data']:.2f}x | "
            f"{'yes' if cell['bare_met'] else '**no**'} | {cell['nope_vs_bare_data_val']:.2f}x |") in md
    assert cell["settle"] == 0


def test_settled_steps(mod, tmp_path, monkeypatch):
    """--settle runs that many untimed calls of a variant right before each of its timed ones."""
    calls = []
    real = mod.JobStep.step
    monkeypatch.setattr(mod.JobStep, "step", lambda self: calls.append(1) or real(self))
    assert mod.main(["--quick", "--settle", "2", "--warmup", "1", "--out", str(tmp_path)]) == 0
    (cell,) = json.loads((tmp_path / "job_step.json").read_text())["cells"]
    assert cell["settle"] == 2 and cell["rounds"] == 1
    # 2 schemes x (1 warm-up + 2 settling + 1 timed) job steps
    assert len(calls) == 2 * (1 + 2 + 1)
    with pytest.raises(SystemExit):
        mod.main(["--quick", "--settle", "-1"])


def test_job_step_runs_the_jobs_configs(mod):
    """The timed job is built from the job's own configs: the preset's model, batch, sequence and first rate."""
    from relpos.compare.job import Job, model_config_for, train_config_for

    j = mod.JobStep("full-mqar", "nope")
    cfg, task_name = mod.cell_config("full-mqar")
    task = cfg.make_task(task_name)
    job = Job(task_name, "nope", 0)
    assert j.mcfg == model_config_for(job, cfg, task)
    assert j.tcfg.to_dict() == train_config_for(job, cfg, task, lr=cfg.lr_tries(task_name)[0]).to_dict()
    assert (j.mcfg.n_layers, j.tcfg.batch_size, j.tcfg.seq_len) == (3, 256, 17)
    assert j.monitor.history == [] and j.step() > 0 and j.monitor.history == []  # validation only in validate()
    assert "val_exact" in j.validate()


def test_prediction_from_a_store(mod, tmp_path):
    store = tmp_path / "results.sqlite"
    con = sqlite3.connect(store)
    con.execute("CREATE TABLE jobs (info TEXT)")
    jobs = [("lm", "nope", [100, 200], 3600.0, 36.0), ("mqar", "rope", [1000], 7200.0, 0.0),
            ("mqar", "t5", [10], 10.0, 0.0)]
    for task, scheme, steps, cpu, ev in jobs:
        info = {"task": task, "scheme": scheme, "cpu_seconds": cpu, "eval_seconds": ev,
                "train": {"steps": steps[-1], "fit": {"lr_tries": [{"steps": s} for s in steps]}}}
        con.execute("INSERT INTO jobs VALUES (?)", (json.dumps(info),))
    con.commit()
    con.close()
    cells = [{"cell": "full-lm", "bare_step_ms": 5.0, "rows": [{"scheme": "nope", "job_step_ms": 10.0}]},
             {"cell": "full-mqar", "bare_step_ms": 50.0, "rows": [{"scheme": "rope", "job_step_ms": 72.0}]}]
    p = mod.predict(str(store), cells)
    lm, mq = p["tasks"]["lm"], p["tasks"]["mqar"]
    assert lm["predicted_cpu_h"] == pytest.approx((300 * 0.010 + 36) / 3600)
    assert lm["bare_cpu_h"] == pytest.approx((300 * 0.005 + 36) / 3600)
    assert mq["predicted_cpu_h"] == pytest.approx(1000 * 0.072 / 3600)  # t5 was not measured: left out
    assert mq["measured_cpu_h"] == pytest.approx(7210 / 3600) and mq["jobs"] == 2
    assert p["missing"] == ["full-mqar/t5"]
    assert p["total"]["measured_cpu_h"] == pytest.approx((3600 + 7200 + 10) / 3600)



def test_ratios_are_medians_of_each_rounds_ratio(mod):
    """Each ratio is the median over rounds of the ratio within a round. Here NoPE's job hits a slow stretch in
    round 1 that the bare loop does not: the rounds read 1.1, 3.3 and 1.1 (median 1.1), where the ratio of the
    medians would read 3.3 / 2.0 = 1.65."""
    z = [0.0, 0.0, 0.0]
    times = {("bare", "nope"): [1.0, 2.0, 3.0], ("data", "nope"): [0.5, 0.5, 0.5],
             ("job", "nope"): [1.1, 6.6, 3.3], ("validate", "nope"): list(z),
             ("job", "alibi"): [2.2, 4.4, 6.6], ("validate", "alibi"): list(z),
             ("compiled", "alibi"): [1.1, 2.2, 3.3]}
    r = mod.ratios(times, ["nope", "alibi"], val_every=100)
    assert r["nope_vs_bare"] == pytest.approx(1.1)
    assert r["nope_vs_bare_data"] == pytest.approx(3.3 / 3.5)  # rounds 0.733, 2.64, 0.943
    assert r["vs_nope"]["alibi"] == pytest.approx(2.0)  # rounds 2.0, 0.667, 2.0 (medians: 4.4 / 3.3 = 1.33)
    assert r["vs_bare"]["alibi"] == pytest.approx(2.2)  # rounds 2.2, 2.2, 2.2
    assert r["step_vs_bare_data"]["nope"] == pytest.approx(3.3 / 3.5)
    assert r["compile_speedup"] == {"alibi": pytest.approx(2.0)}
    # a validation counts 1 / val_every of its own round
    times[("validate", "nope")] = [11.0, 0.0, 0.0]
    assert mod.ratios(times, ["nope", "alibi"], val_every=100)["nope_vs_bare"] == pytest.approx(1.21)


def test_the_bare_loops_validation_scores_the_jobs_validation_set(mod):
    """On an algorithmic cell the bare loop validates the monitor's own examples by exact match (a value in
    [0, 1]), as the job's validation does; the LM cell sums the loss over the same windows."""
    j = mod.JobStep("full-parity", "nope")
    bare = mod.BareStep(j)
    assert bare.val_x is j.monitor.x and not bare.lm and 0.0 <= bare.validate() <= 1.0
    assert bare.model.training  # put back in training mode


def test_a_sample_is_the_mean_of_the_calls_that_fill_sample_ms(mod, tmp_path, monkeypatch):
    """--sample-ms counts each variant's calls per sample once after the warm-up and times their mean."""
    calls = []
    real = mod.JobStep.step
    monkeypatch.setattr(mod.JobStep, "step", lambda self: calls.append(1) or real(self))
    assert mod.main(["--quick", "--sample-ms", "200", "--warmup", "1", "--rounds", "2", "--out", str(tmp_path)]) == 0
    (cell,) = json.loads((tmp_path / "job_step.json").read_text())["cells"]
    n = cell["calls_per_sample"]
    assert cell["sample_ms"] == 200 and n["job/nope"] > 1 and n["bare/nope"] > 1  # a ci-lm step is well under 200 ms
    # per scheme: 1 warm-up + 1 call that counts the calls + 2 rounds x calls per sample
    assert len(calls) == sum(2 + 2 * n[f"job/{s}"] for s in ("nope", "alibi"))
    assert all(len(v) == 2 for v in cell["round_ms"].values())
    with pytest.raises(SystemExit):
        mod.main(["--quick", "--sample-ms", "-1"])
