"""Telling in-process listeners about head moves, shared by both session stores.

A listener hears ``(session, old head, new head)`` after the move is durable (after the
directory store's lock is released, after the PostgreSQL store's transaction committed), so
what it reads back is what it was told. Other processes learn moves from the store's own log
(a file log, or a table with NOTIFY).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable

log = logging.getLogger(__name__)

HeadListener = Callable[[str, "str | None", "str | None"], None]
HeadMoves = list[tuple[str, "str | None", "str | None"]]


class HeadAnnouncer:
    """Mixed into a store that sets ``self._listeners = []`` in its constructor."""

    _listeners: list[HeadListener]

    def _announce(self, events: HeadMoves) -> None:
        for sid, old, new in events:
            for cb in list(self._listeners):
                try:
                    cb(sid, old, new)
                except Exception:  # a listener must not undo a durable write
                    log.exception("head-move listener failed for session %s", sid)

    def subscribe(self, callback: HeadListener) -> Callable[[], None]:
        """Call ``callback(sid, old_head, new_head)`` after every head move this store makes;
        returns the function that unsubscribes."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return unsubscribe
