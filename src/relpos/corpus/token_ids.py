"""Whether a tokenizer's ids fit a vocabulary, checked before anything is read or written.

A ``tokenizer.json`` may give a token an id at or past its own size (its ids need
not be contiguous: ``get_vocab_size`` counts tokens, not the largest id + 1). Such
an id indexes past an embedding table of that size, so every run would fail
inside its worker after the output folder was made; a model's vocabulary smaller
than the tokenizer's ids is the same fault. :func:`check_ids_fit` refuses both by name.

Example:
    >>> from tokenizers import Tokenizer, models
    >>> tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 7}, unk_token="[UNK]"))
    >>> tok.get_vocab_size(), max(tok.get_vocab().values())
    (3, 7)
    >>> check_ids_fit(tok, 3, "the tokenizer's own vocabulary", where="--tokenizer t.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --tokenizer t.json: its token ids reach 7 (token 'b'), past the tokenizer's own vocabulary of 3 ...
"""

from __future__ import annotations

__all__ = ["check_ids_fit"]


def check_ids_fit(tok, vocab_size: int, what: str, *, where: str = "--tokenizer") -> None:
    """Raise ``ValueError`` unless every id of ``tok`` is below ``vocab_size`` (``what`` names that vocabulary,
    ``where`` the tokenizer)."""
    vocab = tok.get_vocab(with_added_tokens=True)  # distinct ids: a bound within the size is also a count within it
    if not vocab or max(vocab.values()) < vocab_size:
        return
    name, top = max(vocab.items(), key=lambda kv: kv[1])
    raise ValueError(f"{where}: its token ids reach {top} (token {name!r}), past {what} of {vocab_size} tokens; "
                     "every id must lie below it")
