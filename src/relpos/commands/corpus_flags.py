"""Command-line options for a user's corpus, shared by ``relpos compare`` and ``relpos train``.

A command calls :func:`add_corpus_arguments` on its parser and
:func:`corpus_spec_from_args` on the parsed arguments; the spec (a JSON-able
dict, or None for the built-in corpus) goes into the command's configuration.
The library below the command line takes the spec (:func:`relpos.corpus.options.corpus_spec`), never the flags.
"""

from __future__ import annotations

import argparse

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
    """The corpus spec dict of the parsed options (None: the built-in corpus); see
    :func:`relpos.corpus.options.corpus_spec`, which takes the same values without a ``Namespace``."""
    from relpos.corpus.options import corpus_spec

    return corpus_spec(getattr(args, "corpus", None), glob=getattr(args, "corpus_glob", None),
                       text_field=getattr(args, "text_field", "text"), tokenizer=getattr(args, "tokenizer", None),
                       tokenizer_alone=getattr(args, "hf_model", None) is not None)
