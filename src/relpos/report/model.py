"""One results model: the report's inputs computed once from a results document, read by every output.

:class:`ResultsModel` is built once from a ``results.json`` document (:meth:`ResultsModel.from_results`) at the
top of each entry point that reports it -- the end of ``relpos compare`` (terminal tables, ``report.md``, the
plots), the results page (:mod:`relpos.report.results_page`) and the explorer's results view -- and passed
down. It holds:

* ``fitted``: the fit gate of every row (:func:`relpos.compare.fitting.fitted_views`), read by the tables,
  the verdict, the ranking, the published-claim rules and the explorer;
* ``shown``: what the tables and plots average (fitted seeds, every seed where none fitted);
* the far-position losses of each language-modelling row (:meth:`far_losses`, through
  :func:`relpos.report.ranking.lm_far_losses`, the one place that chooses far positions or whole windows),
  read by the verdict, the far-position table and the ranking;
* the ranking inputs of every fitted row (:func:`relpos.report.ranking.seed_inputs`), read by the ranking and
  the claim rules;
* the ranking (ranks, mean reciprocal ranks, paired bootstrap intervals) and the verdict;
* every other bootstrap interval a claim rule asks for (:meth:`interval`), each computed once.

The cheap parts are computed when the model is built; the ranking, the verdict and the intervals on first use
(the explorer reads the fit gate only and never pays for a bootstrap), and then kept: nothing is computed twice
for one model. A model never changes its results document (treat both as read-only).

The public report functions keep accepting a results dict: they build the model themselves (:func:`as_model`),
so a caller that reports one document several times builds the model once and passes it instead.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from relpos.compare.fitting import fitted_views

__all__ = ["ResultsModel", "as_model", "results_of"]


@dataclasses.dataclass(frozen=True, eq=False)
class ResultsModel:
    """The report's inputs of one results document (see the module docstring).

    Attributes:
        results: the ``results.json`` document (``{"config", "fingerprint", "runs": [...], ...}``).
        fitted: the fit gate of each row of ``results["runs"]``, in order (:func:`fitted_views`).
    """

    results: dict
    fitted: tuple[bool, ...]
    #: every computed input, by key (:meth:`memo`); a report module may keep its own here
    kept: dict = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def from_results(cls, results: dict | ResultsModel) -> ResultsModel:
        """The model of ``results`` (a model is returned as it is)."""
        if isinstance(results, ResultsModel):
            return results
        return cls(results, tuple(fitted_views(results["runs"])))

    # ------------------------------------------------------------ the fit gate and what the tables show

    @functools.cached_property
    def ok(self) -> frozenset[int]:
        """``id`` of every fitted row."""
        return frozenset(id(r) for r, f in zip(self.results["runs"], self.fitted) if f)

    @functools.cached_property
    def shown(self) -> tuple[dict, frozenset[int]]:
        """What the tables and plots average: ``results`` without the rows that missed the fit gate where another
        seed of the same (task, label) passed it (all seeds where none did), and the ids of the fitted rows."""
        runs, ok = self.results["runs"], self.ok
        some = {(r["task"], r["label"]) for r in runs if id(r) in ok}
        keep = [r for r in runs if id(r) in ok or (r["task"], r["label"]) not in some]
        return {**self.results, "runs": keep}, ok

    # ------------------------------------------------------------ far positions and ranking inputs

    def far_losses(self, run: dict, L: int, n: int) -> tuple[float | None, float | None, bool]:
        """:func:`relpos.report.ranking.lm_far_losses` of one row of these results, computed once."""
        from relpos.report.ranking import lm_far_losses

        return self.memo(("far", id(run), L, n), lambda: lm_far_losses(run, L, n))

    @functools.cached_property
    def inputs(self) -> dict[int, dict | None]:
        """``id`` of each fitted row -> its ranking inputs (:func:`relpos.report.ranking.seed_inputs` without
        ``_far``; None where the row lacks the measurement). Shared, read-only."""
        from relpos.report.ranking import seed_inputs

        out = {}
        for r, ok in zip(self.results["runs"], self.fitted):
            if ok and r["task"] != "passkey":
                inp, _ = seed_inputs(r, r["task"], far_losses=self.far_losses)
                if inp is not None:
                    inp.pop("_far", None)
                out[id(r)] = inp
        return out

    def seeds(self, task: str, label: str) -> dict[int, dict]:
        """seed -> ranking inputs of the fitted rows of one label on one task."""
        return {r["seed"]: self.inputs[id(r)] for r, ok in zip(self.results["runs"], self.fitted)
                if ok and r["task"] == task and r["label"] == label and self.inputs.get(id(r)) is not None}

    # ------------------------------------------------------------ ranking, verdict, intervals

    @functools.cached_property
    def ranking(self) -> dict:
        """:func:`relpos.report.ranking.ranking` of these results (default bootstrap seed and resamples)."""
        from relpos.report.ranking import ranking

        return ranking(self)

    @functools.cached_property
    def verdict(self) -> dict:
        """:func:`relpos.report.verdict.verdict` of these results (reading :attr:`ranking`)."""
        from relpos.report.verdict import verdict

        return verdict(self, self.ranking)

    def interval(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """A bootstrap interval (or any other report input) named ``key``, computed by ``compute`` once."""
        return self.memo(("interval", *key), compute)

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()`` the first time ``key`` is asked for, the kept value afterwards."""
        if key not in self.kept:
            self.kept[key] = compute()
        return self.kept[key]


def as_model(results: dict | ResultsModel) -> ResultsModel:
    """``results`` as a :class:`ResultsModel` (a dict is modelled now; a model is returned as it is)."""
    return ResultsModel.from_results(results)


def results_of(results: dict | ResultsModel) -> dict:
    """The results document of a model, or ``results`` itself (no model built)."""
    return results.results if isinstance(results, ResultsModel) else results
