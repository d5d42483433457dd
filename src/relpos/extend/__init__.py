"""Context extension by fine-tuning: the ``extend`` benchmark and ``relpos extend`` on a user's checkpoint.

What this package owns:

* :mod:`relpos.extend.recipes` -- the recipes (direct fine-tuning of plain RoPE; position interpolation,
  NTK-aware, YaRN with its attention temperature, dynamic NTK zero-shot; ALiBi, KERPLE and NoPE as
  references) and how each one is put on a trained model;
* :mod:`relpos.extend.spec` and :mod:`relpos.extend.hf_spec` -- the typed settings of a run
  (:class:`~relpos.extend.spec.ExtendSpec`, :class:`~relpos.extend.hf_spec.HFExtendSpec`), validated with
  one-line errors naming the setting;
* :mod:`relpos.extend.source` -- the fitted language models of a finished ``relpos compare`` folder
  (read only; a folder without them is refused in one line);
* :mod:`relpos.extend.finetune` -- fine-tuning at ``factor x L`` and the test/validation evaluation at
  1x, 4x, 8x, 16x ``L``;
* :mod:`relpos.extend.store` -- the resumable results store inside ``--out`` (SQLite, one row per
  (recipe, seed, rate, K));
* :mod:`relpos.extend.bench` -- the benchmark loop and its cost estimate (``--dry-run``);
* :mod:`relpos.extend.report` -- the tables (far-position ratio against K with paired bootstrap intervals,
  loss at L before and after, steps-to-match) and the three claim rules (holds / does not hold / not
  testable here);
* :mod:`relpos.extend.hf` -- the same loop on a Hugging Face checkpoint (evaluate as shipped, zero-shot under
  a scaling or a swapped scheme, fine-tune, evaluate again; a loadable folder).

May import: training (:mod:`relpos.training`, the model and schemes), the compare store and configuration
(:mod:`relpos.compare.config`, :mod:`relpos.compare.store`), the statistics of :mod:`relpos.report`, the
pretrained-checkpoint evaluation (:mod:`relpos.pretrained`) and the bridge (:mod:`relpos.hf`). Nothing from
:mod:`relpos.commands` or :mod:`relpos.explorer` (they sit above it), and nothing below imports it
(``tests/test_layout.py``); nothing here takes an argparse Namespace.
"""
