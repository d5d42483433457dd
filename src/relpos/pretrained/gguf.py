"""A GGUF file's header, metadata and tensor table, read once and bounded before anything is parsed.

transformers' GGUF support parses a file with ``gguf.GGUFReader`` (one numpy
view per string, about four times per evaluation), before any relpos bound is
checked: an 8 MB file of a million empty strings took minutes and gigabytes.
Here the header's counts are bounded first (:data:`MAX_KV`, :data:`MAX_TENSORS`),
then every key, string and array against the bytes the file still holds and
against :data:`MAX_ITEMS` / :data:`MAX_KEY_ITEMS` / :data:`MAX_STRING` -- so
nothing larger than the file is ever allocated -- and every tensor's declared
bytes against the file's size. The parse is cached per file (size and mtime),
and :func:`relpos.pretrained.gguf_reader.use_parsed_reader` hands
transformers that one parse in place of ``GGUFReader``, so the file is parsed once.

:func:`check_gguf` refuses by name what relpos cannot serve: an architecture
without rotary position encoding (GPT-2, Mamba, ...), a file with no tensors,
a special-token id outside the vocabulary, per-frequency RoPE factors, a RoPE
scaling it cannot apply. :func:`gguf_rope_parameters` reads the
``<arch>.rope.scaling.*`` keys that transformers' GGUF reader drops.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["GGUFHeader", "TensorEntry", "Skipped", "read_gguf_header", "check_gguf", "gguf_rope_parameters",
           "declared_params_check", "MAX_KV", "MAX_TENSORS", "MAX_ITEMS", "MAX_KEY_ITEMS", "MAX_STRING"]

#: metadata keys in one file (real ones have a few dozen)
MAX_KV = 4096
#: tensors in one file (a 1024-layer model with 20 tensors a layer, with room)
MAX_TENSORS = 1 << 16
#: array elements in all the metadata (Gemma 3's tokenizer, the largest published, has about 800k)
MAX_ITEMS = 1 << 22
#: elements of one array that is not one of the tokenizer's vocabulary-sized arrays
MAX_KEY_ITEMS = 1 << 16
#: bytes of one metadata string (chat templates are a few KiB)
MAX_STRING = 1 << 20
#: the tokenizer's arrays that may hold one entry per token (and its byte map)
VOCAB_KEYS = {"tokenizer.ggml.tokens": 1 << 21, "tokenizer.ggml.scores": 1 << 21,
              "tokenizer.ggml.token_type": 1 << 21, "tokenizer.ggml.merges": 1 << 22,
              "tokenizer.ggml.precompiled_charsmap": 1 << 26}

# GGUF value types: the fixed-size ones (struct format), 8 = string, 9 = array
_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_NP = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8",
       12: "<f8"}
STRING, ARRAY = 8, 9
#: arrays longer than this are walked and counted, not kept (a config's arrays hold one value per layer)
KEEP_ITEMS = 4096


class Skipped(int):
    """The length of a metadata array that was walked (bounds checked) but not kept: a vocabulary, merges."""


@dataclass(frozen=True)
class TensorEntry:
    """One row of the tensor table: ``dims`` in GGML order (fastest first), bytes from the data section."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int
    n_elements: int
    n_bytes: int


@dataclass
class GGUFHeader:
    """What :func:`read_gguf_header` read: ``fields`` maps a key to ``(type, element type or None, value)``.

    A value is a Python scalar, ``bytes`` (a string), a numpy array (numbers), a
    list of ``bytes`` (strings), or :class:`Skipped` (the length of an array
    longer than :data:`KEEP_ITEMS`, walked but not kept).
    """

    path: Path
    size: int
    version: int
    fields: dict = field(default_factory=dict)
    tensors: list[TensorEntry] = field(default_factory=list)
    data_start: int = 0
    stamp: tuple = ()

    def get(self, key: str, default=None):
        f = self.fields.get(key)
        if f is None:
            return default
        v = f[2]
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        return v

    @property
    def architecture(self) -> str | None:
        a = self.get("general.architecture")
        return a if isinstance(a, str) else None


class _Bad(ValueError):
    pass


class _Cursor:
    """Reads little-endian values from a buffer; every read is checked against the bytes left."""

    def __init__(self, buf, size: int, where: str) -> None:
        self.buf, self.size, self.pos, self.where = buf, size, 0, where

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise _Bad(f"{what} runs past the end of the file (at byte {self.pos} of {self.size}); "
                       "the file is truncated or not a GGUF model")

    def scalar(self, t: int, what: str):
        fmt = "<" + _FMT[t]
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def string(self, what: str, limit: int = MAX_STRING) -> bytes:
        n = self.scalar(10, what)
        if n > limit:
            raise _Bad(f"{what} is {n} bytes long, more than relpos reads ({limit})")
        self.need(n, what)
        s = bytes(self.buf[self.pos: self.pos + n])
        self.pos += n
        return s


def _value(cur: _Cursor, key: str, t: int, items: list[int]):
    """``(element type or None, value)`` of one metadata value of type ``t``."""
    if t in _FMT:
        return None, cur.scalar(t, f"metadata key {key!r}")
    if t == STRING:
        return None, cur.string(f"metadata key {key!r}")
    if t != ARRAY:
        raise _Bad(f"metadata key {key!r} has value type {t}, which is not a GGUF type")
    et = cur.scalar(4, f"metadata key {key!r}")
    n = cur.scalar(10, f"metadata key {key!r}")
    limit = VOCAB_KEYS.get(key, MAX_KEY_ITEMS)
    if n > limit:
        raise _Bad(f"metadata key {key!r} holds {n} values, more than relpos reads for it "
                   f"({limit}); the file is not a model relpos evaluates")
    items[0] += n
    if items[0] > MAX_ITEMS:
        raise _Bad(f"the metadata holds more than {MAX_ITEMS} values in all; the file is not a "
                   "model relpos evaluates")
    if et in _NP:
        width = np.dtype(_NP[et]).itemsize
        cur.need(n * width, f"metadata key {key!r}")
        arr = np.frombuffer(cur.buf, dtype=_NP[et], count=n, offset=cur.pos).copy() if n <= KEEP_ITEMS \
            else Skipped(n)
        cur.pos += n * width
        return et, arr
    if et != STRING:
        raise _Bad(f"metadata key {key!r} is an array of type {et}; relpos reads arrays of numbers "
                   "or strings only")
    cur.need(8 * n, f"metadata key {key!r}")  # every string has at least its 8-byte length
    keep = n <= KEEP_ITEMS
    out, buf, pos, size, unpack = [], cur.buf, cur.pos, cur.size, struct.Struct("<Q").unpack_from
    for _ in range(n):
        if pos + 8 > size:
            cur.pos = pos
            cur.need(8, f"metadata key {key!r}")
        (m,) = unpack(buf, pos)
        pos += 8
        if m > MAX_STRING or pos + m > size:
            cur.pos = pos
            cur.need(m if m <= MAX_STRING else size, f"a string of metadata key {key!r}")
        if keep:
            out.append(bytes(buf[pos: pos + m]))
        pos += m
    cur.pos = pos
    return et, out if keep else Skipped(n)


def _tensor_bytes(where: str, name: str, dims: tuple[int, ...], t: int) -> tuple[int, int]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType(t)]
    except (ValueError, KeyError):
        raise _Bad(f"tensor {name!r} has GGML type {t}, which the installed gguf package does not "
                   "know") from None
    n = math.prod(dims)
    if dims and dims[0] % block:
        raise _Bad(f"tensor {name!r} has rows of {dims[0]} values, not a multiple of its type's "
                   f"block of {block}")
    return n, n // block * nbytes


def _parse(buf, size: int, where: str) -> GGUFHeader:
    cur = _Cursor(buf, size, where)
    cur.need(24, "the GGUF header")
    if bytes(buf[:4]) != b"GGUF":
        raise _Bad("it does not start with the GGUF magic bytes: not a GGUF file")
    cur.pos = 4
    version = cur.scalar(4, "the version")
    if version & 0xFFFF == 0:
        raise _Bad("it is a big-endian GGUF file; relpos reads little-endian GGUF files only")
    if version not in (2, 3):
        raise _Bad(f"it is GGUF version {version}; relpos reads versions 2 and 3")
    n_tensors, n_kv = cur.scalar(10, "the tensor count"), cur.scalar(10, "the metadata count")
    if n_kv > MAX_KV:
        raise _Bad(f"it declares {n_kv} metadata keys, more than relpos reads ({MAX_KV})")
    if n_tensors > MAX_TENSORS:
        raise _Bad(f"it declares {n_tensors} tensors, more than relpos reads ({MAX_TENSORS})")
    # every key takes at least 12 bytes, every tensor entry at least 24: the counts must fit the file
    if 12 * n_kv + 24 * n_tensors > size - 24:
        raise _Bad(f"it declares {n_kv} metadata keys and {n_tensors} tensors, more than its {size} bytes "
                   "can hold; the file is truncated or not a GGUF model")
    head = GGUFHeader(Path(where), size, version)
    items = [0]
    for _ in range(n_kv):
        key = cur.string("a metadata key name", 65535).decode("utf-8", "replace")
        if key in head.fields:
            raise _Bad(f"metadata key {key!r} appears twice")
        t = cur.scalar(4, f"metadata key {key!r}")
        head.fields[key] = (t, *_value(cur, key, t, items))
    names = set()
    for _ in range(n_tensors):
        name = cur.string("a tensor name", 65535).decode("utf-8", "replace")
        nd = cur.scalar(4, f"tensor {name!r}")
        if not 1 <= nd <= 4:
            raise _Bad(f"tensor {name!r} has {nd} dimensions; GGUF tensors have 1 to 4")
        cur.need(8 * nd + 12, f"tensor {name!r}")
        dims = struct.unpack_from(f"<{nd}Q", buf, cur.pos)
        cur.pos += 8 * nd
        t, off = struct.unpack_from("<IQ", buf, cur.pos)
        cur.pos += 12
        if name in names:
            raise _Bad(f"tensor {name!r} appears twice")
        names.add(name)
        if any(d < 1 or d > 1 << 40 for d in dims):
            raise _Bad(f"tensor {name!r} has dimensions {list(dims)}; each must be in [1, 2**40]")
        n, nb = _tensor_bytes(where, name, dims, t)
        head.tensors.append(TensorEntry(name, tuple(dims), t, off, n, nb))
    align = head.fields.get("general.alignment", (4, None, 32))[2]
    if isinstance(align, bool) or not isinstance(align, int) or align < 1 or align & (align - 1):
        raise _Bad(f"general.alignment must be a power of two, got {align!r}")
    head.data_start = (cur.pos + align - 1) // align * align
    for te in head.tensors:
        end = head.data_start + te.offset + te.n_bytes
        if te.offset % align or end > size:
            raise _Bad(f"tensor {te.name!r} declares {te.n_bytes} bytes at offset {te.offset}, past the "
                       f"end of the file ({size} bytes); the file is truncated or its sizes are false")
    return head


_CACHE: dict = {}


def read_gguf_header(path: str | os.PathLike) -> GGUFHeader:
    """Parse ``path``'s header, metadata and tensor table once (cached while the file is unchanged).

    Raises:
        ValueError: one line naming what is wrong (truncated, a bound passed, a false size).
    """
    p = Path(path)
    st = p.stat()
    stamp = (str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    hit = _CACHE.get("last")
    if hit is not None and hit.stamp == stamp:
        return hit
    where = str(p)
    if st.st_size < 24:
        raise ValueError(f"--hf-model {where!r} does not read as a GGUF model: it is {st.st_size} bytes, shorter "
                         "than a GGUF header")
    try:
        with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            head = _parse(mm, st.st_size, where)
    except _Bad as e:
        raise ValueError(f"--hf-model {where!r} does not read as a GGUF model: "
                         f"{e}") from None
    except OSError as e:
        raise ValueError(f"--hf-model {where!r} could not be read: {e.strerror or e}") from None
    head.stamp = stamp
    _CACHE["last"] = head
    return head


# ------------------------------------------------------------------ what relpos can serve

#: GGUF architecture names transformers spells otherwise
_HF_ARCH = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}
#: tensors holding per-frequency RoPE factors, which transformers' GGUF loader skips
_ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def check_gguf(head: GGUFHeader) -> None:
    """Refuse, in one line naming the key or tensor, a GGUF file relpos cannot evaluate as shipped.

    Refused: no ``general.architecture``; an architecture the installed
    transformers cannot load, or one without rotary position encoding
    ("not a Llama-family model": GPT-2, Mamba, BLOOM, T5, ...); no tensors;
    per-frequency RoPE factor tensors; tokenizer arrays of unequal lengths; a
    special-token id outside the vocabulary; an invalid RoPE scaling
    (:func:`gguf_rope_parameters`).
    """
    from transformers.integrations import GGUF_CONFIG_MAPPING

    where = f"--hf-model {str(head.path)!r}"
    arch = head.architecture
    if not arch:
        raise ValueError(f"{where} has no general.architecture in its metadata: not a GGUF model")
    mapping = GGUF_CONFIG_MAPPING.get(_HF_ARCH.get(arch, arch))
    if mapping is None:
        known = sorted(k for k in GGUF_CONFIG_MAPPING if k not in ("general", "tokenizer"))
        raise ValueError(f"{where} is a {arch!r} model, which the installed transformers cannot load from GGUF "
                         f"(it knows {', '.join(known)})")
    if not any(k.startswith("rope.") for k in mapping):
        raise ValueError(f"{where} is a {arch!r} model, not a Llama-family model: relpos evaluates decoders with "
                         "rotary position encoding (RoPE), such as llama, mistral or qwen2")
    if not head.tensors:
        raise ValueError(f"{where} holds no tensors: it has no weights to evaluate")
    for t in head.tensors:
        if t.name in _ROPE_TENSORS:
            raise ValueError(f"{where} holds per-frequency RoPE factors ({t.name}), which transformers' GGUF "
                             "loader drops; relpos does not evaluate it without them")
    n_tok = _count(head, "tokenizer.ggml.tokens")
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        f = head.fields.get(key)
        if f is not None and n_tok is not None and _count(head, key) != n_tok:
            n = _count(head, key) if f[0] == ARRAY else "no"
            raise ValueError(f"{where}: {key} has {n} entries but tokenizer.ggml.tokens has {n_tok}")
    n_merges = _count(head, "tokenizer.ggml.merges")
    if n_merges is not None and n_merges > 4 * (n_tok or 0) + 1024:  # real tokenizers: at most about 2x
        raise ValueError(f"{where}: tokenizer.ggml.merges has {n_merges} entries for {n_tok or 0} tokens; "
                         "not a tokenizer relpos reads")
    for key, (t, _, v) in head.fields.items():
        if key.startswith("tokenizer.ggml.") and key.endswith("_token_id"):
            if t not in _FMT or isinstance(v, (bool, float)) or (n_tok is not None and not 0 <= v < n_tok) \
                    or v < 0:
                raise ValueError(f"{where}: {key} is {v!r}, outside the vocabulary of {n_tok} tokens")
    gguf_rope_parameters(head)


def _count(head: GGUFHeader, key: str) -> int | None:
    """The length of the array under ``key`` (None if absent or not an array)."""
    f = head.fields.get(key)
    if f is None or f[0] != ARRAY:
        return None
    return int(f[2]) if isinstance(f[2], Skipped) else len(f[2])


def _number(where: str, key: str, v, *, integer: bool = False) -> float:
    ok = (not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating))
          and math.isfinite(float(v)) and float(v) > 0 and (not integer or float(v).is_integer()))
    if not ok:
        raise ValueError(f"{where}: {key} must be {'a positive integer' if integer else 'a finite number > 0'}, "
                         f"got {v!r}")
    return float(v)


def gguf_rope_parameters(head: GGUFHeader) -> dict | None:
    """The RoPE scaling of ``<arch>.rope.scaling.*`` as transformers ``rope_parameters`` keys, or None.

    ``type`` ``linear`` (or the older ``rope.scale_linear`` factor) and ``yarn``
    (``original_context_length``, ``yarn_beta_fast`` / ``yarn_beta_slow``, and
    ``attn_factor``, which llama.cpp multiplies into YaRN's attention scale) are
    applied as shipped; ``none`` or no type with no factor is plain RoPE. A
    factor of 0 means "unset", as in llama.cpp.

    Raises:
        ValueError: an unknown type, a NaN, negative or < 1 factor, a type with
            no factor, a YaRN scaling without its original context, or a
            scaling key relpos cannot apply (named).
    """
    arch = head.architecture
    where = f"--hf-model {str(head.path)!r}"
    pre = f"{arch}.rope.scaling."
    keys = {k[len(pre):]: head.get(k) for k in head.fields if k.startswith(pre)}
    legacy = head.get(f"{arch}.rope.scale_linear")
    rt = keys.pop("type", None)
    keys.pop("finetuned", None)  # informational
    factor = keys.pop("factor", None)
    if legacy is not None:
        if factor is not None:
            raise ValueError(f"{where}: both {arch}.rope.scale_linear and {pre}factor are set; relpos does not "
                             "guess which one holds")
        factor = legacy
        rt = "linear" if rt is None else rt
    if factor is not None and not (isinstance(factor, (int, float)) and not isinstance(factor, bool)
                                   and float(factor) == 0.0):
        factor = _number(where, f"{pre}factor", factor)
        if factor < 1:
            raise ValueError(f"{where}: {pre}factor must be >= 1, got {factor!r}")
    else:
        factor = None
    if rt is None:
        rt = "linear" if factor is not None else "none"  # llama.cpp's default type
    if not isinstance(rt, str):
        raise ValueError(f"{where}: {pre}type must be a string, got {rt!r}")
    if rt == "none":
        if factor not in (None, 1.0) or keys:
            raise ValueError(f"{where}: {pre}type is 'none' but {pre}{'factor' if factor else next(iter(keys))} "
                             "is set; relpos does not guess which one holds")
        return None
    if rt in ("longrope", "llama3"):
        raise ValueError(f"{where}: {pre}type {rt!r} needs factors that transformers' GGUF loader drops; relpos "
                         "does not evaluate it as shipped")
    if rt not in ("linear", "yarn"):
        raise ValueError(f"{where}: {pre}type {rt!r} is not a RoPE scaling relpos applies (it applies none, "
                         "linear and yarn from a GGUF file)")
    if factor is None:
        raise ValueError(f"{where}: {pre}type is {rt!r} but {pre}factor is missing")
    out = {"rope_type": rt, "factor": factor}
    if rt == "yarn":
        o = keys.pop("original_context_length", None)
        if o is None:
            raise ValueError(f"{where}: {pre}type is 'yarn' but {pre}original_context_length is missing")
        out["original_max_position_embeddings"] = int(_number(where, f"{pre}original_context_length", o,
                                                              integer=True))
        for k, hf in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            if k in keys:
                out[hf] = _number(where, pre + k, keys.pop(k))
        if "attn_factor" in keys:
            a = _number(where, f"{pre}attn_factor", keys.pop("attn_factor"))
            out["attention_factor"] = a * (0.1 * math.log(factor) + 1.0)
    keys.pop("original_context_length", None) if rt == "linear" else None
    if keys:
        k = sorted(keys)[0]
        raise ValueError(f"{where}: {pre}{k} is set, and relpos cannot apply it as shipped")
    return out


def declared_params_check(head: GGUFHeader, n_params: int) -> None:
    """Refuse a config that declares more parameters than the file's tensors hold (before any allocation)."""
    have = sum(t.n_elements for t in head.tensors)
    if n_params > 1.1 * have + 4096:
        raise ValueError(f"--hf-model {str(head.path)!r}: its metadata describes about {n_params:.3g} parameters "
                         f"but its tensors hold only {have:.3g} values ({head.size} bytes); weights are missing")
