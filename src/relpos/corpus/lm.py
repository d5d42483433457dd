"""Language modelling on a user's corpus: :class:`relpos.tasks.LanguageModelling`'s protocols on other text.

:class:`CorpusLanguageModelling` keeps the three evaluation protocols of
:mod:`relpos.tasks.lm` (window, position, fixed target) and its options, and
changes only where the text comes from: training windows from the corpus's
training split (:meth:`relpos.corpus.Corpus.train_source`), early-stopping
windows from its validation split and every reported number from its test split
(both memory-mapped, both cleaned of text that occurs in training), with lengths
in the corpus's unit (bytes, or tokens of its tokenizer). It refuses a split too
small for the evaluation instead of repeating it (:func:`relpos.corpus.lm_requirement`).

Units: ``loss`` and ``ppl`` are per token; ``bpb`` is bits per *byte* -- for a
tokenized corpus the loss per token divided by ``ln 2`` and by the test
split's bytes per token (:meth:`relpos.corpus.Corpus.bits_per_byte`); for bytes
the two are the same thing.
"""

from __future__ import annotations

import dataclasses

import torch

from relpos.corpus import Corpus, lm_requirement
from relpos.tasks.lm import LanguageModelling

__all__ = ["CorpusLanguageModelling"]


class CorpusLanguageModelling(LanguageModelling):
    """:class:`~relpos.tasks.LanguageModelling` on ``corpus`` (see the module docstring).

    Args:
        corpus: a loaded :class:`~relpos.corpus.Corpus`.
        **options: the options of :class:`~relpos.tasks.LanguageModelling`
            (``train_len``, ``eval_lengths``, ``eval_tokens``, ``train_bytes`` --
            a cap in the corpus's unit --, ``target_len``, ``blocks``, ...).

    Raises:
        ValueError: a bad option, or a corpus too small for the evaluation
            (the message says how many bytes or tokens are needed).
    """

    def __init__(self, corpus: Corpus, **options) -> None:
        if not isinstance(corpus, Corpus):
            raise TypeError(f"corpus must be a relpos.corpus.Corpus, got {type(corpus).__name__}")
        super().__init__(**options)
        self.corpus = corpus
        self.vocab_size = corpus.vocab_size
        need = lm_requirement(self.train_len, self.eval_lengths, self.eval_tokens, self.blocks,
                              n_val=self.n_val, eval_stride=self.eval_stride)
        corpus.require(dataclasses.replace(need, train=0) if corpus.meta.get("eval_only") else need)

    @classmethod
    def from_spec(cls, spec, *, cache_dir=None, eval_only: bool = False, **options) -> "CorpusLanguageModelling":
        """Load the corpus of ``spec`` (a :class:`~relpos.corpus.CorpusSpec` or its dict) and build the task.

        The size needed by ``options`` is checked before the corpus is read into the
        cache, so a corpus too small leaves nothing behind. The load is memoised per
        process (:func:`relpos.corpus.cached_corpus`): workers pay only a ``stat``. ``eval_only``: an
        evaluation that never trains; the training split is not tokenized (:func:`relpos.corpus.load_corpus`).
        """
        from relpos.corpus import cached_corpus

        plain = LanguageModelling(**options)  # resolves the defaults and checks the options
        need = lm_requirement(plain.train_len, plain.eval_lengths, plain.eval_tokens, plain.blocks,
                              n_val=plain.n_val, eval_stride=plain.eval_stride)
        if eval_only:
            need = dataclasses.replace(need, train=0)
        return cls(cached_corpus(spec, cache_dir, require=need, eval_only=eval_only), **options)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` in this corpus's unit (for prompts such as passkey retrieval)."""
        return self.corpus.encode(text)

    def corpus_identity(self) -> dict:
        return self.corpus.identity()

    def corpus_key(self) -> dict:
        return self.corpus.options()

    def train_source(self, batch_size: int, seed: int):
        return self.corpus.train_source(batch_size, self.train_len, seed, limit=self.train_bytes)

    def _text(self, split: str) -> torch.Tensor:
        return self.corpus.tensor(split)

    def evaluate(self, model_for, *, lengths=None):
        out = super().evaluate(model_for, lengths=lengths)
        if self.corpus.tokenized:
            for m in out:
                if m.loss is not None:
                    m.bpb = self.corpus.bits_per_byte(m.loss)
        return out
