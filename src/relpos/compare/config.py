"""Configuration of a ``relpos compare`` sweep: fields, validation, fingerprint.

A sweep is the product of *what to run* (schemes, tasks, seeds, which schemes to
also train with randomized positions) and *how each run is done* (model size,
training, task and evaluation settings, RoPE scalings). The second part alone
defines the **fingerprint**: two invocations with the same fingerprint produce
comparable runs, so they may share an output folder (a later invocation skips
what is done and adds what is new); a different fingerprint in the same folder is
an error. Execution settings (workers, threads, runner) change neither. Within the fingerprinted part, the
evaluation settings (:data:`EVALUATION_KEYS`: the RoPE scalings and passkey retrieval) change only what is
measured on a trained model: a finished folder takes new ones by evaluating its saved models, without
training again (:mod:`relpos.compare.additions`).

The named presets (``default``, ``ci``, ``full``) are in :mod:`relpos.compare.presets`.

Every preset is fair to every scheme in the same way: token embeddings of
absolute-position models are scaled by sqrt(d_model) (``embed_scale="auto"``), so
position tables of amplitude 1 do not swamp them, while relative schemes keep
the unscaled embeddings they are trained with (a sqrt(d) residual stream slowed
RoPE and NoPE on copy: 0.82 and 0.73 exact match at L after 4000 steps); learned position ranges are set from the
training length (``scheme_ranges="train_len"``: T5 ``max_distance``, Shaw ``k``,
FIRE ``init_L`` equal the training sequence length, through each scheme's
``options_for_length``); ``scheme_ranges="paper"`` keeps the papers' defaults.
ALiBi keeps the paper's slopes, which depend on the head count only.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path

from relpos.compare.checks import _check_task_lr_grid, _int_list, _positive_int
from relpos.encodings import normalise_name
from relpos.compare.fitting import FitConfig
from relpos.compare.settings import EVALUATION_KEYS, ROPE_VARIANTS, ConcernsMixin, split_protocol

__all__ = [
    "ExperimentConfig",
    "read_saved_config",
    "DEFAULT_SCHEMES",
    "ROPE_VARIANTS",
    "PROTOCOL_VERSION",
    "ALGORITHMIC",
    "ALL_TASKS",
    "MODEL_KEYS",
    "EVALUATION_KEYS",
    "config_diff",
    "fingerprint_of",
]

#: Bumped whenever measurements change meaning (enters the fingerprint).
#: 2: early stopping and the fit gate, held-out examples, MQAR, copy variants,
#: embedding scale, length-relative scheme ranges, sampled-position evaluation.
#: 3: every rate of the grid is tried and the rate chosen by validation (the gate reads validation too),
#: validation and test examples disjoint, balanced parity labels, per-example scores.
PROTOCOL_VERSION = 3

#: The benchmark's schemes: the full and ci presets, and a bare ExperimentConfig (the default preset's
#: quick look runs eight of them, see relpos.compare.presets).
DEFAULT_SCHEMES: tuple[str, ...] = (
    "nope",
    "sinusoidal",
    "learned",
    "shaw",
    "t5",
    "alibi",
    "rope",
    "transformer-xl",
    "kerple-log",
    "fire",
    "sandwich",
)

#: Longest sequence (tokens) a sweep evaluates: beyond it the evaluation of even the small
#: models outgrows a laptop's memory (a learned table row per position, (N, V) logits per row).
MAX_EVAL_TOKENS = 1 << 15

ALGORITHMIC = ("copy", "copy-hints", "copy-distinct", "reverse", "mqar", "parity")
ALL_TASKS = ("lm",) + ALGORITHMIC

#: Model settings a task may override (``task_model``); the rest of the model is shared.
MODEL_KEYS = ("d_model", "n_layers", "n_heads", "d_ff", "init")


@dataclasses.dataclass
class ExperimentConfig(ConcernsMixin):
    """Everything a sweep needs. See the module docstring.

    The fields are flat (the command line, ``config.json`` and the fingerprint use them); each concern is also
    one typed object (:mod:`relpos.compare.settings`): ``cfg.data``, ``cfg.model``, ``cfg.training``,
    ``cfg.tuning`` (``fit``) and ``cfg.evaluation``, views that read and write these fields, and
    :meth:`from_parts` builds a configuration from them.

    Attributes:
        preset: name of the preset this came from (informational).
        schemes: registry names of the schemes to train.
        tasks: task names (:data:`ALL_TASKS`).
        seeds: training seeds; each (scheme, task, seed) is one run.
        randomized: schemes also trained with randomized positions
            (Ruoss et al. 2023); each gives a run with variant ``"randomized"``.
        d_model, n_layers, n_heads: model size (the same for every scheme).
        steps, batch_size, lr, warmup, weight_decay: training, shared by all tasks
            unless ``task_train`` overrides them for a task.
        task_train: per-task training overrides, e.g. ``{"reverse": {"steps": 16000}}``; besides the
            fields above, ``"schedule"``: ``"cosine"`` (the default) or ``"constant"`` (an
            algorithmic task; early stopping ends it), ``"decay"``: ``"matrices"`` (the
            default) or ``"all"`` (weight decay on biases and norms too), and, with a constant
            rate, ``"cooldown_at"`` (validation exact match in (0, 1] at which a linear cooldown
            starts) and ``"cooldown"`` (its length as a fraction of the steps before it, default 0.5);
            ``"lr_grid"``: the learning rates every job of the task trains at (all of them, the same for
            every scheme), in place of ``fit.lr_grid`` (see :func:`relpos.compare.fitting.lr_tries`).
        lm: options of :class:`relpos.tasks.LanguageModelling` (``train_len``,
            ``eval_factors``, ``eval_tokens``, ``train_bytes``, ...).
        algorithmic: options shared by the algorithmic tasks (``train_len``,
            ``eval_factors``, ``n_eval``, ...).
        task_options: extra per-task options (e.g. ``{"copy": {"alphabet": 8}}``).
        task_model: per-task model overrides (:data:`MODEL_KEYS`), the same for every
            scheme of the task, e.g. ``{"mqar": {"d_ff": 0, "init": "fan_in"}}``.
        rope_variants: RoPE scalings evaluated on the trained RoPE model
            (keys of :data:`ROPE_VARIANTS`).
        random_positions_factor: randomized runs draw their training positions
            from ``[0, factor * longest evaluation sequence)`` (Ruoss et al. draw
            from a range at least as long as the longest test sequence).
        scheme_options: per-scheme encoding options, e.g. ``{"shaw": {"k": 16}}``.
        fit: validation, early stopping, the fit gate and the learning-rate
            grid (:class:`~relpos.compare.fitting.FitConfig`).
        embed_scale: token-embedding scale (``"auto"``: sqrt(d_model) for schemes
            that add positions to the embeddings, none for the others, as each
            family's papers train them; or ``"sqrt_d"`` / ``"none"`` for every
            model; see :class:`relpos.model.ModelConfig`).
        scheme_ranges: ``"train_len"`` sets each scheme's learned range from
            the training length (its ``options_for_length``); ``"paper"``
            keeps the paper defaults. Explicit ``scheme_options`` win.
        passkey: passkey retrieval on the language models (options of
            :class:`relpos.tasks.passkey.Passkey`, e.g. ``{"n": 10}``; ``{}``: off).
        workers, threads: processes and threads per process (execution only).
        models_dir: where each job saves its trained model as a checkpoint
            (``<models_dir>/<task>/<scheme>[+rand]/seed<k>/``); None keeps none
            (execution only: ``relpos compare`` sets ``OUT/models`` unless
            ``--no-keep-models``).
        resume_dir: where each job's training tries keep checkpoints while they run, so that an interrupted
            sweep resumes inside a job (:mod:`relpos.compare.inflight`); None keeps none (execution only:
            ``relpos compare`` sets ``OUT/inflight``).
    """

    preset: str = "default"
    schemes: list[str] = dataclasses.field(default_factory=lambda: list(DEFAULT_SCHEMES))
    tasks: list[str] = dataclasses.field(default_factory=lambda: ["lm", "copy"])
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    randomized: list[str] = dataclasses.field(default_factory=list)
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    steps: int = 200
    batch_size: int = 16
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.1
    task_train: dict = dataclasses.field(default_factory=dict)
    lm: dict = dataclasses.field(default_factory=lambda: {"train_len": 64, "eval_factors": [1, 2, 4, 8, 16]})
    algorithmic: dict = dataclasses.field(default_factory=lambda: {"train_len": 16, "eval_factors": [1, 2, 3, 4]})
    task_options: dict = dataclasses.field(default_factory=dict)
    task_model: dict = dataclasses.field(default_factory=dict)
    rope_variants: list[str] = dataclasses.field(default_factory=lambda: list(ROPE_VARIANTS))
    random_positions_factor: int = 1
    scheme_options: dict = dataclasses.field(default_factory=dict)
    fit: FitConfig = dataclasses.field(default_factory=FitConfig)
    embed_scale: str = "auto"
    scheme_ranges: str = "train_len"
    workers: int = 2
    threads: int = 1
    models_dir: str | None = None
    resume_dir: str | None = None
    passkey: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.fit, dict):
            self.fit = FitConfig(**self.fit)
        elif not isinstance(self.fit, FitConfig):
            raise TypeError(f"fit must be a FitConfig or a dict of its fields, got {type(self.fit).__name__}")

    # ------------------------------------------------------------ validation
    def validate(self) -> "ExperimentConfig":
        """Check every field; normalise names. Returns self.

        Raises:
            ValueError: unknown scheme/task/variant names, lengths not above
                zero, sizes out of range (the message names the setting).
            TypeError: a setting of the wrong type.
        """
        from relpos.encodings import SCHEMES, scheme_names
        from relpos.tasks import ALIASES, TASKS

        available = scheme_names()
        if not self.schemes:
            raise ValueError("schemes must not be empty")
        norm = []
        for s in self.schemes:
            k = normalise_name(s)
            if k not in SCHEMES:
                raise ValueError(f"unknown scheme {s!r}; known schemes: {', '.join(available)}")
            if k not in norm:
                norm.append(k)
        self.schemes = norm
        rnd = []
        for s in self.randomized:
            k = normalise_name(s)
            if k not in SCHEMES or k not in available:
                raise ValueError(f"unknown scheme {s!r} in randomized; known schemes: {', '.join(available)}")
            if k not in rnd:
                rnd.append(k)
        self.randomized = rnd
        if not self.tasks:
            raise ValueError("tasks must not be empty")
        tasks = []
        for t in self.tasks:
            k = t.strip().lower().replace("_", "-") if isinstance(t, str) else t
            k = ALIASES.get(k, k)
            if k not in TASKS:
                raise ValueError(f"unknown task {t!r}; known tasks: {', '.join(TASKS)}")
            if k not in tasks:
                tasks.append(k)
        self.tasks = tasks
        self.seeds = sorted(set(_int_list("seeds", self.seeds, lo=0, what="training seeds are integers from 0 up")))
        for name in ("d_model", "n_layers", "n_heads", "steps", "batch_size", "workers", "threads",
                     "random_positions_factor"):
            _positive_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.embed_scale not in ("auto", "sqrt_d", "none"):
            raise ValueError(f"embed_scale must be 'auto', 'sqrt_d' or 'none', got {self.embed_scale!r}")
        if self.scheme_ranges not in ("train_len", "paper"):
            raise ValueError(f"scheme_ranges must be 'train_len' or 'paper', got {self.scheme_ranges!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be an int >= 0, got {self.warmup!r}")
        for name in ("lr", "weight_decay"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or (name == "lr" and v == 0):
                raise ValueError(f"{name} must be a number {'> 0' if name == 'lr' else '>= 0'}, got {v!r}")
        for t, over in self.task_train.items():
            if t not in TASKS:
                raise ValueError(f"unknown task {t!r} in task_train; known tasks: {', '.join(TASKS)}")
            bad = set(over) - {"steps", "batch_size", "lr", "warmup", "weight_decay", "schedule", "decay",
                               "cooldown_at", "cooldown", "lr_grid"}
            if bad:
                raise ValueError(f"task_train[{t!r}] has unknown keys {sorted(bad)}")
            if "lr_grid" in over:
                _check_task_lr_grid(t, over["lr_grid"])
            for key in ("cooldown_at", "cooldown"):
                v = over.get(key, 0.5)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                    raise ValueError(f"task_train[{t!r}][{key!r}] must be a number in (0, 1], got {v!r}")
            if "cooldown_at" in over and (t == "lm" or over.get("schedule") != "constant"):
                raise ValueError(f"task_train[{t!r}]['cooldown_at'] needs an algorithmic task with "
                                 "schedule 'constant'")
            for key, choices in (("schedule", ("cosine", "constant")), ("decay", ("matrices", "all"))):
                if over.get(key, choices[0]) not in choices:
                    raise ValueError(f"task_train[{t!r}][{key!r}] must be {' or '.join(map(repr, choices))}, "
                                     f"got {over[key]!r}")
        for t in self.task_options:
            if t not in TASKS:
                raise ValueError(f"unknown task {t!r} in task_options; known tasks: {', '.join(TASKS)}")
        self._validate_task_model(TASKS)
        for v in self.rope_variants:
            if v not in ROPE_VARIANTS:
                raise ValueError(f"unknown RoPE variant {v!r}; known: {', '.join(ROPE_VARIANTS)}")
        if not isinstance(self.passkey, dict):
            raise TypeError(f"passkey must be a dict of passkey options (e.g. {{'n': 10}}), got {self.passkey!r}")
        if self.passkey:
            from relpos.tasks.passkey import Passkey

            try:  # its own checks name the option and its range
                Passkey([1 << 20], **self.passkey)
            except (TypeError, ValueError) as e:
                raise type(e)(f"passkey: {e}") from None
        from relpos.encodings import make_encoding

        sizes = {(m["d_model"], m["n_heads"]) for m in map(self.model_settings, self.tasks)}
        for s in dict.fromkeys(self.schemes + self.randomized):
            if s in self.scheme_options:
                continue
            for d_model, n_heads in sorted(sizes):
                try:  # each scheme states what it needs (e.g. an even head dimension for rotary schemes)
                    make_encoding(s, n_heads=n_heads, head_dim=d_model // n_heads, d_model=d_model, max_len=8)
                except (TypeError, ValueError) as e:
                    raise type(e)(f"scheme {s!r} cannot run with d_model={d_model}, n_heads={n_heads}: {e}") \
                        from None
        for s, opts in self.scheme_options.items():
            if normalise_name(s) not in SCHEMES:
                raise ValueError(f"unknown scheme {s!r} in scheme_options")
            if not isinstance(opts, dict):
                raise TypeError(f"scheme_options[{s!r}] must be a dict of options, got {opts!r}")
            try:  # build it once, small, so bad options fail here and not inside a worker
                make_encoding(s, n_heads=self.n_heads, head_dim=self.d_model // self.n_heads, d_model=self.d_model,
                              max_len=8, **opts)
            except (TypeError, ValueError) as e:
                raise type(e)(f"scheme_options[{s!r}]: {e}") from None
        _positive_int("lm.train_len", self.lm.get("train_len"))
        _positive_int("algorithmic.train_len", self.algorithmic.get("train_len"))
        for sect in (self.lm, self.algorithmic):
            if "eval_factors" in sect:
                _int_list("eval factors", sect["eval_factors"])
            if "eval_lengths" in sect and sect["eval_lengths"] is not None:
                _int_list("evaluation lengths", sect["eval_lengths"])
        # Building every selected task checks its own options (and catches typos in them).
        from relpos.corpus.cache_only import CorpusNotCached
        from relpos.tasks import make_task

        for t in self.tasks:
            try:
                task = self.make_task(t)
            except CorpusNotCached:  # a dry run: the corpus is read at run time; its options are checked alone
                task = make_task(t, **{k: v for k, v in self.task_kwargs(t).items() if k != "corpus"})
            longest = task.max_seq_len()
            if longest > MAX_EVAL_TOKENS:
                raise ValueError(
                    f"{t}: the longest evaluated sequence would be {longest} tokens; relpos compare accepts at most "
                    f"{MAX_EVAL_TOKENS} (memory: learned tables, evaluation batches and attention maps grow with it). "
                    "Choose smaller evaluation lengths (--eval-lengths / --task-eval-lengths)."
                )
        return self

    def _validate_task_model(self, tasks) -> None:
        from relpos.model import ModelConfig

        for t, over in self.task_model.items():
            if t not in tasks:
                raise ValueError(f"unknown task {t!r} in task_model; known tasks: {', '.join(tasks)}")
            if not isinstance(over, dict) or set(over) - set(MODEL_KEYS):
                raise ValueError(f"task_model[{t!r}] must be a dict with keys among {', '.join(MODEL_KEYS)}, "
                                 f"got {over!r}")
            try:  # the model's own checks name the setting and its range
                ModelConfig(vocab_size=2, scheme="nope", **self.model_settings(t))
            except (TypeError, ValueError) as e:
                raise type(e)(f"task_model[{t!r}]: {e}") from None

    # -------------------------------------------------------------- derived
    def model_settings(self, task: str) -> dict:
        """Model size of one task: the shared ``d_model``, ``n_layers``, ``n_heads`` (MLP width 4 d_model,
        GPT-2 initialisation) plus the task's ``task_model`` overrides."""
        out = {"d_model": self.d_model, "n_layers": self.n_layers, "n_heads": self.n_heads, "d_ff": None,
               "init": "gpt2"}
        out.update(self.task_model.get(task, {}))
        return out

    def lr_grid(self, task: str) -> list[float]:
        """The learning-rate grid of ``task``, the same for every scheme: the task's own grid
        (``task_train``), else ``fit.lr_grid``; ``[]`` means the task's one rate. Every job tries every
        rate of it (:func:`relpos.compare.fitting.lr_tries`), language modelling included."""
        return list(self.train_settings(task).get("lr_grid", self.fit.lr_grid))

    def lr_tries(self, task: str) -> list[float]:
        """The rates every job of ``task`` trains at, in order (all of them run; see
        :func:`relpos.compare.fitting.choose_try`)."""
        from relpos.compare.fitting import lr_tries

        return lr_tries(self.lr_grid(task), self.train_settings(task)["lr"])

    def train_settings(self, task: str) -> dict:
        """Training settings for one task (shared values plus its overrides)."""
        out = {
            "steps": self.steps,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "warmup": self.warmup,
            "weight_decay": self.weight_decay,
        }
        out.update(self.task_train.get(task, {}))
        out["warmup"] = min(out["warmup"], max(out["steps"] - 1, 0))
        return out

    def task_kwargs(self, task: str) -> dict:
        """Constructor options of a task, resolved from the sections above."""
        sect = dict(self.lm if task == "lm" else self.algorithmic)
        factors = sect.pop("eval_factors", None)
        if sect.get("eval_lengths") is None:
            sect.pop("eval_lengths", None)
            if factors is not None:
                sect["eval_lengths"] = [sect["train_len"] * f for f in factors]
        extra = dict(self.task_options.get(task, {}))
        if task != "lm":
            # options meant for one algorithmic task only
            for k in ("alphabet", "n_keys", "n_values", "n_hints"):
                sect.pop(k, None)
        sect.update(extra)
        return sect

    def make_task(self, task: str):
        from relpos.tasks import make_task

        kw = self.task_kwargs(task)
        spec = kw.pop("corpus", None)
        if task == "lm" and spec:  # a user's corpus: same protocols, other text
            from relpos.corpus.lm import CorpusLanguageModelling

            return CorpusLanguageModelling.from_spec(spec, **kw)
        return make_task(task, **kw)

    def _task_options(self, task: str) -> dict:
        """A task's options for the fingerprint; a task these settings cannot build (and that is
        not selected, or validation would have failed) is recorded by its error."""
        try:
            return self.make_task(task).options()
        except (TypeError, ValueError) as e:
            return {"unavailable": str(e)}

    def protocol(self) -> dict:
        """The fingerprinted part: everything that changes what a run measures."""
        return {
            "protocol_version": PROTOCOL_VERSION,
            "model": {"d_model": self.d_model, "n_layers": self.n_layers, "n_heads": self.n_heads},
            "train": {t: self.train_settings(t) for t in ALL_TASKS},
            "tasks": {t: self._task_options(t) for t in ALL_TASKS},
            "rope_variants": sorted(self.rope_variants),
            "random_positions_factor": self.random_positions_factor,
            "scheme_options": {normalise_name(k): v for k, v in sorted(self.scheme_options.items())},
            # keep_best only when set, so that folders from before it keep their fingerprints
            "fit": {k: v for k, v in dataclasses.asdict(self.fit).items() if k != "keep_best" or v},
            "embed_scale": self.embed_scale,
            "scheme_ranges": self.scheme_ranges,
            **({"passkey": self.passkey} if self.passkey else {}),
            # only when set, so that folders from before task_model keep their fingerprints
            **({"task_model": {t: self.model_settings(t) for t in sorted(self.task_model)}} if self.task_model else {}),
        }

    def fingerprint(self) -> str:
        """16 hex digits identifying :meth:`protocol`."""
        return fingerprint_of(self.protocol())

    def training_protocol(self) -> dict:
        """The part of :meth:`protocol` that decides how every model is trained (all of it but
        :data:`EVALUATION_KEYS`): equal training parts train equal models."""
        return split_protocol(self.protocol())[0]

    def to_dict(self) -> dict:
        d = copy.deepcopy(dataclasses.asdict(self))
        if not d["fit"].get("keep_best"):  # as the fingerprint: config.json of folders from before it unchanged
            d["fit"].pop("keep_best", None)
        if d["resume_dir"] is None:  # likewise (execution only)
            d.pop("resume_dir")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ExperimentConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown configuration keys {sorted(unknown)}")
        return cls(**copy.deepcopy(d))

    def replace(self, **changes) -> "ExperimentConfig":
        d = self.to_dict()
        d.update(changes)
        return ExperimentConfig.from_dict(d)


def read_saved_config(path) -> tuple[ExperimentConfig, str]:
    """``(config, fingerprint)`` of a compare folder's ``config.json`` (what :meth:`ExperimentConfig.to_dict`
    wrote there, with its fingerprint and protocol beside it)."""
    saved = json.loads(Path(path).read_text())
    fp = saved.pop("fingerprint")
    saved.pop("protocol", None)
    return ExperimentConfig.from_dict(saved), fp


def fingerprint_of(protocol: dict) -> str:
    """The fingerprint of a protocol dict (:meth:`ExperimentConfig.fingerprint`)."""
    blob = json.dumps(protocol, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Human-readable differences between two nested dicts (``key: old -> new``)."""
    out = []
    for k in sorted(set(a) | set(b), key=str):
        p = f"{prefix}{k}"
        if k not in a:
            out.append(f"{p}: (absent) -> {b[k]!r}")
        elif k not in b:
            out.append(f"{p}: {a[k]!r} -> (absent)")
        elif isinstance(a[k], dict) and isinstance(b[k], dict):
            out += config_diff(a[k], b[k], p + ".")
        elif a[k] != b[k]:
            out.append(f"{p}: {a[k]!r} -> {b[k]!r}")
    return out
