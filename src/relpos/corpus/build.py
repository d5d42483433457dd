"""Building a corpus's cache: read the documents, tokenize them into ``train.bin`` / ``val.bin`` / ``test.bin``,
cut from validation and test every span that also occurs in training, and describe the result (``meta.json``).

:func:`relpos.corpus.load_corpus` calls :func:`_build` when the cache has no copy of a corpus yet.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path

import numpy as np

from relpos.corpus import _NAME, _SPLITS, FORMAT_VERSION, CorpusSpec, Requirement, _check_size
from relpos.corpus.readers import Skipped, Undecodable, read_docs
from relpos.data import split_of_key
from relpos.dedup import WINDOW, remove_leaks


class _Sink:
    """One split's output file; documents are committed or rolled back whole."""

    def __init__(self, path: Path, dtype) -> None:
        self.f = open(path, "wb")
        self.dtype = dtype
        self.tokens = self.bytes = self.docs = 0
        self.hash = hashlib.sha256()
        self._mark = 0

    def begin(self) -> None:
        self._mark = self.f.tell()
        self._doc_hash = hashlib.sha256()
        self._doc_tokens = self._doc_bytes = 0

    def write(self, ids: np.ndarray, nbytes: int, raw: bytes) -> None:
        self.f.write(np.ascontiguousarray(ids, dtype=self.dtype).tobytes())
        self._doc_hash.update(raw)
        self._doc_tokens += len(ids)
        self._doc_bytes += nbytes

    def commit(self) -> None:
        self.hash.update(self._doc_hash.digest())
        self.tokens += self._doc_tokens
        self.bytes += self._doc_bytes
        self.docs += 1

    def rollback(self) -> None:
        self.f.seek(self._mark)
        self.f.truncate()


def _encoder(tok):
    if tok is None:
        return lambda raw, text: np.frombuffer(raw, dtype=np.uint8)
    return lambda raw, text: np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.int64)


def _build(spec: CorpusSpec, kind: str, out: Path, tok, tok_sha: str | None, need: Requirement | None,
           eval_only: bool = False) -> dict:
    dtype = np.uint8 if tok is None else np.int32
    encode = _encoder(tok)
    skip = (lambda raw, text: np.zeros(0, dtype)) if eval_only else encode  # train: counted and hashed only
    sinks = {s: _Sink(out / f"{s}.bin", dtype) for s in _SPLITS}
    skipped = Skipped()
    try:
        for doc in read_docs(spec.path, kind, glob=spec.glob, text_field=spec.text_field, skipped=skipped):
            name = doc.split or split_of_key(doc.split_key)
            sink, enc = sinks[name], skip if name == "train" else encode
            sink.begin()
            try:
                for text in doc.pieces():
                    raw = text.encode("utf-8", "replace")
                    sink.write(enc(raw, text), len(raw), raw)
                if doc.sep:
                    raw = doc.sep.encode()
                    sink.write(enc(raw, doc.sep), len(raw), raw)
            except Undecodable:
                sink.rollback()
                skipped.undecodable.append(doc.name)
                continue
            sink.commit()
    finally:
        for s in sinks.values():
            s.f.close()
    total = sum(s.tokens if n != "train" or not eval_only else s.bytes for n, s in sinks.items())
    unit = "tokens" if tok is not None else "bytes"
    if tok is not None and total:
        from relpos.corpus.unknown import check_unknown_fraction

        check_unknown_fraction(tok, [out / f"{s}.bin" for s in _SPLITS if s != "train" or not eval_only], dtype,
                               what=str(spec.tokenizer))
    if total == 0:
        extra = ""
        if kind == "folder":
            c = skipped.counts()
            extra = (f" (no readable text: {c['binary']} binary, {c['undecodable']} not UTF-8, "
                     f"{c['unreadable']} unreadable file(s) skipped; glob {spec.glob or '**/*'!r})")
        raise ValueError(f"corpus {spec.path!r} is empty: it yields no text{extra}")
    # evaluation only: the training split is not tokenized, so nothing is removed as also in training
    dedup = {"window": WINDOW, "eval_only": True} if eval_only else \
        _remove_leaks(out, dtype, {s: sinks[s] for s in _SPLITS})
    fp = hashlib.sha256(f"relpos-corpus:{FORMAT_VERSION}:{tok_sha}:window={WINDOW}".encode()
                        + (b":eval-only" if eval_only else b""))
    for s in _SPLITS:
        fp.update(f"|{s}:{sinks[s].docs}:".encode() + sinks[s].hash.digest())
    meta = {
        "format_version": FORMAT_VERSION,
        "path": str(spec.path),
        "kind": kind,
        "spec": spec.to_dict(),
        "fingerprint": fp.hexdigest()[:16],
        "sha256": fp.hexdigest(),
        "dedup": dedup,
        "tokenizer": spec.tokenizer,
        "tokenizer_sha256": tok_sha,
        "vocab_size": 256 if tok is None else int(tok.get_vocab_size(with_added_tokens=True)),
        "dtype": np.dtype(dtype).name,
        "unit": unit,
        "splits": {s: {"docs": sinks[s].docs, "tokens": sinks[s].tokens, "bytes": sinks[s].bytes} for s in _SPLITS},
        "skipped": skipped.counts(),
        "skipped_examples": {k: v[:5] for k, v in asdict(skipped).items()},
    }
    if eval_only:
        meta["eval_only"] = True
    _check_size(meta, need)  # first: its message says how much text is needed
    for s in _SPLITS:
        if meta["splits"][s]["tokens" if s != "train" or not eval_only else "bytes"] == 0:
            left = (f"; {dedup[s]['removed']:,} {unit} of it also occur in training and were removed"
                    if dedup.get(s, {}).get("removed") else "")
            raise ValueError(
                f"corpus {spec.path!r} is too small: its {_NAME[s]} split is empty ({total:,} {unit} in "
                f"{sum(x.docs for x in sinks.values())} document(s){left}; about 10% of documents go to test and 5% "
                "to validation, so give more documents or more text)")
    return meta


def _remove_leaks(folder: Path, dtype, sinks: dict) -> dict:
    """Cut from ``val.bin`` and ``test.bin`` every span covered by a :data:`WINDOW`-token substring of
    ``train.bin`` (:func:`relpos.dedup.remove_leaks`), rewrite them, update the sinks' counts; the stats."""
    n_train = sinks["train"].tokens
    step = 1 << 22

    def train_pieces():
        if n_train == 0:
            return
        mm = np.memmap(folder / "train.bin", dtype=dtype, mode="r")
        for i in range(0, n_train, step):
            yield np.asarray(mm[i: i + step])

    held = [s for s in ("val", "test") if sinks[s].tokens]
    arrays = [np.fromfile(folder / f"{s}.bin", dtype=dtype) for s in held]
    cleaned, stats = remove_leaks(arrays, train_pieces, WINDOW)
    out = {"window": WINDOW}
    for s, a, st in zip(held, cleaned, stats):
        sink = sinks[s]
        if st["removed"]:
            a.astype(dtype).tofile(folder / f"{s}.bin")
            before = sink.tokens
            sink.tokens = len(a)
            # bytes: exact for byte-level text; for a tokenizer, in proportion to the tokens kept
            sink.bytes = len(a) if dtype == np.uint8 else round(sink.bytes * len(a) / max(before, 1))
        out[s] = {"leaked_windows": st["leaked_windows"], "removed": st["removed"]}
    return out
