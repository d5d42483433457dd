"""Benchmark tasks of ``relpos compare``: language modelling and algorithmic tasks.

>>> from relpos.tasks import make_task
>>> t = make_task("copy", train_len=8)
>>> t.eval_lengths
(8, 16, 24, 32)
"""

from __future__ import annotations

from relpos.tasks.algorithmic import AlgorithmicSource, AlgorithmicTask, teacher_forced_correct, validation_score
from relpos.tasks.base import IGNORE, Measurement, Task, greedy_decode, stable_seed, token_losses
from relpos.tasks.lm import LanguageModelling
from relpos.tasks.mqar import MQAR
from relpos.tasks.parity import Parity
from relpos.tasks.strings import Copy, CopyDistinct, CopyHints, Reverse

__all__ = [
    "TASKS",
    "ALIASES",
    "make_task",
    "task_names",
    "Task",
    "Measurement",
    "LanguageModelling",
    "AlgorithmicTask",
    "AlgorithmicSource",
    "Copy",
    "Reverse",
    "CopyDistinct",
    "CopyHints",
    "MQAR",
    "validation_score",
    "teacher_forced_correct",
    "Parity",
    "greedy_decode",
    "token_losses",
    "stable_seed",
    "IGNORE",
]

#: name -> task class.
TASKS: dict[str, type[Task]] = {
    "lm": LanguageModelling,
    "copy": Copy,
    "reverse": Reverse,
    "copy-distinct": CopyDistinct,
    "copy-hints": CopyHints,
    "mqar": MQAR,
    "parity": Parity,
}

#: Old names still accepted: the single-query recall task was replaced by MQAR.
ALIASES: dict[str, str] = {"recall": "mqar", "associative-recall": "mqar"}


def task_names() -> list[str]:
    return list(TASKS)


def make_task(name: str, **options) -> Task:
    """Build a task by name.

    Raises:
        ValueError: unknown name (the message lists the known ones) or a bad option.
        TypeError: an option the task does not take.
    """
    if not isinstance(name, str):
        raise TypeError(f"task name must be a str, got {type(name).__name__}")
    key = name.strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    if key not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    return TASKS[key](**options)
