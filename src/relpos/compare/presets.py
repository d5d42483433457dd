"""The named presets of ``relpos compare``.

* ``default`` -- what ``relpos compare`` runs with no arguments: eight schemes,
  one of each family (:data:`QUICK_SCHEMES`), on language modelling and string
  copying, one seed, a tiny model trained until it fits (early stopping on
  validation data; language models until their loss flattens, then a cooldown); a
  quick look: its language models train at a higher rate to a looser plateau
  rule than the full preset's (about half the steps, a loss about 0.1 nats
  higher), and copy keeps L = 8 (see :data:`_ALGO_QUICK`). Its learning-rate grid is equal
  for every scheme and small: each task's one rate (6e-3 for language modelling, 2e-3 for copy).
  **9.8 minutes measured end to end on 2 cores** (protocol 3, 2026-12-02: 591 s wall, 1,111 CPU-seconds of
  jobs, 16 of 16 runs fitted; `docs/results.md`, "Protocol 3 so far").
  ``--add-schemes shaw,learned,sandwich`` adds the rest of the benchmark's schemes (about 3.5 minutes more).
* ``ci`` -- a **smoke test**: the benchmark's eleven schemes, few steps, short lengths; under
  two minutes. Its numbers come from models that have not fitted and carry no
  conclusion.
* ``full`` -- the eleven schemes on language modelling and five algorithmic tasks (:data:`FULL_ALGORITHMIC`:
  copy, copy-distinct, reverse, parity, MQAR; copy-hints by ``--tasks``), three seeds, randomized RoPE,
  algorithmic tasks at L = 16 (MQAR: 4 pairs), and the **equal grid**: every scheme trains at every rate of its
  task's grid and keeps the best by validation -- language modelling 2e-3, 1e-3 and 3e-3, every algorithmic
  task 1e-3 and 3e-3. **Estimated 30-36 CPU-hours**, from the costs measured on its first jobs (2026-12-03,
  a shared 2-core host): the 36 language-modelling jobs took 4.5 CPU-hours; a copy job about 650
  CPU-seconds for three tries of (nearly always) the whole 4,000-step budget, so about 430 for two. Per job at
  most: copy / copy-distinct 2 x 4,000 steps, reverse 2 x 8,000 (was 16,000 with one try), parity 2 x 8,000 (was 1,000: 1 of 36 runs fitted),
  MQAR 2 x 4,000 steps of about 150 ms (was 8,000: MQAR was 62 % of the protocol-2 cost); 36 jobs per task.
  Measured totals: ``docs/results.md``.
* ``scale`` -- the scale check (:mod:`relpos.compare.scale`): the eight default schemes on language
  modelling at d_model 64 / 128 / 256 (about 0.12M / 0.43M / 1.65M parameters) and training lengths 64 and 256,
  three seeds, each run trained until it fits (the default's LM rule, at most 6,000 steps of 1,024 bytes), one
  rate for all. Measured cost: ``OUT/scale.md`` (per cell, from the jobs' CPU time; see :func:`scale_cell`).

Each factory returns a fresh :class:`~relpos.compare.config.ExperimentConfig`, built from one object per
concern (:mod:`relpos.compare.settings`: data, model, training, tuning, evaluation); :func:`preset` replaces
some of its fields (flat names, or a whole concern: ``preset("ci", training=TrainingSettings(...))``).
"""

from __future__ import annotations

import copy

from relpos.compare.config import ALGORITHMIC, DEFAULT_SCHEMES, ExperimentConfig
from relpos.compare.fitting import FitConfig
from relpos.compare.settings import DataSettings, EvaluationSettings, ModelSettings, TrainingSettings

__all__ = ["PRESETS", "QUICK_SCHEMES", "preset", "preset_tasks", "scale_cell", "SCALE_SIZES", "SCALE_TRAIN_LENS", "SCALE_STEPS"]

#: The default preset's schemes: one per family -- no position (NoPE), absolute (sinusoidal), a learned
#: relative table (T5), fixed and learned distance biases (ALiBi; KERPLE, FIRE), rotary (RoPE, with its
#: four scalings evaluated on the same model) and content-position terms (Transformer-XL). Left to the full
#: preset, to keep the quick look near ten minutes on 2 cores: Shaw (T5's family, the costliest step), learned
#: absolute (sinusoidal's) and Sandwich (ALiBi's); their runs took 401 of the 1,511 CPU-seconds of all eleven.
QUICK_SCHEMES: tuple[str, ...] = ("nope", "sinusoidal", "t5", "alibi", "rope", "transformer-xl", "kerple-log", "fire")


#: The full preset's algorithmic problem lengths: L = 16 and 1x, 1.5x, 2x, 3x, 4x L (protocol 3; L = 8 before, so
#: "2L" was 16 symbols, where Kazemnejad et al. train at 20 and test to 40). 256 test and 256 validation examples
#: per length.
_ALGO = {"train_len": 16, "eval_lengths": [16, 24, 32, 48, 64], "n_eval": 256, "n_val": 256}
#: The default preset's quick look keeps L = 8 (1x, 1.5x, 2x, 3x, 4x L): at L = 16 NoPE did not fit copy within the
#: 4,000-step budget (validation exact match at L 0.20 after 4,000 steps, 288 CPU-seconds, seed 0, measured
#: 2026-12-02), and a budget that lets it fit does not fit the default's 15 minutes. Quote the full preset.
_ALGO_QUICK = {"train_len": 8, "eval_lengths": [8, 12, 16, 24, 32], "n_eval": 256, "n_val": 256}
#: The algorithmic recipe: batch 64, peak lr 2e-3, at most 4000 steps (early stopping ends most runs sooner).
_ALGO_TRAIN = {"steps": 4000, "batch_size": 64, "lr": 2e-3, "warmup": 100}
#: Reverse gets a longer budget (ALiBi, NoPE, Sandwich still rose at 4,000 steps); early stopping ends most sooner.
_REVERSE_TRAIN = {**_ALGO_TRAIN, "steps": 16000}


#: MQAR's recipe: batch 256 (at batch 64 the lookup formed on 1 of 2 seeds within 4,000 steps), a constant
#: rate of 1e-3 while on the plateau (a cosine decays the rate before the lookup forms), weight decay on every
#: non-position parameter (biases and norms too), and once the held-out exact match reaches 0.5 (the lookup has
#: formed) a linear cooldown over as many steps again (at most to the budget of 8,000). At 3e-3 RoPE's lookup
#: stayed noisy once formed (0.48-0.68 exact match: 12 % of answers another value of the prompt, at every
#: distance), and the cooldown did not sharpen it; at 1e-3 the same seed reached 0.99 (benchmarks/mqar_probe.py).
#: NoPE leaves the plateau far later at 1e-3 (seed 0: step 7,700, against 2,000 at 3e-3), so a run that does not
#: fit at 1e-3 may at 3e-3: every preset trains MQAR at both rates (the task's own grid, the same for every scheme)
#: and keeps the one with the better validation score at L.
_MQAR_TRAIN = {"steps": 8000, "batch_size": 256, "lr": 1e-3, "warmup": 100, "schedule": "constant", "decay": "all",
               "cooldown_at": 0.5, "cooldown": 1.0, "lr_grid": [1e-3, 3e-3]}
#: Language modelling: a constant rate until the validation loss flattens, then a cooldown of a quarter of the
#: steps so far (at most 8,000 steps: a run not flat by 6,400 cools down then and is marked not fitted).
#: The full preset (and docs/results.md) at 3e-3: flat when 5 checks (500 steps) improve the loss by < 1 %.
_LM_FIT = {"val_every": 100, "lm_patience": 5, "lm_schedule": "plateau", "lm_cooldown": 0.25}
_LM_LR = 3e-3
#: The default preset's quick look: 6e-3 and a patience of 3 checks. Measured against the full preset's rule on
#: seed 0 of five schemes: 48 % fewer LM steps (2,000-2,875 instead of 3,750-5,625), at a validation loss
#: 0.07-0.12 nats higher; 6e-3 alone (patience 5) cost 14 % fewer steps at the same loss (RoPE, NoPE).
_LM_FIT_QUICK = {**_LM_FIT, "lm_patience": 3}
_LM_LR_QUICK = 6e-3


def _algo_train(tasks) -> dict:
    """The per-task recipes of the default and full presets."""
    out = {t: dict(_ALGO_TRAIN) for t in tasks}
    out["reverse"] = dict(_REVERSE_TRAIN)
    out["parity"] = {**_ALGO_TRAIN, "steps": 1000}
    out["mqar"] = dict(_MQAR_TRAIN)
    return out


#: Task options shared by the default and full presets. MQAR is the one task below L = 16: it trains at exactly
#: 4 pairs (16 prompt-and-answer tokens; at 8 pairs no scheme left the plateau within the budget) (L = 4; evaluated at 4, 6, 8, 12, 16 pairs: 1x..4x L, as the
#: other tasks), the value before its key, queries drawn with replacement (no answer by elimination):
#: the 2-layer lookup forms there within the budget; at 8 pairs, in the Zoology order, it did not.
_TASK_OPTIONS = {"copy": {"alphabet": 8}, "reverse": {"alphabet": 8}, "copy-hints": {"alphabet": 8},
                 "mqar": {"n_keys": 64, "n_values": 16, "train_len": 4, "min_len": 4, "eval_lengths": [4, 6, 8, 12, 16],
                          "order": "value-key", "queries": "random"}}
#: At the default's L = 8 parity has 256 strings, too few for disjoint validation and test splits: it trains at 12.
_TASK_OPTIONS_QUICK = {**_TASK_OPTIONS, "parity": {"train_len": 12, "eval_lengths": [12, 18, 24, 36, 48]}}

#: Per-task model overrides (the same for every scheme): MQAR's model has 3 layers (with MLPs) and PyTorch's
#: fan-in initialisation. A recall answer chains a positional step (write each key's neighbour into it) and a
#: content step (match the query); NoPE must first derive positions from the causal mask, a third step. With 2
#: layers NoPE never left its plateau (2-4 attention-only layers, up to 20,000 steps); with 3 layers and MLPs it
#: did within 2,000 steps (benchmarks/mqar_probe.py, seed 0), and so did RoPE.
_TASK_MODEL = {"mqar": {"n_layers": 3, "init": "fan_in"}}


def _ci() -> ExperimentConfig:
    return ExperimentConfig.from_parts(
        preset="ci",
        tasks=["lm", "copy"],
        data=DataSettings(
            lm={"train_len": 32, "eval_factors": [1, 2, 4], "eval_tokens": 2048, "train_bytes": 1_000_000,
                "n_val": 8},
            algorithmic={"train_len": 6, "eval_factors": [1, 2, 3], "n_eval": 32, "n_val": 64},
            task_options={"copy": {"alphabet": 8}},
        ),
        model=ModelSettings(d_model=32, n_layers=2, n_heads=2),
        training=TrainingSettings(steps=100, batch_size=8, lr=3e-3, warmup=10,
                                  task_train={"copy": {"steps": 200, "batch_size": 16, "lr": 3e-3}}),
        tuning=FitConfig(val_every=50),
    )


def _default() -> ExperimentConfig:
    return ExperimentConfig.from_parts(
        preset="default",
        schemes=list(QUICK_SCHEMES),
        tasks=["lm", "copy"],
        data=DataSettings(
            lm={"train_len": 64, "eval_factors": [1, 2, 4, 8, 16], "eval_tokens": 32768, "blocks": 64},
            algorithmic=copy.deepcopy(_ALGO_QUICK),
            task_options=copy.deepcopy(_TASK_OPTIONS_QUICK),
        ),
        model=ModelSettings(d_model=64, n_layers=2, n_heads=4, task_model=copy.deepcopy(_TASK_MODEL)),
        training=TrainingSettings(
            steps=8000,  # language modelling (an upper bound: see _LM_FIT)
            batch_size=16,
            lr=_LM_LR_QUICK,  # language modelling; every algorithmic task has its own recipe below
            warmup=50,
            # every algorithmic task gets the algorithmic recipe, so `--tasks reverse,mqar` (or more seeds) can
            # be added to a default folder: the fingerprint covers them already
            task_train=_algo_train(ALGORITHMIC),
            # randomized positions (--randomized; the full preset's RoPE) from [0, 4 x the longest evaluated
            # sequence)
            random_positions_factor=4,
        ),
        tuning=FitConfig(**_LM_FIT_QUICK),
        evaluation=EvaluationSettings(),  # the four RoPE scalings on the RoPE model; no passkey
    )


#: The full preset's reverse budget (16,000 before protocol 3: one try; now two tries per job).
_FULL_REVERSE_STEPS = 8000
#: The full preset's MQAR budget (8,000 before: MQAR was 62 % of the full preset's CPU time, mostly tries that
#: never left the plateau running to the end). NoPE formed the lookup by step 2,000 at 3e-3 (then a cooldown of
#: as many steps: 4,000); at 1e-3 by 7,700, so with both rates always tried it keeps its 3e-3 try.
_FULL_MQAR_STEPS = 4000
#: The full preset's parity budget (1,000 before 2026-12-04, as the default preset's recipe still has: 1 of 36
#: runs fitted, so no scheme was ranked and Deletang et al.'s parity claim went unmeasured). At 8,000, ALiBi and
#: RoPE (seed 0, 1e-3) fitted within 2,900 and 4,900 steps (validation exact match at L 1.00 and 0.98; early
#: stopping ended them) in 70 and 110 CPU-seconds on the shared 2-core host.
_FULL_PARITY_STEPS = 8000
#: The full preset's learning-rate grid on every algorithmic task (equal for every scheme). Three rates, as
#: language modelling has, cost about 57 CPU-hours in all, measured on the first 36 LM and 3 copy jobs of
#: 2026-12-03: every copy try ran its whole 4,000-step budget or nearly (about 650 CPU-seconds a job of three
#: tries), so early stopping saves little; two rates that bracket the old single rate (2e-3) cost two thirds.
_FULL_ALGO_GRID = (1e-3, 3e-3)
#: The full preset's budgets of the tasks that stopped before they fitted under protocol 3 (copy and copy-distinct
#: at 4,000 steps: every unfitted job ran its whole budget and 26 were still rising; MQAR at 4,000: 65 of 72 tries
#: hit the cap, its lookup first reaching 0.5 validation exact match at steps 1,600-4,000). Reverse keeps 8,000.
_FULL_RERUN_STEPS = {"copy": 6000, "copy-distinct": 6000, "mqar": 6000}
#: MQAR's attention heads in the full preset (None: the shared 4 heads of 16 dimensions; Zoology's MQAR uses one
#: head of 64). Set from the shape probe (benchmarks/mqar_shape_probe.sh) before the rerun.
_FULL_MQAR_HEADS: int | None = None
#: The full preset's in-training validation: 1,024 examples per algorithmic task (512 at L: the gate read 128),
#: and 512 language-modelling windows of 64 bytes (32 KB: the rate choice and the flatness gate read 2 KB).
_FULL_ALGO_VAL = 1024
_FULL_LM_VAL = 512
#: The full preset's algorithmic tasks. ``copy-hints`` (copy with the answer's position marked: twice the
#: tokens, the costliest copy variant) is left to ``--tasks``: with it, four of seven ranked tasks were copy
#: variants (a ranking fragility the protocol-3 review named) and it would cost about 7 CPU-hours more.
FULL_ALGORITHMIC: tuple[str, ...] = ("copy", "copy-distinct", "reverse", "parity", "mqar")


def _full() -> ExperimentConfig:
    """The default preset's model and task recipes on every task, 3 seeds, a learning-rate grid, randomized
    RoPE, and language models trained to the stricter plateau rule."""
    cfg = _default()
    cfg.preset, cfg.tasks, cfg.seeds, cfg.randomized = "full", ["lm", *FULL_ALGORITHMIC], [0, 1, 2], ["rope"]
    cfg.schemes = list(DEFAULT_SCHEMES)
    cfg.training.lr = _LM_LR
    cfg.data.algorithmic, cfg.data.task_options = copy.deepcopy(_ALGO), copy.deepcopy(_TASK_OPTIONS)
    # the equal grid: every scheme trains at every rate of its task's grid and keeps the best by validation:
    # language modelling 2e-3, 1e-3 and 3e-3; every algorithmic task 1e-3 and 3e-3 (MQAR's own two); the
    # budgets that pay for it (see the module docstring's measured costs)
    cfg.tuning = FitConfig(**_LM_FIT, lr_grid=[2e-3, 1e-3, 3e-3])
    for t in ALGORITHMIC:
        cfg.training.task_train[t]["lr_grid"] = list(_FULL_ALGO_GRID)
    cfg.training.task_train["reverse"]["steps"] = _FULL_REVERSE_STEPS
    cfg.training.task_train["mqar"]["steps"] = _FULL_MQAR_STEPS
    cfg.training.task_train["parity"]["steps"] = _FULL_PARITY_STEPS
    # protocol 3, second pass: runs that fit (longer budgets), a gate that keeps the best check's model and
    # reads a larger validation set. The finished language-modelling and parity runs of the first pass train
    # the same and differ only in their validation: `relpos compare --preset full --reuse OLD
    # --reuse-validated-before lm,parity` copies them, each recording the difference (docs/results.md names it)
    for t, n in _FULL_RERUN_STEPS.items():
        cfg.training.task_train[t]["steps"] = n
    cfg.tuning.keep_best = True
    cfg.data.algorithmic = {**cfg.data.algorithmic, "n_val": _FULL_ALGO_VAL}
    cfg.data.lm = {**cfg.data.lm, "n_val": _FULL_LM_VAL}
    if _FULL_MQAR_HEADS is not None:
        cfg.model.task_model = {**cfg.model.task_model, "mqar": {**cfg.model.task_model["mqar"],
                                                                  "n_heads": _FULL_MQAR_HEADS}}
    return cfg


#: The scale check's cells: (d_model, LM training length in bytes). Two layers and four heads throughout:
#: d_model 64 / 128 / 256 give about 0.12M / 0.43M / 1.65M parameters.
SCALE_SIZES = (64, 128, 256)
SCALE_TRAIN_LENS = (64, 256)
#: Bytes per training step in every cell (batch 16 x 64 bytes, or 4 x 256): the same tokens per step everywhere.
_SCALE_TOKENS = 1024
#: The most training steps of a scale run. Every run trains until it fits, by the default preset's language-modelling
#: rule (a constant rate until the validation loss flattens -- 3 checks, 300 steps, improve it by < 1 % -- then a
#: cooldown of a quarter of the steps so far); a run not flat by 4,800 steps cools down then and is marked not
#: fitted. (A fixed budget of 1,000 cosine steps, tried first on 2026-12-02, left all 24 runs of the smallest
#: cell unfitted: validation loss about 2.0 nats and still falling, against 1.1-1.5 for fitted default runs.)
SCALE_STEPS = 6000


def scale_cell(d_model: int = 64, train_len: int = 64) -> ExperimentConfig:
    """One cell of the ``scale`` preset: the default preset's eight schemes on language modelling only, three
    seeds, at one model width and one training length (see :mod:`relpos.compare.scale`).

    Cost, measured (protocol 3, 2026-12-02, on the shared 2-core host): the smallest cell (d_model 64, 64-byte
    windows) took 0.48 CPU-hours for its 24 runs, all fitted after 1,125-3,875 steps. A training step costs
    about 2x at d_model 128 and 4-5x at 256 (0.06 / 0.13 / 0.28 CPU-seconds per step measured under load), so
    the six cells come to an estimated 6-8 CPU-hours; ``OUT/scale.md`` states each cell's measured CPU time.
    """
    cfg = _default()
    cfg.preset = "scale"
    cfg.tasks, cfg.seeds, cfg.randomized = ["lm"], [0, 1, 2], []
    cfg.evaluation.rope_variants = []
    cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads = int(d_model), 2, 4
    t = cfg.training
    t.steps, t.batch_size, t.lr, t.warmup = SCALE_STEPS, _SCALE_TOKENS // int(train_len), _LM_LR, 50
    cfg.data.lm = {"train_len": int(train_len), "eval_factors": [1, 2, 4, 8], "eval_tokens": 16384}
    # one rate for every scheme and size (an equal grid of one; stated in the scale report); trained until it
    # fits by the default preset's LM rule (see SCALE_STEPS)
    cfg.tuning = FitConfig(**_LM_FIT_QUICK)
    return cfg


def _scale() -> ExperimentConfig:
    return scale_cell(SCALE_SIZES[0], SCALE_TRAIN_LENS[0])


#: preset name -> factory (a fresh config each call). ``scale`` gives its first cell; ``relpos compare --preset
#: scale`` runs every cell (:func:`relpos.compare.scale.run_scale`).
PRESETS = {"default": _default, "ci": _ci, "full": _full, "scale": _scale}


def preset(name: str, **overrides) -> ExperimentConfig:
    """A preset with some fields replaced (not yet validated)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    cfg = PRESETS[name]()
    for k, v in overrides.items():
        if not hasattr(cfg, k):
            raise ValueError(f"unknown configuration key {k!r}")
        setattr(cfg, k, v)
    return cfg


def preset_tasks(name: str | None) -> set[str]:
    """The tasks a named preset runs; empty for a name that is not a preset. A folder filled task by task
    (``--tasks``) records only its own tasks, so pages compare against this."""
    return set(PRESETS[name]().tasks) if name in PRESETS else set()
