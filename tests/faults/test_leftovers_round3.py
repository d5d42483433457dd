"""Issue 47, the items left after round 3: ``compare --dry-run --corpus`` built the whole corpus cache (tokenized
everything) to state a plan; refused runs left empty ``results.sqlite`` files behind; Ray's processes outlived a
killed driver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _tree(root: Path) -> list[tuple[str, int]]:
    """Every path under ``root`` with its size (files) or -1 (folders): what a command must leave unchanged."""
    if not root.exists():
        return []
    return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1) for p in root.rglob("*"))


# ------------------------------------------------------------------ a dry run reads no corpus it has not cached


def _compare_argv(corpus, out, *extra):
    return ["compare", "--corpus", str(corpus), "--tasks", "lm", "--schemes", "alibi,rope", "--seeds", "0",
            "--train-len", "16", "--eval-lengths", "16,32", "--eval-tokens", "512", "--out", str(out), *extra]


@pytest.fixture
def small_corpus(tmp_path, monkeypatch):
    from tests.data_helpers import prose

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(60_000, seed=5))
    return corpus


def test_a_dry_run_does_not_build_the_corpus_cache(small_corpus, tmp_path, capsys):
    """It tokenized the whole corpus into the cache (the fingerprint hashes the tokenized text) just to print a
    plan; now the plan says the fingerprint is computed at run time, and nothing is written."""
    from relpos.cli import main

    out = tmp_path / "out"
    assert main(_compare_argv(small_corpus, out, "--dry-run")) == 0
    text = capsys.readouterr().out
    assert not (tmp_path / "cache").exists(), f"a dry run wrote the corpus cache: {_tree(tmp_path / 'cache')}"
    assert not out.exists()
    assert "fingerprint computed at run time" in text and "2 training runs" in text
    assert "is not read yet (60," in text and "lm/alibi/seed0  to run" in text and "lm/rope/seed0   to run" in text


def test_a_dry_run_of_a_cached_corpus_states_the_run_fingerprint(small_corpus, tmp_path, capsys):
    """Once the corpus is in the cache, the dry run reads only its meta.json and prints the exact fingerprint a
    run uses (the real run's fingerprint is unchanged); still nothing is written."""
    from relpos.cli import build_parser, main
    from relpos.commands.compare import build_config
    from relpos.corpus import load_corpus

    load_corpus(small_corpus)  # the cache a run builds
    before = _tree(tmp_path / "cache")
    out = tmp_path / "out"
    argv = _compare_argv(small_corpus, out, "--dry-run")
    assert main(argv) == 0
    fp = build_config(build_parser().parse_args(argv)).fingerprint()  # as a run computes it
    assert f"fingerprint {fp}," in capsys.readouterr().out
    assert _tree(tmp_path / "cache") == before and not out.exists()


def test_a_dry_run_beside_a_store_of_an_unread_corpus_changes_nothing(small_corpus, tmp_path, capsys):
    """A folder with results, and a corpus not read yet (changed since): the plan says the match is settled at run
    time, and the folder is left as it was."""
    from relpos.cli import main
    from relpos.compare.store import Store

    out = tmp_path / "out"
    out.mkdir()
    with Store(out / "results.sqlite") as st:
        st.bind("0123456789abcdef", {"protocol_version": 0})
    before = _tree(out)
    assert main(_compare_argv(small_corpus, out, "--dry-run")) == 0
    text = capsys.readouterr().out
    assert _tree(out) == before and not (tmp_path / "cache").exists()
    assert "holds results (fingerprint 0123456789abcdef)" in text and "known once the corpus is read" in text


# ------------------------------------------------------------------ refusals leave --out as it was


def _gapped_tokenizer(path: Path, text: str) -> Path:
    """A word-level tokenizer of ``text`` whose word '.' has id 5000, far past its 1 + words tokens."""
    import re

    from tokenizers import Tokenizer, models, pre_tokenizers

    words = sorted(set(re.findall(r"\w+|[^\w\s]", text)))
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    vocab["."] = 5000
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


def test_a_tokenizer_whose_ids_pass_its_size_is_refused_before_the_folder_is_made(tmp_path, monkeypatch, capsys):
    """``get_vocab_size`` counts tokens, not the largest id: a tokenizer with an id past its size trained a model
    with too small an embedding, so every run failed in its worker after config.json, results.json and
    results.sqlite were written (exit 1). Now it is refused by name before anything is read or written."""
    pytest.importorskip("tokenizers")
    from relpos.cli import main
    from tests.data_helpers import prose

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    text = prose(300_000, seed=5)
    corpus = tmp_path / "c.txt"
    corpus.write_text(text)
    tok = _gapped_tokenizer(tmp_path / "tok.json", text)
    out = tmp_path / "out"
    rc = main(["compare", "--corpus", str(corpus), "--tokenizer", str(tok), "--tasks", "lm", "--schemes", "alibi",
               "--seeds", "0", "--train-len", "16", "--eval-lengths", "16,32", "--eval-tokens", "64", "--steps", "2",
               "--workers", "1", "--runner", "serial", "--no-plots", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert not out.exists(), f"a refused run left {_tree(out)}"
    assert rc == 2 and "Traceback" not in err
    assert f"--tokenizer {tok}: its token ids reach 5000 (token '.'), past the tokenizer's own vocabulary" in err
    assert not (tmp_path / "cache").exists()


def _hf_argv(model, corpus, out, *extra):
    return ["compare", "--hf-model", str(model), "--corpus", str(corpus), "--eval-tokens", "512", "--device", "cpu",
            "--hf-factors", "1", "--passkey", "0", "--scalings", "native", "--no-progress", "--out", str(out), *extra]


@pytest.fixture
def small_vocab_model(hf, tmp_path):
    """The tiny Llama's architecture with 256 embeddings, beside the 512-merge tokenizer of the fixture's model."""
    import shutil

    from tests.data_helpers import tiny_llama

    model = tiny_llama(tmp_path / "v256", max_pos=64, vocab_size=256, tokenizer=False)
    shutil.copy(hf[0] / "tokenizer.json", model / "tokenizer.json")
    return model


@pytest.mark.parametrize("how", ["own", "flag"])
def test_a_tokenizer_larger_than_the_models_vocabulary_leaves_out_as_it_was(hf, small_vocab_model, tmp_path,
                                                                             monkeypatch, capsys, how):
    """The model's own tokenizer, or one given by --tokenizer, holds more ids than the model's embeddings: refused
    by name before the corpus is read, and --out is not even made (it was made empty before the refusal)."""
    from relpos.cli import main

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "o"
    extra = ["--tokenizer", str(hf[0] / "tokenizer.json")] if how == "flag" else []
    rc = main(_hf_argv(small_vocab_model, hf[1], out, *extra))
    err = capsys.readouterr().err
    assert not out.exists(), f"a refused run left {_tree(out)}"
    assert rc == 2 and "Traceback" not in err
    assert "tokenizer.json: its token ids reach" in err and "past the model's vocabulary of 256 tokens" in err


def test_a_refusal_leaves_an_existing_empty_out_empty(hf, small_vocab_model, tmp_path, monkeypatch, capsys):
    """Control: a folder the user made stays as it was (no store, WAL or SHM)."""
    from relpos.cli import main

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "o"
    out.mkdir()
    assert main(_hf_argv(small_vocab_model, hf[1], out)) == 2
    assert os.listdir(out) == []
    capsys.readouterr()


def test_a_nan_norm_eps_refusal_does_not_make_out(hf, tmp_path, monkeypatch, capsys):
    """Refused at the first evaluation, after the model loaded: no store, and no empty --out folder either."""
    from relpos.cli import main
    from tests.faults.conftest import nan_eps_model

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    model = nan_eps_model(hf[0], tmp_path / "nan-eps")
    out = tmp_path / "o"
    rc = main(_hf_argv(model, hf[1], out))
    err = capsys.readouterr().err
    assert rc in (1, 2) and "Traceback" not in err
    assert not out.exists(), f"a refused run left {_tree(out)}"


# ------------------------------------------------------------------ a killed Ray driver shuts Ray down


class _FakeRay:
    """What :class:`relpos.compare.runner.RayRunner` uses of Ray. ``init`` installs a SIGTERM handler as Ray's
    does (Ray's aborts the driver: no ``finally`` runs, no ``ray.shutdown()``); ``wait`` is where ``kill``
    reaches the driver."""

    def __init__(self, signum=None):
        import signal

        self.signal, self.signum = signal, signum
        self.initialized, self.calls, self.ray_handler_ran = False, [], False

    def is_initialized(self):
        return self.initialized

    def init(self, **kw):
        self.initialized = True
        self.calls.append("init")

        def ray_handler(signum, frame):  # stands for Ray's handler, which aborts the process
            self.ray_handler_ran = True

        self.signal.signal(self.signal.SIGTERM, ray_handler)

    def shutdown(self):
        self.initialized = False
        self.calls.append("shutdown")

    def remote(self, **kw):
        return lambda fn: type("Remote", (), {"remote": staticmethod(lambda *a: object())})

    def cluster_resources(self):
        return {"CPU": 1}

    def wait(self, refs, num_returns=1):
        import time

        if self.signum is not None:
            os.kill(os.getpid(), self.signum)  # `kill PID` while the driver waits for its jobs
            for _ in range(100):  # the Python handler runs at the next bytecode boundary
                time.sleep(0.001)
        return list(refs)[:num_returns], list(refs)[num_returns:]

    def get(self, ref):
        return {"ok": True}


def _ray_runner(monkeypatch, fake):
    import sys

    from relpos.compare.runner import Job, RayRunner

    monkeypatch.setitem(sys.modules, "ray", fake)
    return RayRunner(None, 1), [Job("lm", "alibi", 0)]


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_terminated_ray_driver_shuts_ray_down_and_restores_the_handlers(monkeypatch, signame):
    """``kill`` (SIGTERM) hit Ray's own handler, which aborts the driver (measured: exit -6, a stack dump, no
    ``ray.shutdown()``, the sweep's cleanup skipped); SIGHUP killed it outright. Now both stop the sweep as
    Ctrl-C does: ``KeyboardInterrupt``, ``ray.shutdown()``, and the handlers from before ``ray.init`` back."""
    import signal

    sig = getattr(signal, signame)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    if signame == "SIGHUP":  # a stand-in for the default action (which would end pytest)
        signal.signal(signal.SIGHUP, lambda *a: None)
        before[signal.SIGHUP] = signal.getsignal(signal.SIGHUP)
    fake = _FakeRay(sig)
    runner, jobs = _ray_runner(monkeypatch, fake)
    try:
        with pytest.raises(KeyboardInterrupt):
            list(runner.run(jobs, {}))
        assert not fake.ray_handler_ran
        assert fake.calls == ["init", "shutdown"]
        assert {s: signal.getsignal(s) for s in before} == before
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def test_an_ignored_hangup_stays_ignored_and_a_finished_run_restores_everything(monkeypatch):
    """Under ``nohup`` SIGHUP stays ignored while Ray runs; a run that ends normally shuts Ray down and puts back
    the handlers from before ``ray.init`` (Ray's own SIGTERM handler stayed installed after the sweep before)."""
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    fake = _FakeRay(None)
    seen = {}
    runner, jobs = _ray_runner(monkeypatch, fake)
    try:
        for ev in runner.run(jobs, {}):
            seen = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
            assert ev[1] == {"ok": True}
        assert seen[signal.SIGHUP] is signal.SIG_IGN and callable(seen[signal.SIGTERM])
        assert fake.calls == ["init", "shutdown"]
        assert signal.getsignal(signal.SIGTERM) is before[signal.SIGTERM]
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def test_a_ray_instance_started_elsewhere_is_left_alone(monkeypatch):
    """Control: when Ray was already initialised by the caller, the runner neither shuts it down nor touches the
    signal handlers."""
    import signal

    before = signal.getsignal(signal.SIGTERM)
    fake = _FakeRay(None)
    fake.initialized = True
    runner, jobs = _ray_runner(monkeypatch, fake)
    for _ in runner.run(jobs, {}):
        assert signal.getsignal(signal.SIGTERM) is before
    assert fake.calls == [] and fake.initialized
