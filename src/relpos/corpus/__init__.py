"""A user's own corpus: read once, split by a stable hash, cleaned of leaks, tokenized into a memory-mapped cache.

:func:`load_corpus` reads a text file, a folder of files, a JSONL file or a
Hugging Face ``datasets`` folder (see :mod:`relpos.corpus.readers`), streams
every document through a tokenizer -- UTF-8 bytes by default, or a Hugging Face
``tokenizers`` file -- and appends it to ``train.bin``, ``val.bin`` or ``test.bin``
of a cache folder. Documents are split by the rule of the built-in corpus
(:func:`relpos.data.split_of_key` on the document's split key: about 10% test, 5%
validation). Then every span of validation and test text covered by a
:data:`relpos.dedup.WINDOW`-token substring that also occurs in the training
split is cut out (:func:`relpos.dedup.remove_leaks`; ``meta["dedup"]`` counts the
leaked windows and tokens removed), so no evaluation window has been seen in
training. Validation serves early stopping, the fit gate and the learning-rate
choice; test every reported number. Reading never holds more than about 2 MiB of
text at a time; training windows are read back with ``os.pread``
(:class:`FileTokens`) and evaluation text through :class:`numpy.memmap`, so a
corpus larger than memory works (measured on a 1 GB file: building adds about
12 MB to the resident set, 50 batches of 16 x 1024 tokens about 4 MB); removing
leaks holds about 16 bytes per validation and test token while it streams the
training split.

The cache folder is ``<cache_dir>/<key>/`` where ``key`` hashes the absolute
path, the size and modification time of every input file and the options; a
second load of an unchanged corpus reads only its ``meta.json``. The
**fingerprint** hashes what the model sees (every document's bytes, its split,
the tokenizer file's bytes, the leak window), not where it came from: its
``sha256`` is what enters a configuration fingerprint (:meth:`Corpus.options`),
and :meth:`Corpus.identity` records it with every result.

Bad input raises ``ValueError`` (``FileNotFoundError`` for a missing path) and
leaves nothing behind: a build is written to a temporary folder and renamed into
place only once the corpus is complete, non-empty and large enough.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.txt").write_text("".join(f"line {i} of relpos\\n" for i in range(20000)))
    >>> c = load_corpus(d / "a.txt", cache_dir=d / "cache")
    >>> c.vocab_size, sum(c.n_tokens(s) for s in ("train", "val", "test")), c.meta["dedup"]["test"]["removed"]
    (256, 408890, 0)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from relpos.data import SPLITS
from relpos.corpus.readers import KINDS, check_hf_folder, detect_kind, file_signature
from relpos.corpus.sources import FileTokens, TokenLMSource
from relpos.corpus.cache_only import CorpusNotCached, cache_only_active
from relpos.corpus.token_ids import check_ids_fit

__all__ = ["Corpus", "CorpusSpec", "FileTokens", "Requirement", "TokenLMSource", "load_corpus", "cached_corpus",
           "lm_requirement", "default_cache_dir", "load_tokenizer", "KINDS"]

FORMAT_VERSION = 2  # 2: train / val / test, leaked spans removed from val and test
_SPLITS = SPLITS


def default_cache_dir() -> Path:
    """``$RELPOS_CACHE/corpora``, else ``~/.cache/relpos/corpora``."""
    root = os.environ.get("RELPOS_CACHE")
    return Path(root) / "corpora" if root else Path.home() / ".cache" / "relpos" / "corpora"




def load_tokenizer(path: str | os.PathLike):
    """A Hugging Face ``tokenizers.Tokenizer`` from a ``tokenizer.json`` file.

    Raises:
        ValueError: the file is missing, unreadable, or ``tokenizers`` is not installed.
    """
    p = Path(path)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ValueError("--tokenizer needs the optional 'tokenizers' package (pip install 'relpos[data]')") from None
    if not p.is_file():
        raise ValueError(f"tokenizer file {str(p)!r} does not exist")
    try:
        return Tokenizer.from_file(str(p))
    except Exception as e:  # noqa: BLE001 - the library raises its own exception types
        raise ValueError(f"tokenizer file {str(p)!r} does not load as a Hugging Face tokenizer: {e}") from None


@dataclass(frozen=True)
class CorpusSpec:
    """Where a corpus is and how to read it (JSON-able; goes into configs and to workers)."""

    path: str
    glob: str | None = None
    text_field: str = "text"
    tokenizer: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Requirement:
    """Tokens (or bytes) a use of the corpus needs in each split, and what for (``why`` may say ``{unit}``).

    ``why`` explains the test split's need; validation needs only its early-stopping windows."""

    train: int
    val: int
    why: str = ""
    test: int = 0


def lm_requirement(train_len: int, eval_lengths, eval_tokens: int, blocks: int | None = None, *,
                   n_val: int = 32, eval_stride: int | None = None) -> Requirement:
    """What :class:`relpos.tasks.LanguageModelling` needs, without overlapping evaluation text.

    Test: the window protocol scores ``eval_tokens // max(eval_lengths)``
    chunks of ``max(eval_lengths) + 1`` tokens (each after ``longest`` tokens of
    context, which sliding windows read) and the fixed-target protocol ``blocks``
    blocks of the same size (default ``max(16, eval_tokens // longest)``), both
    spread over the split: it must hold the larger of the two. Validation:
    ``n_val`` windows of ``train_len + 1`` tokens. Training: at least
    ``train_len + 1`` tokens and as many as the test split needs.
    """
    longest = max(eval_lengths)
    chunks = max(1, eval_tokens // longest)
    blocks = max(16, eval_tokens // longest) if blocks is None else blocks
    # the window protocol's chunks are preceded by ``longest`` tokens of context (read by sliding windows)
    test = max(chunks * (longest + 1) + longest, blocks * (longest + 1))
    why = (f"{max(chunks, blocks)} evaluation blocks of {longest + 1} {{unit}} "
           f"(eval_tokens {eval_tokens}, longest length {longest})")
    return Requirement(train=max(train_len + 1, test), val=n_val * (train_len + 1), why=why, test=test)


class Corpus:
    """A loaded corpus (see :func:`load_corpus`). Cheap to pickle: it holds paths, not data."""

    def __init__(self, folder: Path, meta: dict) -> None:
        self.folder, self.meta = Path(folder), meta

    # ------------------------------------------------------------------ facts
    @property
    def fingerprint(self) -> str:
        """16 hex digits identifying the data (documents, split, tokenizer)."""
        return self.meta["fingerprint"]

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def tokenized(self) -> bool:
        """True with a subword tokenizer, False for bytes."""
        return self.meta["tokenizer"] is not None

    def n_tokens(self, split: str) -> int:
        return int(self.meta["splits"][_split(split)]["tokens"])

    def n_bytes(self, split: str) -> int:
        return int(self.meta["splits"][_split(split)]["bytes"])

    def bytes_per_token(self, split: str = "test") -> float:
        """UTF-8 bytes per token of a split (1.0 for byte-level)."""
        return self.n_bytes(split) / max(self.n_tokens(split), 1)

    def bits_per_byte(self, loss_nats_per_token: float, split: str = "test") -> float:
        """Convert a mean loss per token into bits per byte with the split's bytes-per-token ratio."""
        return float(loss_nats_per_token) / math.log(2) / self.bytes_per_token(split)

    def report(self) -> dict:
        """Kind, documents and bytes/tokens per split, files skipped (by reason, with examples)."""
        keys = ("kind", "path", "fingerprint", "tokenizer", "vocab_size", "splits", "dedup", "skipped",
                "skipped_examples")
        return {k: self.meta[k] for k in keys}

    def options(self) -> dict:
        """The fingerprinted description (no paths): enters the configuration fingerprint."""
        return {"fingerprint": self.fingerprint, "sha256": self.meta["sha256"], "kind": self.meta["kind"],
                "tokenizer_sha256": self.meta["tokenizer_sha256"], "vocab_size": self.vocab_size,
                "leak_window": self.meta["dedup"]["window"],
                **{f"{s}_tokens": self.n_tokens(s) for s in _SPLITS}}

    def identity(self) -> dict:
        """What is recorded with every result: ``name`` (the path), content ``sha256``, ``leak_window``,
        ``unit``, and per split documents, tokens, bytes, leaked windows and tokens removed."""
        d = self.meta["dedup"]
        return {"name": self.meta["path"], "sha256": self.meta["sha256"], "leak_window": d["window"],
                "unit": self.unit, "tokenizer_sha256": self.meta["tokenizer_sha256"],
                "splits": {s: {"documents": v["docs"], "tokens": v["tokens"], "bytes": v["bytes"],
                               "leaked_windows": d.get(s, {}).get("leaked_windows", 0),
                               "removed_tokens": d.get(s, {}).get("removed", 0)}
                           for s, v in self.meta["splits"].items()}}

    # ------------------------------------------------------------------- data
    def array(self, split: str) -> np.ndarray:
        """The split's tokens as a read-only 1-D memory map (uint8 bytes or int32 token ids)."""
        s = _split(split)
        return np.memmap(self.folder / f"{s}.bin", dtype=np.dtype(self.meta["dtype"]), mode="r")

    def tensor(self, split: str) -> Tensor:
        """The split as a 1-D torch tensor backed by a copy-on-write memory map (nothing is read up front)."""
        s = _split(split)
        mm = np.memmap(self.folder / f"{s}.bin", dtype=np.dtype(self.meta["dtype"]), mode="c")
        return torch.from_numpy(mm)

    def train_source(self, batch_size: int, seq_len: int, seed: int = 0, *, limit: int | None = None) -> TokenLMSource:
        if self.meta.get("eval_only"):
            raise ValueError(f"corpus {self.meta['path']!r} was read for evaluation only: its training split is "
                             "not tokenized")
        tokens = FileTokens(self.folder / "train.bin", self.meta["dtype"])
        return TokenLMSource(tokens, batch_size, seq_len, seed, vocab_size=self.vocab_size, limit=limit)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as this corpus tokenizes (UTF-8 bytes, or the tokenizer without special tokens)."""
        if not self.tokenized:
            return list(text.encode("utf-8"))
        tok = self.__dict__.get("_tok")
        if tok is None:
            tok = self.__dict__["_tok"] = load_tokenizer(self.meta["tokenizer"])
        return tok.encode(text, add_special_tokens=False).ids

    def __getstate__(self) -> dict:
        return {"folder": self.folder, "meta": self.meta}

    def require(self, need: Requirement) -> "Corpus":
        """Raise ``ValueError`` (saying what is needed) unless each split holds enough tokens."""
        _check_size(self.meta, need)
        return self

    def __repr__(self) -> str:
        return (f"Corpus({self.meta['path']!r}, kind={self.meta['kind']}, fingerprint={self.fingerprint}, "
                f"train={self.n_tokens('train')}, val={self.n_tokens('val')}, test={self.n_tokens('test')} {self.unit})")

    @property
    def unit(self) -> str:
        return "tokens" if self.tokenized else "bytes"


def _split(split: str) -> str:
    if split not in _SPLITS:
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    return split


_SHARE = {"train": 0.85, "val": 0.05, "test": 0.10}  # about, by split_of_key
_NAME = {"train": "training", "val": "validation", "test": "test"}


def _check_size(meta: dict, need: Requirement | None) -> None:
    if need is None:
        return
    unit = "tokens" if meta["tokenizer"] else "bytes"
    for s, want in (("test", need.test), ("val", need.val), ("train", need.train)):
        have = meta["splits"][s]["tokens"]
        if have < want:
            total = math.ceil(want / _SHARE[s])
            why = need.why.format(unit=unit) if s == "test" and need.why else (
                "its early-stopping windows" if s == "val" else "")
            raise ValueError(
                f"corpus {meta['path']!r} is too small: its {_NAME[s]} split has {have:,} {unit} and needs {want:,}"
                f"{' for ' + why if why else ''} (after removing text that also occurs in training); about "
                f"{_SHARE[s]:.0%} of documents go to the {_NAME[s]} split, so give about "
                f"{total:,} {unit} of text in all, or lower the evaluation lengths or budget")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def load_corpus(path: str | os.PathLike, *, glob: str | None = None, text_field: str = "text",
                tokenizer: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
                require: Requirement | None = None, eval_only: bool = False) -> Corpus:
    """Read (or find in the cache) a corpus. See the module docstring.

    Args:
        path: a text file, a folder, a ``.jsonl`` file or a ``save_to_disk`` folder.
        glob: files of a folder to read (default ``**/*``); only for folders.
        text_field: the text field of JSONL records or dataset rows.
        tokenizer: a ``tokenizer.json`` file (Hugging Face ``tokenizers``); None for bytes.
        cache_dir: where tokenized splits are kept (default :func:`default_cache_dir`).
        require: tokens each split must hold (e.g. :func:`lm_requirement`).
        eval_only: for an evaluation that never trains (``--hf-model``): the
            training split is read and hashed but not tokenized, and nothing is
            removed from validation and test as also in training (a cache of its own).

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: empty corpus, too small for ``require``, a folder without
            readable text, a missing or non-string text field, a bad JSON line,
            a tokenizer that does not load, ``glob`` given for a non-folder.
    """
    if not isinstance(text_field, str) or not text_field:
        raise TypeError(f"text_field must be a non-empty str, got {text_field!r}")
    p = Path(path).expanduser().resolve()
    kind = detect_kind(p)
    if glob is not None and kind != "folder":
        raise ValueError(f"--corpus-glob applies to a folder corpus; {str(p)!r} is a {kind} corpus")
    tok, tok_sha = None, None
    if tokenizer is not None:
        tok = load_tokenizer(tokenizer)
        if not eval_only:  # the model trained on it has the tokenizer's own size (an evaluation checks its model's)
            check_ids_fit(tok, tok.get_vocab_size(with_added_tokens=True), "the tokenizer's own vocabulary",
                          where=f"--tokenizer {tokenizer}")
        tok_sha = _sha256_file(Path(tokenizer))
        tokenizer = str(Path(tokenizer).expanduser().resolve())
    if kind == "hf":
        check_hf_folder(p, text_field)
    spec = CorpusSpec(str(p), glob if kind == "folder" else None, text_field, tokenizer)
    key_src = {"v": FORMAT_VERSION, "spec": spec.to_dict(), "tok": tok_sha,
               "files": file_signature(p, kind, glob), **({"eval_only": True} if eval_only else {})}
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:24]
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    final = root / key
    meta_path = final / "meta.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        _check_size(meta, require)
        return Corpus(final, meta)
    if cache_only_active():  # a plan (dry run): nothing is read or written
        raise CorpusNotCached(spec.path, file_signature(p, kind, glob), final)
    made = [d for d in [root, *root.parents] if not d.exists()]
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        from relpos.corpus.build import _build

        meta = _build(spec, kind, tmp, tok, tok_sha, require, eval_only)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished the same build first: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for d in made:  # folders this call created, innermost first, only if still empty
            try:
                d.rmdir()
            except OSError:
                break
        raise
    return Corpus(final, json.loads((final / "meta.json").read_text()))


_MEMO: dict[tuple[str, str | None, bool], Corpus] = {}


def cached_corpus(spec: CorpusSpec | dict, cache_dir: str | os.PathLike | None = None, *,
                  require: Requirement | None = None, eval_only: bool = False) -> Corpus:
    """:func:`load_corpus` of a spec (a :class:`CorpusSpec` or its dict), memoised per process.

    ``require`` is checked before anything is built (as in :func:`load_corpus`) and on every call.
    """
    d = spec.to_dict() if isinstance(spec, CorpusSpec) else dict(spec)
    key = (json.dumps(d, sort_keys=True), None if cache_dir is None else str(cache_dir), eval_only)
    c = _MEMO.get(key)
    if c is None:
        c = load_corpus(d["path"], glob=d.get("glob"), text_field=d.get("text_field", "text"),
                        tokenizer=d.get("tokenizer"), cache_dir=cache_dir, require=require, eval_only=eval_only)
        if len(_MEMO) > 16:
            _MEMO.clear()
        _MEMO[key] = c
    return c.require(require) if require is not None else c
