"""relpos: relative position encodings for Transformer attention.

The public surface:

* :func:`relpos.attention` -- one attention entry point for every scheme.
* :func:`relpos.make_encoding` / :data:`relpos.SCHEMES` -- build a scheme by name.
* :mod:`relpos.distance` -- pure functions (offsets, clipping, buckets, slopes).
"""

from relpos import distance
from relpos.attention import attention
from relpos.encodings import SCHEMES, Encoding, make_encoding

__all__ = ["attention", "distance", "Encoding", "SCHEMES", "make_encoding"]
__version__ = "0.1.0"
