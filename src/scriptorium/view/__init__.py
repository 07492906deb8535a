"""Look at it: a session's DAG drawn with what memory did with every turn.

``session_model`` builds the data (from the session store and the memory workspace),
``write_page`` writes one self-contained HTML page, ``ViewServer`` serves the pages of a
home on 127.0.0.1.
"""

from .model import session_model
from .page import render_page, write_page
from .serve import ViewServer

__all__ = ["session_model", "render_page", "write_page", "ViewServer"]
