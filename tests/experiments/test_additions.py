"""Evaluation-only additions (issue 31): passkey or a RoPE scaling added to a finished folder is evaluated on its
saved models -- nothing is trained, stored numbers are unchanged, and the added runs equal a fresh run's."""

from __future__ import annotations

import json

import pytest

import relpos.training.loop
from relpos.cli import main
from relpos.compare.sweep import compare
from relpos.compare.runner import SerialRunner
from relpos.compare.store import ConfigMismatchError, Store
from tests.experiments.test_compare import digest, quiet, tiny

#: timing and provenance: everything else of a stored run must be equal between an addition and a fresh run
_VOLATILE = {"added"}


def cfg(**kw):
    # rope (with the pi scaling) and alibi language models; 160 bytes: the passkey prompt (134) fits
    c = tiny(**{"schemes": ["alibi", "rope"], "tasks": ["lm"], "rope_variants": ["pi"], **kw})
    c.lm = {"train_len": 8, "eval_lengths": [8, 16, 160], "eval_tokens": 320, "train_bytes": 20_000}
    return c


def run(c, out, **kw):
    lines = []
    s = compare(c, out, runner=SerialRunner(), progress=False, plots=False, log=lines.append, **kw)
    s.lines = lines
    return s


def stored(out):
    """``(fingerprint, {(job, task, variant): (measurements, info without provenance)})`` of a folder."""
    with Store(out / "results.sqlite", create=False) as st:
        fp = st.get_meta("fingerprint")
        runs = {(r["job"], r["task"], r["variant"]): (r["measurements"],
                                                      {k: v for k, v in r["info"].items() if k not in _VOLATILE})
                for r in st.runs(fp)}
        assert len(st.done_jobs(fp)) == 2
    return fp, runs


def _no_training(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("an evaluation-only addition trained a model")

    monkeypatch.setattr(relpos.training.loop, "train", refuse)


PASSKEY = {"n": 1}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The configuration with passkey and both scalings, trained afresh: what every addition must equal."""
    out = tmp_path_factory.mktemp("fresh")
    run(cfg(passkey=PASSKEY, rope_variants=["pi", "yarn"]), out)
    return stored(out)


def test_adding_passkey_then_a_scaling_trains_nothing_and_equals_a_fresh_run(tmp_path, monkeypatch, fresh):
    out = tmp_path / "a"
    run(cfg(), out)
    fp0, before = stored(out)
    assert not any(t == "passkey" for _, t, _ in before)
    _no_training(monkeypatch)
    s = run(cfg(passkey=PASSKEY), out)  # --passkey 1 on the finished folder
    assert s.finished == 0 and s.skipped == s.total == 2 and not s.failed
    assert any("no training" in line for line in s.lines)
    fp1, after = stored(out)
    assert fp1 != fp0 and fp1 == cfg(passkey=PASSKEY).validate().fingerprint()
    assert {k: v for k, v in after.items() if k[1] != "passkey"} == before  # existing numbers unchanged
    added = {k for k in after if k[1] == "passkey"}
    assert added == {("lm/alibi/seed0", "passkey", None), ("lm/rope/seed0", "passkey", None),
                     ("lm/rope/seed0", "passkey", "pi")}
    assert after[("lm/alibi/seed0", "passkey", None)][1]["evaluation"]["passkey"]["n"] == 1  # the settings each run used
    # the same command line again, or the original one: nothing to do, the folder keeps its passkey runs
    for again in (cfg(passkey=PASSKEY), cfg()):
        s = run(again, out)
        assert s.finished == 0 and stored(out) == (fp1, after)
    assert any("also measures passkey" in line for line in s.lines)
    # a new scaling: evaluated on the saved RoPE model, with its passkey run
    s = run(cfg(rope_variants=["pi", "yarn"]), out)
    assert s.finished == 0
    fp2, more = stored(out)
    assert set(more) - set(after) == {("lm/rope/seed0", "lm", "yarn"), ("lm/rope/seed0", "passkey", "yarn")}
    assert more[("lm/rope/seed0", "lm", "yarn")][1]["evaluation"] == {"rope_scaling": "yarn",
                                                                      "factor": "eval_len / train_len"}
    # every run equals the fresh run of the joined configuration, and the fingerprints agree
    assert (fp2, more) == fresh
    cj = json.loads((out / "config.json").read_text())
    assert cj["fingerprint"] == fp2 and cj["passkey"] == PASSKEY and sorted(cj["rope_variants"]) == ["pi", "yarn"]
    with Store(out / "results.sqlite", create=False) as st:
        log = json.loads(st.get_meta("evaluations_added"))
    assert [(r["from_fingerprint"], r["to_fingerprint"], r["added"], r["jobs"]) for r in log] == [
        (fp0, fp1, {"passkey": PASSKEY}, 2), (fp1, fp2, {"rope_variants": ["yarn"]}, 1)]
    # the rewritten folder reports as any other
    monkeypatch.undo()
    assert main(["compare", "--report-only", "--out", str(out), "--no-plots"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["fingerprint"] == fp2 and len(res["runs"]) == len(more)


def test_missing_saved_models_are_named_and_nothing_changes(tmp_path, monkeypatch):
    out = tmp_path / "a"
    run(cfg(), out, keep_models=False)
    was = digest(out)
    _no_training(monkeypatch)
    with pytest.raises(ConfigMismatchError, match=r"have none .*--no-keep-models.*--force") as e:
        run(cfg(passkey=PASSKEY), out)
    assert "\n" not in str(e.value) and digest(out) == was
    # a scaling concerns the RoPE model only: still its saved model is needed
    with pytest.raises(ConfigMismatchError, match=r"1 of the 1 finished runs"):
        run(cfg(rope_variants=["pi", "ntk"]), out)
    assert digest(out) == was


def test_other_passkey_settings_are_refused(tmp_path, monkeypatch):
    out = tmp_path / "a"
    run(cfg(passkey=PASSKEY), out)
    was = digest(out)
    with pytest.raises(ConfigMismatchError, match=r"passkey results with settings \{'n': 1\}.*--passkey 1"):
        run(cfg(passkey={"n": 2}), out)
    assert digest(out) == was
    # another compare training in the folder (a live lease): the addition waits for it
    kept = stored(out)
    with Store(out / "results.sqlite") as st:
        assert st.claim(st.get_meta("fingerprint"), "lm/nope/seed0")
        with pytest.raises(ConfigMismatchError, match=r"another relpos compare is training in .*lm/nope/seed0"):
            run(cfg(passkey=PASSKEY, rope_variants=["pi", "yarn"]), out)
        st.release(st.get_meta("fingerprint"), "lm/nope/seed0")
    assert stored(out) == kept
    # a different training is not an addition: the usual refusal
    with pytest.raises(ConfigMismatchError, match="different configuration"):
        run(cfg(passkey=PASSKEY, steps=4), out)


def test_cli_dry_run_and_run_of_an_addition(tmp_path, capsys):
    args = ["compare", "--preset", "ci", "--schemes", "rope", "--tasks", "lm", "--steps", "3", "--d-model", "16",
            "--layers", "1", "--train-len", "8", "--eval-lengths", "8,160", "--eval-tokens", "320",
            "--rope-variants", "none", "--workers", "1", "--no-progress", "--no-plots", "--out", str(tmp_path / "o")]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args + ["--passkey", "1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would add passkey {'n': 1}" in out and "saved models of 1 finished runs (no training)" in out
    assert "1 of 1 done" in out
    assert main(args + ["--passkey", "1"]) == 0
    err = capsys.readouterr().err
    # the passkey prompt (134 bytes) does not fit the training length: said, with the length that would test it
    assert "--train-len 134 or more" in err and "no training" in err


def test_passkey_warnings():
    from relpos.commands.compare import passkey_warning

    c = cfg(passkey=PASSKEY)
    assert "--train-len 134 or more" in passkey_warning(c)
    c.lm["train_len"] = 134
    assert passkey_warning(c) is None
    c.lm["eval_lengths"] = [8, 16]  # no evaluation length fits the prompt: passkey would measure nothing
    assert "measures nothing" in passkey_warning(c)
    assert passkey_warning(cfg()) is None
