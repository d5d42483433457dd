"""Training as a function: AdamW, schedules (:mod:`relpos.training.schedule`), clipping, accumulation, checkpoints, DDP.

:func:`train` builds a :class:`~relpos.model.TransformerLM` from a
:class:`~relpos.model.ModelConfig` (after ``torch.manual_seed(seed)``) and
optimises it on a batch source (see :mod:`relpos.data`). The same function runs
in one process or under ``torchrun`` (DistributedDataParallel, gloo on CPU, nccl
on GPU): every process reads the same *global* micro-batch and keeps rows
``rank::world_size``.

Exactness:

* the loss of a step is the mean over every counted target token of the step
  (all micro-batches, all processes), so gradient accumulation and data
  parallelism give the gradient of the whole global batch, whatever the split;
* batches are a function of ``(step, micro)`` and the random state used by a
  micro-batch (dropout, randomized positions) is reseeded from
  ``(seed, step, micro, rank)``, so a fixed seed gives the same loss curve twice
  and ``resume`` continues exactly where the checkpoint left off.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from relpos.training import distributed as D
from relpos.training.denormals import flushed
from relpos.attention import NonFiniteError
from relpos.data import IGNORE_INDEX, ByteLMSource
from relpos.model import ModelConfig, TransformerLM
from relpos.training.schedule import Cooldown, lr_at
from relpos.training.config import StepInfo, TrainConfig, TrainingDivergedError, TrainResult
from relpos.training.state import check_train_state, optimizer_tensors, restore_optimizer
from relpos.validation import check_int

__all__ = ["TrainConfig", "TrainResult", "StepInfo", "Trainer", "TrainingDivergedError", "train", "lr_at",
           "evaluate_loss"]


def _derived_seed(*parts: int) -> int:
    h = hashlib.sha256(("relpos-train:" + ":".join(str(p) for p in parts)).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def _seed_micro(device: torch.device, seed: int) -> None:
    """Seed the random state a micro-batch uses (dropout, randomized positions) on ``device``.

    On a CPU device only the CPU generator is used, so only it is seeded: ``torch.manual_seed`` also queues
    a seed for every lazily initialised accelerator, formatting a stack trace each time (about 0.4 ms per
    call, several per cent of a small model's step). The CPU generator ends in the same state either way.
    """
    if device.type == "cpu":
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def _check_batch(x, y, world: int) -> None:
    if not isinstance(x, Tensor) or not isinstance(y, Tensor):
        raise TypeError("a batch source must return (x, y) tensors")
    if x.dim() != 2 or x.shape != y.shape:
        raise ValueError(f"batch x and y must both be (B, N); got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.dtype.is_floating_point or y.dtype.is_floating_point:
        raise TypeError(f"batch x and y must be integer tensors, got {x.dtype} and {y.dtype}")
    if x.shape[0] < world:
        raise ValueError(f"a micro-batch has {x.shape[0]} rows but there are {world} processes; "
                         f"batch_size must be >= world size")


def _param_groups(model: TransformerLM, weight_decay: float, decay: str = "matrices") -> list[dict]:
    pos_ids = {id(p) for p in model.pos.parameters()}  # position-scheme parameters are never decayed
    groups: tuple[list, list] = ([], [])
    for p in (p for p in model.parameters() if p.requires_grad):
        groups[id(p) not in pos_ids and (p.dim() >= 2 or decay == "all")].append(p)
    return [{"params": groups[1], "weight_decay": weight_decay}, {"params": groups[0], "weight_decay": 0.0}]


# -------------------------------------------------------------------- trainer


class Trainer:
    """One model, its optimizer and its data; :meth:`step` runs one optimizer step.

    :func:`train` is the usual entry point; the throughput benchmark uses this
    class to interleave several schemes step by step.

    Args:
        model_cfg: model to build (``torch.manual_seed(train_cfg.seed)`` first).
        train_cfg: optimisation settings.
        data: a batch source (``batch(step, micro) -> (x, y)``) or bytes
            (wrapped in :class:`~relpos.data.ByteLMSource` with ``batch_size``,
            ``seq_len`` and ``seed`` from ``train_cfg``).
        ctx: distributed context (default: :func:`relpos.training.distributed.setup`).
    """

    def __init__(self, model_cfg: ModelConfig, train_cfg: TrainConfig, data, *, ctx: D.DistContext | None = None):
        if not isinstance(model_cfg, ModelConfig):
            raise TypeError(f"model_cfg must be a ModelConfig, got {type(model_cfg).__name__}")
        if not isinstance(train_cfg, TrainConfig):
            raise TypeError(f"train_cfg must be a TrainConfig, got {type(train_cfg).__name__}")
        train_cfg.validate()
        if isinstance(data, (bytes, bytearray)):
            data = ByteLMSource(bytes(data), train_cfg.batch_size, train_cfg.seq_len, seed=train_cfg.seed)
        if not callable(getattr(data, "batch", None)):
            raise TypeError("data must be bytes or a batch source with batch(step, micro) -> (x, y)")
        self.model_cfg, self.cfg, self.data = model_cfg, train_cfg, data
        self.ctx = ctx if ctx is not None else D.setup(train_cfg.device)
        torch.manual_seed(train_cfg.seed)
        self.model = TransformerLM(model_cfg).to(self.ctx.device)
        self._foreach = _foreach(self.ctx.device)
        self.opt = torch.optim.AdamW(
            _param_groups(self.model, train_cfg.weight_decay, train_cfg.decay), lr=train_cfg.lr,
            betas=(train_cfg.beta1, train_cfg.beta2), foreach=self._foreach,
        )
        self.step_count = 0
        self.cooldown: tuple[int, int] | None = None  # (first step, length) once a callback asked for one
        self.stopped = False  # a callback stopped training (a resumed checkpoint then trains no further)
        self.callback_pending = False  # restored from a checkpoint written before its step's callback ran
        self.losses: list[float] = []
        self.tokens = 0
        self.seconds = self.cpu_seconds = 0.0  # training time of the segments before this one (a resume)
        self.net: nn.Module = self.model
        self._ddp_ready = False

    # -------------------------------------------------------------- checkpoints

    def save(self, path: str | Path | None = None, *, callback=None, seconds: float = 0.0,
             cpu_seconds: float = 0.0, callback_done: bool = True) -> Path | None:
        """Checkpoint model, optimizer and progress (rank 0 writes; every rank waits).

        ``callback``: a training callback with ``state_dict() -> (JSON dict, {name: tensor})`` (for example
        :class:`relpos.compare.fitting.FitMonitor`) is saved with the model, so that a resume continues its
        decisions too; ``seconds``, ``cpu_seconds``: this segment's training time so far (added to the
        restored segments' time); ``callback_done``: False when the step's callback has not run yet (a resume
        then runs it for that step first).
        """
        path = Path(path or self.cfg.ckpt_dir)
        if self.ctx.is_main:
            from relpos.training import checkpoint
            opt_t, opt_meta = optimizer_tensors(self.opt)
            extra = {"train": {"step": self.step_count, "losses": self.losses, "train_config": self.cfg.to_dict(),
                               "optimizer": opt_meta, "cooldown": self.cooldown, "stopped": self.stopped,
                               "tokens": self.tokens, "seconds": self.seconds + seconds,
                               "cpu_seconds": self.cpu_seconds + cpu_seconds, "callback_done": callback_done}}
            tensors = {"optimizer": opt_t}
            if callable(getattr(callback, "state_dict", None)):
                cb_meta, cb_tensors = callback.state_dict()
                extra["callback"] = cb_meta
                if cb_tensors:
                    tensors["callback"] = cb_tensors
            checkpoint.save(path, self.model, self.model_cfg, extra=extra, tensors=tensors)
        D.barrier(self.ctx)
        return path

    def restore(self, path: str | Path, *, callback=None) -> bool:
        """Load a training checkpoint written by :meth:`save`; False if there is none.

        ``callback``: one with ``load_state_dict(meta, tensors)`` gets the state that :meth:`save` kept of it.

        Raises:
            relpos.training.checkpoint.CheckpointError: corrupt files, another model
                config, a checkpoint without training state, or without the state of a callback
                that keeps one.
        """
        from relpos.training import checkpoint
        p = Path(path)
        empty = p.is_dir() and not p.is_symlink() and not any(p.iterdir())
        if (empty or not p.exists()) and not list(p.parent.glob(f".{p.name}.old-*")):
            return False  # nothing saved yet (an empty folder too): a fresh start
        meta, tensors = checkpoint.read(p)
        saved = meta.get("model_config")
        if saved != self.model_cfg.to_dict():
            diff = sorted(k for k in set(saved or {}) | set(self.model_cfg.to_dict())
                          if (saved or {}).get(k) != self.model_cfg.to_dict().get(k))
            raise checkpoint.CheckpointError(
                f"checkpoint {p} was written for another model config; differing fields: {diff}"
            )
        extra = meta.get("extra")
        train_meta = extra.get("train") if isinstance(extra, dict) else None
        if not isinstance(train_meta, dict) or "optimizer" not in tensors:
            raise checkpoint.CheckpointError(f"checkpoint {p} holds no training state (optimizer, step) to resume")
        step, losses, opt_meta = check_train_state(train_meta, f"{p}/config.json")
        checkpoint.load_state_dict_into(self.model, tensors["model"], source=f"checkpoint {p}")
        dev = self.ctx.device
        try:
            restore_optimizer(self.opt, {k: v.to(dev) if v.dim() else v for k, v in tensors["optimizer"].items()},
                              opt_meta)
        except (KeyError, ValueError, TypeError, IndexError, RuntimeError) as e:
            raise checkpoint.CheckpointError(
                f"{p}/optimizer.safetensors (with the \"optimizer\" entry of {p}/config.json) is damaged and "
                f"cannot be restored: {type(e).__name__}: {e}"
            ) from None
        if callable(getattr(callback, "load_state_dict", None)):
            if not isinstance(extra.get("callback"), dict):
                raise checkpoint.CheckpointError(f"checkpoint {p} holds no state of the training callback "
                                                 f"({type(callback).__name__}) to resume it with")
            callback.load_state_dict(extra["callback"], tensors.get("callback", {}))
        self.step_count = step
        self.losses = [float(x) for x in losses]
        cd = train_meta.get("cooldown")
        self.cooldown = (int(cd[0]), int(cd[1])) if isinstance(cd, (list, tuple)) and len(cd) == 2 else None
        self.stopped = bool(train_meta.get("stopped", False))
        self.callback_pending = not train_meta.get("callback_done", True)
        self.tokens = int(train_meta.get("tokens") or 0)
        self.seconds = float(train_meta.get("seconds") or 0.0)
        self.cpu_seconds = float(train_meta.get("cpu_seconds") or 0.0)
        return True

    # -------------------------------------------------------------------- step

    def _wrap(self) -> None:
        """Wrap in DDP and compile once (after a possible restore, so replicas start equal)."""
        if self._ddp_ready:
            return
        self._ddp_ready = True
        if self.ctx.distributed:
            ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
            self.net = nn.parallel.DistributedDataParallel(self.model, device_ids=ids,
                                                           find_unused_parameters=self._has_unused_parameters())
        self.net = torch.compile(self.net) if self.cfg.compile else self.net  # whole model; self.model stays plain

    def close(self) -> None:
        """Drop the DDP wrapper while the process group is alive.

        DDP's reducer holds the process group and hooks on the parameters of the
        model that :func:`train` returns; left to the interpreter's exit it is
        freed after the group is destroyed, and gloo aborts the process
        ("terminate called without an active exception").
        """
        if self.net is not self.model:
            self.net = self.model
            if self.ctx.distributed:
                import gc

                gc.collect()

    def _has_unused_parameters(self) -> bool:
        x = torch.zeros(1, min(4, self.model_cfg.max_len), dtype=torch.long, device=self.ctx.device)
        self.model.zero_grad(set_to_none=True)
        self.model(x).float().sum().backward()
        unused = any(p.grad is None for p in self.model.parameters() if p.requires_grad)
        self.model.zero_grad(set_to_none=True)
        return unused

    def step(self) -> float:
        """One optimizer step; returns the step's mean loss over all counted tokens. Runs with subnormal
        floats flushed to zero (:mod:`relpos.training.denormals`), the caller's setting restored after."""
        with flushed():
            return self._step()

    def _step(self) -> float:
        self._wrap()
        cfg, ctx = self.cfg, self.ctx
        s = self.step_count
        micro = [self.data.batch(s, m) for m in range(cfg.accum_steps)]
        for x, y in micro:
            _check_batch(x, y, ctx.world_size)
        n_valid = int(sum(int((y != IGNORE_INDEX).sum()) for _, y in micro))
        if n_valid == 0:
            raise ValueError(f"step {s}: every target is {IGNORE_INDEX}; nothing to learn from")
        lr = lr_at(s, cfg, self.cooldown)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
        V = self.model_cfg.vocab_size
        for m, (x, y) in enumerate(micro):
            self.tokens += int(x.numel())  # global micro-batch: every process counts the same
            x = x[ctx.rank:: ctx.world_size].to(ctx.device, torch.long)
            y = y[ctx.rank:: ctx.world_size].to(ctx.device, torch.long)
            _seed_micro(ctx.device, _derived_seed(cfg.seed, s, m, ctx.rank))
            last = m == len(micro) - 1
            sync = contextlib.nullcontext() if (last or not ctx.distributed) else self.net.no_sync()
            with sync:
                try:
                    logits = self.net(x)
                except NonFiniteError as e:  # the weights went non-finite: the same divergence as a NaN loss
                    self.opt.zero_grad(set_to_none=True)
                    raise TrainingDivergedError(
                        f"training diverged at step {s + 1}: {e}; the last good checkpoint is kept. "
                        f"Try a lower --lr, more --warmup or another scheme setting") from None
                loss = F.cross_entropy(logits.reshape(-1, V).float(), y.reshape(-1),
                                       ignore_index=IGNORE_INDEX, reduction="sum")
                # DDP averages gradients over processes; scale so the result is the global-token mean.
                (loss * (ctx.world_size / n_valid)).backward()
            loss_sum += loss.detach().double()
        D.all_reduce_sum(loss_sum, ctx)
        loss_val = float(loss_sum) / n_valid
        if not math.isfinite(loss_val):  # the same on every process (all-reduced): all stop together
            self.opt.zero_grad(set_to_none=True)
            raise TrainingDivergedError(
                f"training diverged at step {s + 1}: the loss is {loss_val}; the weights were not updated with it "
                f"and the last good checkpoint is kept. Try a lower --lr, more --warmup or another scheme setting"
            )
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip, foreach=self._foreach)
        self.opt.step()
        self.step_count += 1
        self.losses.append(loss_val)
        return loss_val


def _foreach(device) -> bool | None:
    """AdamW's and the clipping's multi-tensor (``foreach``) implementation on CPU and CUDA: the same arithmetic
    as the per-tensor loop PyTorch picks on CPU by default, bit for bit (tested), in fewer calls -- at the
    compare presets' shapes the optimizer step takes about 0.75x the time (``benchmarks/job_step.py``). The
    ``fused`` kernels are faster still but round differently, so a run would not repeat an earlier one's numbers.
    None elsewhere (PyTorch's default)."""
    return True if torch.device(device).type in ("cpu", "cuda") else None


def _want_progress(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def train(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    data,
    *,
    callback: Callable[[StepInfo], Any] | None = None,
) -> TrainResult:
    """Train a :class:`~relpos.model.TransformerLM`.

    Args:
        model_cfg: the model.
        train_cfg: optimisation, checkpoint and progress settings.
        data: a batch source or bytes (see :class:`Trainer`).
        callback: called with a :class:`StepInfo` after every step; a
            :class:`~relpos.training.schedule.Cooldown` starts the cooldown (training stops
            at its end), another truthy return value stops training (after the
            final checkpoint). Under torchrun it must decide the same on every process.

    Returns:
        :class:`TrainResult`.

    Raises:
        ValueError / TypeError: bad configs or batches;
        :class:`relpos.outdir.OutputDirError`: ``ckpt_dir`` holds something that
        is not a relpos checkpoint (raised before training starts; nothing is
        changed);
        :class:`relpos.training.checkpoint.CheckpointError`: ``resume`` from a corrupt
        or foreign checkpoint;
        :class:`TrainingDivergedError`: a step's loss became NaN or infinite
        (no checkpoint is written after that; an earlier one is kept).

    Example:
        >>> from relpos.data import stdlib_corpus
        >>> r = train(ModelConfig.preset("tiny", scheme="alibi"),
        ...           TrainConfig(steps=2, batch_size=2, seq_len=16, progress=False),
        ...           stdlib_corpus("train", max_bytes=10_000))
        >>> len(r.losses)
        2
    """
    ctx = D.setup(train_cfg.device)
    devices = [ctx.device] if ctx.device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            return _train(model_cfg, train_cfg, data, callback, ctx)
    finally:
        D.teardown(ctx)


def _train(model_cfg, train_cfg, data, callback, ctx) -> TrainResult:
    if train_cfg.ckpt_dir is not None:
        from relpos.training.checkpoint import check_checkpoint_target

        # before any work: never overwrite what relpos did not write, and find a read-only --out now
        check_checkpoint_target(train_cfg.ckpt_dir, writable=ctx.is_main)
    tr = Trainer(model_cfg, train_cfg, data, ctx=ctx)
    if train_cfg.resume and train_cfg.ckpt_dir is not None:
        tr.restore(train_cfg.ckpt_dir, callback=callback)
    show = ctx.is_main and _want_progress(train_cfg.progress)
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=train_cfg.steps, initial=min(tr.step_count, train_cfg.steps), unit="step",
                   dynamic_ncols=True, desc=f"train {model_cfg.scheme}", file=sys.stderr)
    t0, c0 = time.perf_counter(), time.process_time()
    tokens0 = tr.tokens
    saved_at = tr.step_count if train_cfg.resume else -1

    def save(callback_done: bool):
        tr.save(callback=callback, seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                callback_done=callback_done)

    def ask(loss, tps, elapsed) -> bool:
        """The callback's answer for the step just done (a cooldown starts; True: stop)."""
        answer = callback(StepInfo(tr.step_count, loss, lr_at(tr.step_count - 1, train_cfg, tr.cooldown), tps,
                                   elapsed, tr.model))
        if isinstance(answer, Cooldown):
            if tr.cooldown is None:  # the first request wins; training stops at its end
                tr.cooldown = (tr.step_count, answer.steps)
        elif answer:
            tr.stopped = True
        return tr.stopped

    try:
        if callback is not None and tr.callback_pending and tr.step_count:
            ask(tr.losses[-1], 0.0, 0.0)  # the checkpoint was written before its step's callback: ask it now
        end = train_cfg.steps if tr.cooldown is None else min(train_cfg.steps, sum(tr.cooldown))
        end = tr.step_count if tr.stopped else end  # a callback had stopped it: nothing more to train
        while tr.step_count < end:
            loss = tr.step()
            elapsed = time.perf_counter() - t0
            tps = (tr.tokens - tokens0) / elapsed if elapsed > 0 else 0.0
            if bar is not None:
                bar.update(1)
                if tr.step_count % train_cfg.log_every == 0 or tr.step_count == train_cfg.steps:
                    bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tps:,.0f}")
            # before the callback (which may change the model): a resume asks the callback for this step again
            if train_cfg.ckpt_every and train_cfg.ckpt_dir and tr.step_count % train_cfg.ckpt_every == 0:
                save(callback_done=False)
                saved_at = tr.step_count
            if callback is not None:
                if ask(loss, tps, elapsed):
                    break
                if tr.cooldown is not None:
                    end = min(end, sum(tr.cooldown))
    finally:
        if bar is not None:
            bar.close()
        tr.close()
    seconds = time.perf_counter() - t0
    if train_cfg.ckpt_dir and saved_at != tr.step_count:
        save(callback_done=True)
    tokens = tr.tokens - tokens0
    tr.model.eval()
    return TrainResult(model=tr.model, losses=list(tr.losses), tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
                       steps=tr.step_count, seconds=seconds, seconds_before=tr.seconds,
                       cpu_seconds_before=tr.cpu_seconds)


@torch.no_grad()
def evaluate_loss(model: TransformerLM, data, n_batches: int = 8, *, start_step: int = 0) -> float:
    """Mean loss per counted target token over ``n_batches`` batches ``data.batch(start_step + i, 0)``."""
    check_int("n_batches", n_batches, 1)
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    total, count = 0.0, 0
    try:
        for i in range(n_batches):
            x, y = data.batch(start_step + i, 0)
            logits = model(x.to(dev))
            y = y.to(dev)
            total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1),
                                           ignore_index=IGNORE_INDEX, reduction="sum"))
            count += int((y != IGNORE_INDEX).sum())
    finally:
        model.train(was)
    if count == 0:
        raise ValueError("no counted targets in the evaluation batches")
    return total / count
