"""The ``relpos compare`` benchmark: configuration, runners, results store, report.

* :mod:`relpos.experiments.config` -- :class:`ExperimentConfig`, validation, fingerprint.
* :mod:`relpos.experiments.presets` -- the named presets (default, ci, full).
* :mod:`relpos.experiments.runner` -- one job = train + evaluate; local/ray/torchrun runners.
* :mod:`relpos.experiments.store` -- the SQLite results database.
* :mod:`relpos.experiments.report` -- results.json, tables, report.md.
* :mod:`relpos.experiments.plots` -- the report's PNG plots.
* :mod:`relpos.experiments.compare` -- the sweep itself.
"""

from relpos.experiments.config import ExperimentConfig
from relpos.experiments.presets import PRESETS, preset

__all__ = ["ExperimentConfig", "PRESETS", "preset"]
