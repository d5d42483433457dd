"""Deprecated: the old home of the compare sweep, kept for one release.

Its modules now live by concern: :mod:`relpos.compare` (plan, run, fit, store), :mod:`relpos.report` (statistics,
verdicts, tables, the results page) and :mod:`relpos.pretrained` (a user's checkpoint). The three module commands
that users ran from here still run: ``python -m relpos.experiments.results_page``, ``...merge`` and
``...hf_report``, each the same as its new home.
"""

from relpos.compare import PRESETS, ExperimentConfig, preset

__all__ = ["ExperimentConfig", "PRESETS", "preset"]
