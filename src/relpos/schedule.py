"""Deprecated alias of :mod:`relpos.training.schedule` (this module's home before training became one package);
kept for one release: ``import relpos.schedule`` gives that module itself."""

import sys

from relpos.training import schedule as _module

sys.modules[__name__] = _module
