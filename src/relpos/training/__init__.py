"""Training a model: the loop (:func:`train`), its configuration and state, checkpoints, learning-rate
schedules and the distributed (torchrun) plumbing.

May import: the library below it (maths, schemes, attention, model, tasks, corpus); never the experiment tier
(:mod:`relpos.compare`, :mod:`relpos.report`, :mod:`relpos.pretrained`), :mod:`relpos.commands` or
:mod:`relpos.explorer` (``tests/test_layout.py``). ``relpos.train``, ``relpos.checkpoint`` and
``relpos.schedule``, the old homes of these modules, re-export them for one release.
"""

__all__ = ["TrainConfig", "train"]


def __getattr__(name: str):
    # on first use: importing a sibling (``relpos.training.checkpoint``) does not load the training loop
    if name == "TrainConfig":
        from relpos.training.config import TrainConfig

        return TrainConfig
    if name == "train":
        from relpos.training.loop import train

        return train
    raise AttributeError(f"module 'relpos.training' has no attribute {name!r}")
