"""Deprecated alias of :mod:`relpos.report.results_page`, kept for one release (``python -m relpos.experiments.results_page``)."""

import sys

from relpos.report.results_page import main

if __name__ == "__main__":
    sys.exit(main())
else:
    from relpos import report as _pkg

    sys.modules[__name__] = getattr(_pkg, "results_page")
