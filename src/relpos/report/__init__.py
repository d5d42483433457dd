"""Everything that reads a sweep's record and reports it: statistics, ranks, verdicts, tables, plots, the
results page and its published-claim rules.

* :mod:`~relpos.report.model`: the report's inputs of one results document (fit gates, far-position losses,
  ranking inputs, ranks, intervals, the verdict), computed once and read by every output below;
* :mod:`~relpos.report.stats` (paired bootstrap, rank correlation), :mod:`~relpos.report.ranking`,
  :mod:`~relpos.report.verdict`;
* :mod:`~relpos.report.tables` and :mod:`~relpos.report.results_doc` (``results.json``, ``report.md``, terminal
  tables), :mod:`~relpos.report.plots`, :mod:`~relpos.report.trained_export`;
* the results page: :mod:`~relpos.report.results_page`, :mod:`~relpos.report.results_claims` (the published
  claims' rules), :mod:`~relpos.report.claim_changes` (against the protocol-2 page),
  :mod:`~relpos.report.results_inputs`.

May import: the library below it and the record of :mod:`relpos.compare` (its config, settings, presets, fitting
rules, store and job definitions); never what runs a sweep (``sweep``, ``runner``, ``worker``), nor
:mod:`relpos.pretrained`, :mod:`relpos.commands` or :mod:`relpos.explorer` (``tests/test_layout.py``).
"""
