"""Deprecated alias of :mod:`relpos.compare.merge`, kept for one release (``python -m relpos.experiments.merge``)."""

import sys

from relpos.compare.merge import main

if __name__ == "__main__":
    sys.exit(main())
else:
    from relpos import compare as _pkg

    sys.modules[__name__] = getattr(_pkg, "merge")
