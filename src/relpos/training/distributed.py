"""Data-parallel plumbing for :func:`relpos.training.loop.train` (torchrun / DistributedDataParallel).

Launched by ``torchrun`` (``WORLD_SIZE > 1`` in the environment), :func:`setup`
joins the process group (``gloo`` on CPU, ``nccl`` on GPU); launched plainly it
returns a one-process context, so training runs the same code either way.
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["DistContext", "setup", "teardown", "all_reduce_sum", "barrier"]


@dataclasses.dataclass
class DistContext:
    """Where this process sits.

    Attributes:
        rank: global rank (0 in a single process).
        world_size: number of processes.
        local_rank: rank on this machine (selects the GPU).
        device: the device this process trains on.
        owns_group: True if :func:`setup` created the process group (and
            :func:`teardown` should destroy it).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    try:
        return int(v) if v is not None else default
    except ValueError as e:
        raise ValueError(f"environment variable {name} must be an integer, got {v!r}") from e


def setup(device: str | None = None) -> DistContext:
    """Join the torchrun process group if there is one.

    Args:
        device: ``"cpu"``, ``"cuda"`` or None (CUDA when available). Under
            torchrun with CUDA each process takes ``cuda:LOCAL_RANK``.
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available")
    world = _env_int("WORLD_SIZE", 1)
    if world <= 1 and not (dist.is_available() and dist.is_initialized()):
        return DistContext(device=dev)
    owns = False
    if not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        local_rank = _env_int("LOCAL_RANK", 0)
        if dev.type == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend)
        owns = True
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = _env_int("LOCAL_RANK", rank)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local_rank)
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=dev, owns_group=owns)


def teardown(ctx: DistContext) -> None:
    """Destroy the process group if :func:`setup` created it."""
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(t: Tensor, ctx: DistContext) -> Tensor:
    """Sum ``t`` over processes (in place; a no-op in one process)."""
    if ctx.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()
