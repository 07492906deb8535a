"""Reading memory back: BM25 (SQLite FTS5) search over topic claims and archived turns, an
optional local embedding search fused by reciprocal rank, and following a hit to its turn.

The index is derived (``.scriptorium/search.sqlite``): :func:`attach` keeps it current inside
every installed transaction, and every query re-reads files whose fingerprint changed, so it
is rebuilt from the files whenever it is missing or stale.

A PostgreSQL home's workspace carries its own index (``pg_search_index``, a
:class:`~.pg_index.PgSearchIndex`: tsvector + GIN in the home's schema); the functions here
hand such a workspace to it, so callers never ask which kind of home they hold.
"""

from __future__ import annotations

import logging
from typing import Any

from ..catalog import TopicCatalog
from .embedding import Embedder, EmbeddingUnavailable, load_embedder, rrf_fuse
from .follow import follow
from .index import SearchIndex
from .query import Hit, search as _search_files

log = logging.getLogger(__name__)


def _pg_index(workspace: Any) -> Any | None:
    """The PostgreSQL index a PostgreSQL workspace carries (None for a directory one). A
    PostgreSQL workspace without one gets one over its ``memory_files`` rows, updated inside
    every write's own database transaction (its ``add_transaction_hook``)."""
    index = getattr(workspace, "pg_search_index", None)
    if index is None and getattr(workspace, "engine", "directory") == "postgresql":
        from .pg_index import PgSearchIndex
        from .pg_source import PgFilesSource

        index = workspace.pg_search_index = PgSearchIndex(workspace.pg,
                                                          PgFilesSource(workspace))
        workspace.add_transaction_hook(index.transaction_hook)
    return index


def search(workspace: Any, query: str, **kw: Any) -> list[Hit]:
    """Search memory (see :func:`.query.search` for the arguments), on whichever index the
    workspace's home keeps."""
    index = _pg_index(workspace)
    if index is None:
        return _search_files(workspace, query, **kw)
    from .pg_query import pg_search

    return pg_search(index, query, **kw)


__all__ = ["Embedder", "EmbeddingUnavailable", "Hit", "SearchIndex", "attach", "follow",
           "load_embedder", "rebuild", "rrf_fuse", "search", "settle", "update_index"]

def update_index(workspace: Any, result: Any) -> None:
    """Install hook: re-index the files a transaction changed. It never fails the install
    (the index is derived); if the update fails the index is thrown away and the next query
    rebuilds it from the files."""
    pg_index = _pg_index(workspace)
    if pg_index is not None:
        pg_index.install_hook(workspace, result)
        return
    index = SearchIndex.of(workspace)
    try:
        index.update(getattr(result, "changed_files", ()) or (),
                     getattr(result, "parsed", None), TopicCatalog.of(workspace).resolutions)
    except Exception as exc:  # noqa: BLE001 - a derived view must not break a write
        log.warning("search index update failed (%s: %s); it will be rebuilt",
                    type(exc).__name__, exc)
        try:
            index.discard()
        except OSError:
            pass


def attach(workspace: Any) -> None:
    """Keep ``workspace``'s search index current inside every installed transaction.
    Calling it again for the same workspace object does nothing (hooks register once). A
    PostgreSQL workspace's index is kept inside each write's transaction instead."""
    if getattr(workspace, "engine", "directory") == "postgresql":
        _pg_index(workspace)
        return
    workspace.add_install_hook(update_index)


def settle(workspace: Any) -> None:
    """Let ``workspace``'s index connection give back the pages its updates cached and
    mapped (see :func:`.indexfile.settle`): a process writing session after session then
    holds what one write needs, not every page the writes so far touched. A PostgreSQL
    home keeps its index in the server: nothing to give back here."""
    if getattr(workspace, "engine", "directory") == "postgresql":
        return
    SearchIndex.of(workspace).settle()


def rebuild(workspace: Any, include_sources: bool | None = None) -> int:
    """Rebuild the index from the files; returns the number of documents indexed."""
    pg_index = _pg_index(workspace)
    if pg_index is not None:
        return int(pg_index.rebuild(include_sources))
    return SearchIndex.of(workspace).rebuild(include_sources)
