"""Deprecated alias of :mod:`relpos.training.loop` (this module's home before training became one package);
kept for one release: ``import relpos.train`` gives that module itself."""

import sys

from relpos.training import loop as _module

sys.modules[__name__] = _module
