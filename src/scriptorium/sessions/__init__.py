"""The DAG session store: nodes on disk, an incrementally refreshed index cache, git per
turn, forks, rewind, spawn, compaction, the metadata-merge path marks use, head-move events;
and the same store on a PostgreSQL home (``PgSessionStore.open(url)``, the ``postgres``
extra).

    from scriptorium.sessions import SessionStore, Node
"""

from .errors import (AppendRefused, BrokenChain, HeadRefused, NodeNotFound,  # noqa: F401
                     SessionNotFound)
from .checks import Added  # noqa: F401
from .node import ROOT, Node  # noqa: F401
from .pg_store import PgSessionStore  # noqa: F401  (psycopg is imported only when used)
from .store import SessionStore  # noqa: F401

__all__ = ["SessionStore", "PgSessionStore", "Node", "ROOT", "SessionNotFound", "NodeNotFound",
           "AppendRefused", "HeadRefused", "BrokenChain", "Added"]
