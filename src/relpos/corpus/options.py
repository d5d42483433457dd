"""A user's corpus named by plain values (what ``--corpus``, ``--corpus-glob``, ``--text-field`` and
``--tokenizer`` give), checked and turned into the JSON-able spec a configuration stores.

Example:
    >>> corpus_spec(None) is None
    True
    >>> corpus_spec(None, glob="*.md")
    Traceback (most recent call last):
    ...
    ValueError: --corpus-glob needs --corpus PATH
"""

from __future__ import annotations

import os

from relpos.corpus import CorpusSpec

__all__ = ["corpus_spec"]


def corpus_spec(corpus: str | os.PathLike | None, *, glob: str | None = None, text_field: str = "text",
                tokenizer: str | os.PathLike | None = None, tokenizer_alone: bool = False) -> dict | None:
    """The corpus spec dict (None: the built-in corpus).

    Args:
        corpus: a text file, a folder, a ``.jsonl`` file or a ``datasets`` folder, or None.
        glob: files of a folder corpus to read.
        text_field: the text field of JSONL records / dataset rows.
        tokenizer: a Hugging Face ``tokenizers`` file (subwords instead of bytes).
        tokenizer_alone: a tokenizer without a corpus is allowed (an HF model's evaluation names its own).

    Raises:
        ValueError: ``glob``, ``text_field`` or ``tokenizer`` without ``corpus``, a bad glob, or a path that is
            not a regular file (a named pipe would block the read before anything is created).
    """
    if corpus is None:
        extras = [f for f, v, default in (("corpus-glob", glob, None), ("text-field", text_field, "text"))
                  if v != default]
        if extras:
            raise ValueError(f"--{extras[0]} needs --corpus PATH")
        if tokenizer is not None and not tokenizer_alone:
            raise ValueError("--tokenizer needs --corpus PATH")
        return None
    from relpos.corpus.readers import check_glob, check_regular_file

    if glob is not None:
        check_glob(glob)
    for flag, path in (("--corpus", corpus), ("--tokenizer", tokenizer)):
        if path is not None and os.path.exists(path) and not (flag == "--corpus" and os.path.isdir(path)):
            check_regular_file(path, flag)
    return CorpusSpec(str(corpus), glob, text_field, None if tokenizer is None else str(tokenizer)).to_dict()
