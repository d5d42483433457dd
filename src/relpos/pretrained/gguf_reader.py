"""transformers' GGUF loader reads relpos's one bounded parse (:mod:`relpos.pretrained.gguf`), not the file.

transformers builds a GGUF model's config and weights with ``gguf.GGUFReader``,
which makes a numpy view of every string of the metadata (minutes for a
million strings) and is called once per config, tokenizer and model.
:func:`use_parsed_reader` makes ``gguf.GGUFReader(path)`` return a
:class:`ParsedReader` of the header already read and checked: the same
``fields`` (less the vocabulary-sized arrays, which the config and the weights
never read) and ``tensors`` (memory-mapped, as ``GGUFReader`` maps them).
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from relpos.pretrained.gguf import ARRAY, STRING, GGUFHeader, Skipped, _count

__all__ = ["ParsedReader", "use_parsed_reader"]

class _Field:
    """What transformers' GGUF loader reads of ``gguf.ReaderField``: ``parts``, ``data``, ``types``."""

    __slots__ = ("name", "offset", "parts", "data", "types")

    def __init__(self, name: str, t: int, et, v) -> None:
        self.name, self.offset = name, 0
        if t == ARRAY:
            vals = v if isinstance(v, list) else [(x,) for x in v.tolist()]
            self.parts, self.data = vals, range(len(vals))
            self.types = [ARRAY] + ([et] if len(vals) else [])
        else:
            self.parts, self.data, self.types = [v if t == STRING else (v,)], [0], [t]


class ParsedReader:
    """``gguf.GGUFReader``'s ``fields`` and ``tensors`` from one :class:`GGUFHeader` (tensor data memory-mapped)."""

    def __init__(self, head: GGUFHeader) -> None:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        self.fields = {"GGUF.version": _Field("GGUF.version", 4, None, head.version),
                       "GGUF.tensor_count": _Field("GGUF.tensor_count", 10, None, len(head.tensors)),
                       "GGUF.kv_count": _Field("GGUF.kv_count", 10, None, len(head.fields))}
        for k, (t, et, v) in head.fields.items():
            if not isinstance(v, Skipped):  # a vocabulary or merges: transformers' config and weights never read it
                self.fields[k] = _Field(k, t, et, v)
        arch, n_tok = head.architecture, _count(head, "tokenizer.ggml.tokens")
        if arch and f"{arch}.vocab_size" not in self.fields and n_tok is not None:
            # transformers takes the vocabulary size from the token list when the metadata has none
            self.fields[f"{arch}.vocab_size"] = _Field(f"{arch}.vocab_size", 4, None, n_tok)
        self.data = np.memmap(head.path, mode="r")
        self.tensors = []
        simple = {0: np.float32, 1: np.float16, 24: np.int8, 25: np.int16, 26: np.int32, 27: np.int64,
                  28: np.float64}
        from types import SimpleNamespace

        for te in head.tensors:
            qt = GGMLQuantizationType(te.ggml_type)
            shape = tuple(reversed(te.dims))
            start = head.data_start + te.offset
            raw = self.data[start: start + te.n_bytes]
            if te.ggml_type in simple:
                arr = raw.view(simple[te.ggml_type]).reshape(shape)
            else:
                block, nb = GGML_QUANT_SIZES[qt]
                arr = raw.reshape(*shape[:-1], shape[-1] // block * nb)
            self.tensors.append(SimpleNamespace(name=te.name, tensor_type=qt, shape=np.array(te.dims),
                                                n_elements=te.n_elements, n_bytes=te.n_bytes,
                                                data_offset=start, data=arr))

    def get_field(self, key):
        return self.fields.get(key)


@contextlib.contextmanager
def use_parsed_reader(head: GGUFHeader):
    """While inside, ``gguf.GGUFReader(head.path)`` returns the parse of ``head`` (other paths read as usual)."""
    import gguf

    old = gguf.GGUFReader
    reader = []

    def make(path, *a, **kw):
        try:
            same = os.path.samefile(path, head.path)
        except OSError:
            same = False
        if not same:
            return old(path, *a, **kw)
        if not reader:
            reader.append(ParsedReader(head))
        return reader[0]

    gguf.GGUFReader = make
    try:
        with _one_name_map():
            yield
    finally:
        gguf.GGUFReader = old


@contextlib.contextmanager
def _one_name_map():
    """While inside, ``gguf.get_tensor_name_map(arch, n_blocks)`` is built once per argument pair: transformers'
    GGUF loader asks for it again for every module of the model (about 30 ms each, 400 modules in a 30-layer
    Llama), and the map is only read."""
    import functools

    import gguf

    old = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(old)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = old


def unexpected_tensors(head: GGUFHeader, model) -> list[str]:
    """Tensors of the file that transformers' GGUF loader skips for ``model`` (it skips them without a word).

    A GGUF tensor the model has no parameter for -- biases on a model built
    without them, a tensor of another architecture -- would leave the model
    evaluated without it. Checked where the architecture's tensor processor
    keeps the file's names (the plain and the Llama processors); processors that
    merge or rename tensors (mixtures of experts) are not checked here.
    """
    from transformers import modeling_gguf_pytorch_utils as m

    cls = m.TENSOR_PROCESSORS.get(head.architecture, m.TensorProcessor)
    if cls not in (m.TensorProcessor, getattr(m, "LlamaTensorProcessor", m.TensorProcessor)):
        return []
    with _one_name_map():
        mapping = m.get_gguf_hf_weights_map(model, cls(config={}))
    return [t.name for t in head.tensors if t.name not in mapping]
