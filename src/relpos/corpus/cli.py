"""Command-line options for a user's corpus, shared by ``relpos compare`` and ``relpos train``.

A command calls :func:`add_corpus_arguments` on its parser and
:func:`corpus_spec_from_args` on the parsed arguments; the spec (a JSON-able
dict, or None for the built-in corpus) goes into the command's configuration.
"""

from __future__ import annotations

import argparse

from relpos.corpus import CorpusSpec

__all__ = ["add_corpus_arguments", "corpus_spec_from_args"]


def add_corpus_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("your corpus (default: the Python standard library, byte-level)")
    g.add_argument("--corpus", default=None, metavar="PATH",
                   help="a text file, a folder of files, a .jsonl file, or a Hugging Face datasets folder "
                        "(save_to_disk); split ~90/10 into train/validation by a stable hash")
    g.add_argument("--corpus-glob", default=None, metavar="GLOB",
                   help="files of a folder corpus to read (default **/*; binary and non-UTF-8 files are skipped)")
    g.add_argument("--text-field", default="text", metavar="NAME",
                   help="text field of JSONL records / dataset rows (default text)")
    g.add_argument("--tokenizer", default=None, metavar="tokenizer.json",
                   help="a Hugging Face tokenizers file: subword modelling, lengths in tokens "
                        "(default: bytes)")


def corpus_spec_from_args(args: argparse.Namespace) -> dict | None:
    """The corpus spec dict of the parsed options (None: the built-in corpus).

    Raises:
        ValueError: ``--corpus-glob``, ``--text-field`` or ``--tokenizer`` without ``--corpus``
            (``--tokenizer`` alone is allowed when the command has ``--hf-model``).
    """
    if getattr(args, "corpus", None) is None:
        extras = [f for f, default in (("corpus_glob", None), ("text_field", "text")) if getattr(args, f, default) != default]
        if extras:
            raise ValueError(f"--{extras[0].replace('_', '-')} needs --corpus PATH")
        if getattr(args, "tokenizer", None) is not None and getattr(args, "hf_model", None) is None:
            raise ValueError("--tokenizer needs --corpus PATH")
        return None
    import os

    from relpos.corpus.readers import check_glob, check_regular_file

    if args.corpus_glob is not None:
        check_glob(args.corpus_glob)
    for flag, path in (("--corpus", args.corpus), ("--tokenizer", getattr(args, "tokenizer", None))):
        if path is not None and os.path.exists(path) and not (flag == "--corpus" and os.path.isdir(path)):
            check_regular_file(path, flag)  # a named pipe would block the read (before anything is created)
    return CorpusSpec(str(args.corpus), args.corpus_glob, args.text_field, args.tokenizer).to_dict()
