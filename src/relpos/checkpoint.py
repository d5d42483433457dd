"""Deprecated alias of :mod:`relpos.training.checkpoint` (this module's home before training became one package);
kept for one release: ``import relpos.checkpoint`` gives that module itself."""

import sys

from relpos.training import checkpoint as _module

sys.modules[__name__] = _module
