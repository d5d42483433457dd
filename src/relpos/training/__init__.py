"""Training a model: the loop (:func:`train`), its configuration and state, checkpoints, learning-rate
schedules and the distributed (torchrun) plumbing.

May import: the library below it (maths, schemes, attention, model, tasks, corpus); never the experiment tier
(:mod:`relpos.compare`, :mod:`relpos.report`, :mod:`relpos.pretrained`), :mod:`relpos.commands` or
:mod:`relpos.explorer` (``tests/test_layout.py``). ``relpos.train``, ``relpos.checkpoint`` and
``relpos.schedule``, the old homes of these modules, re-export them for one release.
"""

from relpos.training.config import TrainConfig
from relpos.training.loop import train

__all__ = ["TrainConfig", "train"]
