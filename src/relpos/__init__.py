"""relpos: relative position encodings for Transformer attention.

The public surface:

* :func:`relpos.attention` -- one attention entry point for every scheme.
* :func:`relpos.make_encoding` / :data:`relpos.SCHEMES` -- build a scheme by name.
* :mod:`relpos.distance` -- pure functions (offsets, clipping, buckets, slopes).
* :mod:`relpos.offsets` -- per-offset terms laid out on (query, key) pairs: Toeplitz, skew, unskew.
* :mod:`relpos.nn` -- the attention layer and cache for your own model (``docs/use.md``).
* :mod:`relpos.hf` -- put a scheme into a Hugging Face Llama-family model (optional extra).
"""

from relpos import distance
from relpos.attention import attention
from relpos.encodings import SCHEMES, Encoding, make_encoding

__all__ = ["attention", "distance", "Encoding", "SCHEMES", "make_encoding"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # relpos.nn and relpos.hf load on first use (relpos.hf imports transformers lazily)
    if name in ("nn", "hf"):
        import importlib

        return importlib.import_module(f"relpos.{name}")
    raise AttributeError(f"module 'relpos' has no attribute {name!r}")
