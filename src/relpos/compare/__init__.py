"""The ``relpos compare`` sweep: what it is, how it runs, how runs are fitted, where they are recorded.

* plan: :mod:`~relpos.compare.config` (:class:`ExperimentConfig`, validation, fingerprint),
  :mod:`~relpos.compare.settings` (its typed parts), :mod:`~relpos.compare.presets` (default, ci, full, scale);
* run: :mod:`~relpos.compare.job` (one job = train + evaluate), :mod:`~relpos.compare.runner` (local, Ray,
  torchrun), :mod:`~relpos.compare.worker`, :mod:`~relpos.compare.leases`, :mod:`~relpos.compare.sweep` (the
  sweep itself), :mod:`~relpos.compare.additions` and :mod:`~relpos.compare.reuse` (extending a finished folder),
  :mod:`~relpos.compare.merge`, :mod:`~relpos.compare.scale`, :mod:`~relpos.compare.status`;
* fit: :mod:`~relpos.compare.fitting` (the fit gate, learning-rate choice, fitted views);
* store: :mod:`~relpos.compare.store` and :mod:`~relpos.compare.store_check` (the SQLite results database).

May import: the library below it (maths, schemes, attention, model, tasks, corpus, :mod:`relpos.training`).
Only the modules that finish a sweep (``sweep``, ``worker``, ``merge``, ``scale``) may import
:mod:`relpos.report`, to write what the sweep leaves behind; nothing here imports :mod:`relpos.pretrained`,
:mod:`relpos.commands` or :mod:`relpos.explorer` (``tests/test_layout.py`` checks these rules).
"""

from relpos.compare.config import ExperimentConfig
from relpos.compare.presets import PRESETS, preset

__all__ = ["ExperimentConfig", "PRESETS", "preset"]
