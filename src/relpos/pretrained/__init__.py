"""A user's pretrained checkpoint, evaluated as shipped: loading (Hugging Face folders and GGUF files, with their
bounds), RoPE scalings, the zero-shot long-context evaluation and its report (``relpos compare --hf-model``).
The bridge that puts a relpos scheme into such a model is :mod:`relpos.hf`, beside this package.

May import: the library below it, :mod:`relpos.hf`, and the store and runner of :mod:`relpos.compare` (its
results are stored as compare's are); never :mod:`relpos.report`, :mod:`relpos.commands` or
:mod:`relpos.explorer` (``tests/test_layout.py``).
"""
