"""One job of a sweep: train one model until it fits, evaluate it (and its variants).

:func:`run_job` is the unit of work. It is a plain top-level function of
JSON-able arguments returning a JSON-able dict, so any executor can run it (see
:mod:`relpos.compare.runner`).

A job

1. builds the model of its (scheme, task, seed), with the scheme's learned
   range set from the training length when the configuration says so
   (``scheme_ranges="train_len"``, through the scheme's own
   ``options_for_length`` capability);
2. trains it with a :class:`~relpos.compare.fitting.FitMonitor` that stops
   once it fits (trying the learning rates of ``fit.lr_grid`` in order);
3. evaluates it at every evaluation length, and its variants: RoPE scalings
   for schemes that offer them, and for randomized-position runs both the plain
   positions ``0..N-1`` and the mean over sampled position draws;
4. measures the effective attention span of language models.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Callable

from relpos.compare.saved_models import model_path, save_model  # noqa: F401 (where a job's model is kept)

__all__ = ["Job", "run_job", "evaluate_job", "evaluate_additions", "model_config_for", "train_config_for",
           "rope_variant_model_for", "sampled_positions_model_for", "length_options"]

#: Sampled position draws averaged by the randomized-positions evaluation.
SAMPLED_DRAWS = 4
#: Test windows over which the effective attention span is measured (at least 32, so that a span rests on more than a few windows).
SPAN_WINDOWS = 32


@dataclass(frozen=True, order=True)
class Job:
    """One training run: a scheme on a task with a seed (optionally randomized positions)."""

    task: str
    scheme: str
    seed: int
    randomized: bool = False

    @property
    def key(self) -> str:
        return f"{self.task}/{self.scheme}{'+rand' if self.randomized else ''}/seed{self.seed}"

    def to_dict(self) -> dict:
        return {"task": self.task, "scheme": self.scheme, "seed": self.seed, "randomized": self.randomized}

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        return cls(d["task"], d["scheme"], int(d["seed"]), bool(d.get("randomized", False)))


def per_example_key(protocol: str, eval_len: int, bucket_start: int = -1, field: str = "value") -> str:
    """The key of one measurement's per-example scores in a run's ``per_example`` dict.

    Example:
        >>> per_example_key("accuracy", 32), per_example_key("accuracy", 32, field="token")
        ('accuracy/32/-1/value', 'accuracy/32/-1/token')
    """
    return f"{protocol}/{int(eval_len)}/{int(bucket_start)}/{field}"


def length_options(scheme: str, train_seq_len: int) -> dict:
    """The options that scale a scheme's learned range to a training length (``{}`` if it has none).

    Asks the scheme class through its ``options_for_length(train_seq_len)``
    capability: T5 sets ``max_distance``, Shaw ``k``, FIRE ``init_L``.
    """
    from relpos.encodings import get_scheme

    cls, _ = get_scheme(scheme)
    hook = getattr(cls, "options_for_length", None)
    return dict(hook(int(train_seq_len))) if callable(hook) else {}


def model_config_for(job: Job, cfg, task):
    """The :class:`relpos.model.ModelConfig` of a job.

    Learned absolute tables are sized for the longest evaluation sequence (rows
    past the training length stay untrained: that is the honest result).
    Explicit ``scheme_options`` win over the length rule.
    """
    from relpos.model import ModelConfig

    longest = task.max_seq_len()
    R = None
    if job.randomized:
        R = max(cfg.random_positions_factor * longest, task.train_seq_len())
    opts = length_options(job.scheme, task.train_seq_len()) if cfg.scheme_ranges == "train_len" else {}
    opts.update(cfg.scheme_options.get(job.scheme, {}))
    return ModelConfig(
        vocab_size=task.vocab_size,
        **cfg.model_settings(job.task),  # d_model, n_layers, n_heads, d_ff, init (the task's overrides)
        max_len=max(longest + 1, R or 0),  # +1: generate() counts the last sampled token
        scheme=job.scheme,
        scheme_options=opts,
        random_positions=R,
        embed_scale=embed_scale_for(job.scheme, cfg.embed_scale),
    )


def embed_scale_for(scheme: str, setting: str) -> str:
    """The token-embedding scale of a scheme's model: ``"auto"`` scales by sqrt(d_model) exactly when the
    scheme adds positions to the embeddings (as the absolute-position papers do, so a table of amplitude 1
    does not swamp the tokens) and leaves relative schemes as their papers train them."""
    if setting != "auto":
        return setting
    from relpos.encodings import get_scheme

    cls, _ = get_scheme(scheme)
    return "sqrt_d" if "embedding" in cls.acts_on else "none"


def train_config_for(job: Job, cfg, task, **overrides):
    """The :class:`relpos.training.loop.TrainConfig` of a job; ``overrides`` replace settings (e.g. ``lr``)."""
    from relpos.training.loop import TrainConfig

    s = cfg.train_settings(job.task)
    s.update(overrides)
    return TrainConfig(
        steps=s["steps"],
        batch_size=s["batch_size"],
        seq_len=task.train_seq_len(),
        lr=s["lr"],
        warmup=s["warmup"],
        weight_decay=s["weight_decay"],
        seed=job.seed,
        progress=False,
        # "plateau": a constant rate until the validation loss flattens, then the monitor's cooldown
        schedule="constant" if task.kind == "lm" and cfg.fit.lm_schedule == "plateau" else s.get("schedule", "cosine"),
        decay=s.get("decay", "matrices"),
        **{k: overrides[k] for k in ("ckpt_dir", "ckpt_every", "resume") if k in overrides},  # resumable tries
    )


def rope_variant_model_for(model, train_seq_len: int, scaling: str, fixed_factor: float | None):
    """``model_for(seq_len)`` giving copies of ``model`` with every rotary module rescaled.

    ``factor = max(1, seq_len / train_seq_len)`` unless ``fixed_factor`` is given;
    ``original_max_len = train_seq_len``. The trained weights are shared (the
    copies differ only in the scaling, which has no parameters). Rotary modules
    are found by their ``scalings`` capability (the scalings they offer).
    """
    cache: dict[float, object] = {}

    def model_for(seq_len: int):
        factor = fixed_factor if fixed_factor is not None else max(1.0, seq_len / train_seq_len)
        if factor not in cache:
            m = copy.deepcopy(model)
            n = 0
            for mod in m.modules():
                if _rotary(mod, scaling):
                    mod.set_scaling(scaling, factor=float(factor), original_max_len=int(train_seq_len))
                    n += 1
            if n == 0:
                raise ValueError("rope variants need a model with rotary modules")
            cache.clear()  # keep one copy alive at a time
            cache[factor] = m.eval()
        return cache[factor]

    return model_for


def sampled_positions_model_for(model, R: int, draw: int, seed: int):
    """``model_for(seq_len)``: the model run on a sorted random subset of ``[0, R)`` (draw ``draw``).

    The positions are drawn as in training (Ruoss et al. 2023 sample them at
    evaluation too), deterministically from ``(seed, draw, seq_len)``.
    """
    from relpos.compare.fitting import SampledPositions

    def model_for(seq_len: int):
        return SampledPositions(model, R, min(seq_len + 1, R), seed=hash((int(seed), int(draw), int(seq_len))))

    return model_for


def _mean_measurements(draws: list[list]) -> list:
    """Average the numbers of several evaluations with the same measurement layout (per-example scores
    example by example)."""
    import dataclasses

    out = []
    for ms in zip(*draws):
        first = ms[0]
        vals = {}
        for f in ("loss", "bpb", "ppl", "accuracy", "token_accuracy"):
            xs = [getattr(m, f) for m in ms if getattr(m, f) is not None]
            vals[f] = sum(xs) / len(xs) if xs else None
        for f in ("per_example", "per_example_token"):
            xs = [getattr(m, f) for m in ms if getattr(m, f) is not None]
            vals[f] = [round(sum(v) / len(xs), 6) for v in zip(*xs)] if xs and len(xs) == len(ms) else None
        out.append(dataclasses.replace(first, count=sum(m.count for m in ms), **vals))
    return out


def _split_per_example(measurements: list) -> tuple[list[dict], dict]:
    """Measurement dicts without their per-example lists, and those lists keyed by
    :func:`per_example_key` (the store keeps a run's dict, not extra measurement
    columns)."""

    ms, per = [], {}
    for m in measurements:
        d = m.to_dict()
        for src, field in (("per_example", "value"), ("per_example_token", "token")):
            v = d.pop(src, None)
            if v is not None:
                per[per_example_key(d["protocol"], d["eval_len"], d.get("bucket_start", -1), field)] = v
        ms.append(d)
    return ms, per


def view_validation(task, model) -> dict:
    """A view's own validation score at L (the number the fit gate and the view gate read; never the test
    set): exact match at L on the validation examples of length L (algorithmic; teacher-forced, equal to
    greedy), or the validation loss (nats) on the validation windows (language modelling). ``model`` is the
    view as it runs at the training length."""
    import torch

    from relpos.compare.fitting import lm_validation_loss

    x, y = task.validation_batch()
    with torch.no_grad():
        if task.kind == "lm":
            return {"score": lm_validation_loss(model, x, y), "kind": "val_loss"}
        from relpos.tasks.algorithmic import validation_score

        k = task.n_val_at_l
        exact, tok = validation_score(model, x[:k], y[:k])
        return {"score": exact, "token": tok, "kind": "val_exact_at_L"}


def _run_maker(job: Job, task) -> Callable:
    """``run(variant, measurements, task_name=None, **extra)``: one stored run of ``job`` (per-example scores
    split off as the store keeps them)."""

    def run(variant, measurements, task_name=None, **extra):
        ms, per = _split_per_example(measurements)
        return {
            "scheme": job.scheme,
            "variant": variant,
            "task": task_name or job.task,
            "seed": job.seed,
            "train_len": task.train_len,
            "measurements": ms,
            **({"per_example": per} if per else {}),
            **extra,
        }

    return run


def _variant_runs(run, job: Job, task, model, variants) -> list[dict]:
    """The RoPE scalings ``variants`` evaluated on a trained rotary model (none for other models and for
    randomized-position runs); each run records its scaling and factor (``evaluation``)."""
    from relpos.compare.config import ROPE_VARIANTS

    if job.randomized or not _has_scalings(model):
        return []
    out = []
    for v in variants:
        scaling, fixed = ROPE_VARIANTS[v]
        mf = rope_variant_model_for(model, task.train_seq_len(), scaling, fixed)
        val = view_validation(task, mf(task.train_seq_len()))
        how = {"rope_scaling": scaling, "factor": fixed if fixed is not None else "eval_len / train_len"}
        out.append(run(v, task.evaluate(mf), validation=val, evaluation=how))
    return out


def _passkey_runs(run, job: Job, cfg, task, model, variants, *, base: bool = True) -> list[dict]:
    """Passkey retrieval on a language model (``base``) and on its RoPE scalings ``variants``; each
    run records the passkey settings it used (``evaluation``). None when passkey is off, the task is not
    language modelling, or no evaluation length fits the prompt."""
    from relpos.compare.config import ROPE_VARIANTS
    from relpos.tasks.passkey import Passkey

    if task.kind != "lm" or not cfg.passkey:
        return []
    pk = Passkey.fitting(task.eval_lengths, encode=getattr(task, "encode", None), **cfg.passkey)
    if pk is None:
        return []
    settings = {"passkey": pk.options()}
    out = []
    if base:
        out.append(run("randomized" if job.randomized else None, pk.evaluate(lambda n: model), "passkey",
                       evaluation=settings))
    if not job.randomized and _has_scalings(model):
        for v in variants:
            scaling, fixed = ROPE_VARIANTS[v]
            mf = rope_variant_model_for(model, task.train_seq_len(), scaling, fixed)
            out.append(run(v, pk.evaluate(mf), "passkey", evaluation=settings))
    return out


def evaluate_job(job: Job, cfg, task, model) -> list[dict]:
    """Evaluate a trained model (and its variants): one entry per run."""
    from relpos.compare.fitting import SampledPositions

    run = _run_maker(job, task)
    model.eval()
    extra = {"validation": view_validation(task, model)}
    if task.kind == "lm":
        extra["span"] = _spans(task, model)
        identity = getattr(task, "corpus_identity", None)
        if callable(identity):  # the corpus these numbers come from, stored with every LM run
            extra["corpus"] = identity()
    out = [run("randomized" if job.randomized else None, task.evaluate(lambda n: model), **extra)]
    width = task.train_seq_len()
    if job.randomized:
        R = model.cfg.random_positions
        draws = [task.evaluate(sampled_positions_model_for(model, R, d, job.seed)) for d in range(SAMPLED_DRAWS)]
        # validated as in training: one fixed sampled draw (the FitMonitor's)
        val = view_validation(task, SampledPositions(model, R, width, seed=width))
        out.append(run("randomized-sampled", _mean_measurements(draws), validation=val))
    out += _variant_runs(run, job, task, model, cfg.rope_variants)
    out += _passkey_runs(run, job, cfg, task, model, cfg.rope_variants)
    return out


def evaluate_additions(job: Job, cfg, task, model, *, variants, passkey: bool) -> list[dict]:
    """The evaluation-only additions on a saved model (:mod:`relpos.compare.additions`): the RoPE scalings
    ``variants`` (and their passkey runs when ``cfg.passkey`` is on), and with ``passkey`` the passkey runs of
    the model and of every scaling of ``cfg.rope_variants``. The same code as :func:`evaluate_job`, so an
    addition equals what a fresh run with these settings stores."""
    run = _run_maker(job, task)
    model.eval()
    out = _variant_runs(run, job, task, model, variants)
    if passkey:
        return out + _passkey_runs(run, job, cfg, task, model, cfg.rope_variants)
    return out + _passkey_runs(run, job, cfg, task, model, variants, base=False)


def _rotary(mod, scaling: str | None = None) -> bool:
    """Whether a module offers rotary scalings (its ``scalings`` capability), or ``scaling`` in particular."""
    offered = tuple(getattr(type(mod), "scalings", None) or ())
    return bool(offered) and callable(getattr(mod, "set_scaling", None)) and (scaling is None or scaling in offered)


def _has_scalings(model) -> bool:
    return any(_rotary(m) for m in model.modules())


def _spans(task, model) -> dict:
    """Effective attention span at the training length and at the longest evaluation length (<= 1024), over
    :data:`SPAN_WINDOWS` test windows."""
    from relpos.tasks.span import effective_span

    out = {}
    lengths = sorted({task.train_len, min(max(task.eval_lengths), 1024)})
    for n in lengths:
        x = task._chunks(SPAN_WINDOWS, n)[:, :-1]  # (SPAN_WINDOWS, n) windows
        out[str(n)] = effective_span(model, x)
    return out


def _downsample(xs: list[float], n: int = 100) -> list[float]:
    if len(xs) <= n:
        return [float(x) for x in xs]
    idx = [round(i * (len(xs) - 1) / (n - 1)) for i in range(n)]
    return [float(xs[i]) for i in idx]


def _train_fitted(j: Job, cfg, task, mcfg, progress: Callable | None):
    """Train with early stopping at every rate of the task's grid (all of them, for every scheme alike) and
    keep the try with the best validation score (:func:`~relpos.compare.fitting.choose_try`); returns
    the kept (result, monitor, lr, tries)."""
    from relpos.compare.fitting import DEFAULT_COOLDOWN, FitMonitor, choose_try
    from relpos.training.loop import train
    from relpos.training.replay import ReplaySource

    from relpos.compare.inflight import try_overrides

    settings = cfg.train_settings(j.task)
    tries, kept = [], []
    sources: dict[int, ReplaySource] = {}  # by batch size: the tries replay the batches the first one drew
    for i, lr in enumerate(cfg.lr_tries(j.task)):
        tcfg = train_config_for(j, cfg, task, lr=lr, **try_overrides(cfg, j, i))  # checkpointed: resumable
        steps = tcfg.steps
        if tcfg.batch_size not in sources:
            sources[tcfg.batch_size] = ReplaySource(task.train_source(tcfg.batch_size, j.seed))

        def report(step, steps=steps):
            if progress is not None:
                progress(j.key, step, steps)

        mon = FitMonitor(task, cfg.fit, steps, progress=report, cooldown_at=settings.get("cooldown_at"),
                         cooldown=settings.get("cooldown", DEFAULT_COOLDOWN))
        res = train(mcfg, tcfg, sources[tcfg.batch_size], callback=mon)
        mon.restore_best(res.model)  # fit.keep_best: the model of the best validation check, as the gate reads
        score = mon.best_score()
        tries.append({"lr": lr, "steps": int(res.steps), "seconds": float(res.seconds + res.seconds_before),
                      "cpu_seconds_before": float(res.cpu_seconds_before),
                      "score": score if math.isfinite(score) else None, "token": mon.token_score(),
                      "fitted": mon.fitted_by_validation(), "stopped_early": mon.stopped_early,
                      "first_pass_step": mon.first_pass})
        best = choose_try(tries)
        # keep only the best model so far in memory (a try's model is not needed once another beats it)
        kept = [(res, mon, lr)] if best == len(tries) - 1 else kept
    for i, t in enumerate(tries):
        t["chosen"] = i == best
    return kept[0][0], kept[0][1], kept[0][2], tries


def _fit_record(task, mon, runs: list[dict], lr: float, tries: list[dict], target: float) -> dict:
    """The fit gate of a job (see :mod:`relpos.compare.fitting`): the kept try's validation score (of its
    kept check: the best with ``fit.keep_best``, else the last), the score its rate was chosen by. A randomized-position model was validated as it was trained (at
    sampled positions). The test set is never read here."""
    rec = {**mon.summary(), "lr": lr, "lr_tries": tries, "target": target}
    if task.kind == "lm":
        rec.update(fitted=mon.fitted_by_validation(), score=-mon.best_score() if mon.history else None,
                   score_kind="validation loss (nats) at the training length; fitted = it flattened")
        return rec
    score = mon.best_score() if mon.history else 0.0
    rec.update(fitted=bool(mon.fitted_by_validation()), score=score,
               score_kind="validation exact match at L (teacher-forced, equal to greedy)")
    return rec


def run_job(job: dict, cfg_dict: dict, *, threads: int | None = None, progress: Callable | None = None,
            evaluate: bool = True) -> dict:
    """Train and evaluate one job. Top-level and JSON in/out, for any executor.

    Args:
        job: :meth:`Job.to_dict`.
        cfg_dict: :meth:`ExperimentConfig.to_dict`.
        threads: torch threads (default ``cfg.threads``).
        progress: optional ``progress(job_key, step, steps)`` called during training.
        evaluate: False to train only (the other ranks under torchrun).

    Returns:
        ``{"job", "scheme", "task", "seed", "randomized", "train": {..., "fit": {...}},
        "eval_seconds", "runs": [{"scheme", "variant", "task", "seed",
        "train_len", "measurements": [...], "span"?}]}``.
    """
    import torch

    from relpos.compare.config import ExperimentConfig
    from relpos.training.malloc import keep_freed_memory

    keep_freed_memory()  # the job's process keeps its freed buffers (no page faults per step); no number changes
    cpu0 = time.process_time()
    j = Job.from_dict(job)
    cfg = ExperimentConfig.from_dict(cfg_dict)
    torch.set_num_threads(threads or cfg.threads)
    task = cfg.make_task(j.task)
    mcfg = model_config_for(j, cfg, task)
    res, mon, lr, tries = _train_fitted(j, cfg, task, mcfg, progress)
    cpu_before = sum(t.pop("cpu_seconds_before") for t in tries)  # of a resumed job's earlier segments
    model = res.model
    losses = [float(x) for x in res.losses]
    t1 = time.perf_counter()
    with torch.no_grad():
        runs = evaluate_job(j, cfg, task, model) if evaluate else []
    eval_seconds = time.perf_counter() - t1
    tail = losses[-max(1, len(losses) // 10):]
    fit = _fit_record(task, mon, runs, lr, tries, cfg.fit.target) if runs else None
    checkpoint = save_model(j, cfg, model, fit) if (cfg.models_dir and evaluate) else None
    if checkpoint is not None:  # the saved model's content hash: checked before the model is ever reused
        from relpos.compare.saved_models import model_digest

        digest = model_digest(model_path(cfg.models_dir, j))
    if evaluate:  # the result is made: the job's training checkpoints are no longer needed
        from relpos.compare.inflight import remove_job_folder

        remove_job_folder(cfg, j)
    return {
        "job": j.key,
        **j.to_dict(),
        "train": {
            "steps": int(res.steps),
            "seconds": float(res.seconds + res.seconds_before),
            "seconds_all_tries": float(sum(t["seconds"] for t in tries)),
            "ms_per_step": 1000.0 * float(res.seconds + res.seconds_before) / max(int(res.steps), 1),
            "tokens_per_s": float(res.tokens_per_s),
            "final_loss": float(sum(tail) / len(tail)) if tail else None,
            "loss_curve": _downsample(losses),
            "params": int(sum(p.numel() for p in model.parameters())),
            "model": mcfg.to_dict(),
            "fit": fit,
            "checkpoint": checkpoint,
            **({"checkpoint_sha256": digest} if checkpoint is not None else {}),
        },
        "eval_seconds": eval_seconds,
        # CPU time of the whole job (training tries and evaluation): on a shared machine, the honest
        # measure of cost; a job on an idle core takes about this long
        "cpu_seconds": time.process_time() - cpu0 + cpu_before,
        "runs": runs,
    }
