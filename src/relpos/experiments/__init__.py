"""The ``relpos compare`` benchmark: configuration, runners, results store, report.

* :mod:`relpos.experiments.config` -- :class:`ExperimentConfig`, presets, fingerprint.
* :mod:`relpos.experiments.runner` -- one job = train + evaluate; local/ray/torchrun runners.
* :mod:`relpos.experiments.store` -- the SQLite results database.
* :mod:`relpos.experiments.report` -- results.json, plots, report.md.
* :mod:`relpos.experiments.compare` -- the sweep itself.
"""

from relpos.experiments.config import PRESETS, ExperimentConfig, preset

__all__ = ["ExperimentConfig", "PRESETS", "preset"]
