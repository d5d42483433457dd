"""Deprecated alias of :mod:`relpos.pretrained.sweep`, kept for one release (``python -m relpos.experiments.hf_report``)."""

import sys

from relpos.commands.hf import main

if __name__ == "__main__":
    sys.exit(main())
else:
    from relpos import pretrained as _pkg

    sys.modules[__name__] = getattr(_pkg, "sweep")
