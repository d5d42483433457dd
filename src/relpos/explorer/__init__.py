"""``relpos explore``: an interactive page that shows how relative positions work.

The page (``static/``) draws what the JSON API (:mod:`relpos.explorer.api`)
computes with relpos itself; :mod:`relpos.explorer.server` serves both on
127.0.0.1 with the standard library only, and :mod:`relpos.explorer.export`
writes one self-contained HTML file with a snapshot of the data.
"""

from relpos.explorer.api import ApiError, Explorer, Limits
from relpos.explorer.export import export_html
from relpos.explorer.server import make_server, serve

__all__ = ["ApiError", "Explorer", "Limits", "export_html", "make_server", "serve"]
