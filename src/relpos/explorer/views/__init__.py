"""One module per view of the explorer. Each exposes ``answer(explorer, params) -> dict``.

To add a view: write ``views/<name>.py`` with ``ROUTE`` (the API route) and
``answer``, list it in :data:`VIEW_MODULES`, and add its page module under
``static/views/`` (see docs/extending.md).
"""

from __future__ import annotations

from relpos.explorer.views import attention, bias, compose, extrapolation, offsets, rope, shift

#: The view modules, in the order of the page's tabs.
VIEW_MODULES = (compose, offsets, bias, shift, extrapolation, attention, rope)  # rope: a section of view 2

__all__ = ["VIEW_MODULES"]
