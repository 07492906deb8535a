"""Reading memory back: BM25 (SQLite FTS5) search over topic claims and archived turns, an
optional local embedding search fused by reciprocal rank, and following a hit to its turn.

The index is derived (``.scriptorium/search.sqlite``): :func:`attach` keeps it current inside
every installed transaction, and every query re-reads files whose fingerprint changed, so it
is rebuilt from the files whenever it is missing or stale.
"""

from __future__ import annotations

import logging
from typing import Any

from .embedding import Embedder, EmbeddingUnavailable, load_embedder, rrf_fuse
from .follow import follow
from .index import SearchIndex
from .query import Hit, search

log = logging.getLogger(__name__)

__all__ = ["Embedder", "EmbeddingUnavailable", "Hit", "SearchIndex", "attach", "follow",
           "load_embedder", "rebuild", "rrf_fuse", "search", "update_index"]

def update_index(workspace: Any, result: Any) -> None:
    """Install hook: re-index the files a transaction changed. It never fails the install
    (the index is derived); if the update fails the index is thrown away and the next query
    rebuilds it from the files."""
    index = SearchIndex.of(workspace)
    try:
        index.update(getattr(result, "changed_files", ()) or ())
    except Exception as exc:  # noqa: BLE001 - a derived view must not break a write
        log.warning("search index update failed (%s: %s); it will be rebuilt",
                    type(exc).__name__, exc)
        try:
            index.discard()
        except OSError:
            pass


def attach(workspace: Any) -> None:
    """Keep ``workspace``'s search index current inside every installed transaction.
    Calling it again for the same workspace object does nothing (hooks register once)."""
    workspace.add_install_hook(update_index)


def rebuild(workspace: Any, include_sources: bool | None = None) -> int:
    """Rebuild the index from the files; returns the number of documents indexed."""
    return SearchIndex.of(workspace).rebuild(include_sources)
