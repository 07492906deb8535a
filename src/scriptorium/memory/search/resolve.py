"""Resolving the footnotes of a topic to the archived turns they cite, once per update.

A claim's document needs, of each turn it cites, its source id, whether it is trusted and who
said it. A topic file cites dozens of turns of the same session, and a build cites every
session: asking the archive per footnote parsed each session's file again and again.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ..sources import SourceArchive
from .documents import speaker_keys

_Facts = tuple[bool, list[str]]  # what a claim needs of a turn it cites: trusted, speaker keys


class Resolver:
    """Footnote targets -> (source id, trusted), for one update.

    Same answers as ``SourceArchive.resolve_target`` + ``lookup``, but a link into a v2
    archive file loads that file's frames once (through the archive's own cached, symlink-
    refusing reader) instead of once per footnote: a topic file cites dozens of turns of the
    same session, and per-footnote lookups were most of the cost of an install-hook update.
    Anything else (plain handles, legacy files) goes to the archive as is.
    """

    def __init__(self, sources: SourceArchive):
        self.sources = sources
        # per archive file: anchor -> (source id, what claims need of the frame); only these
        # small tuples are kept (not the frames and their text: a build reads every file)
        self._files: dict[str, dict[str, tuple[str, _Facts]]] = {}
        self._facts: dict[str, _Facts] = {}  # source id -> (trusted, speaker keys)
        self._links: dict[tuple[str, str], str | None] = {}  # (topic, link) -> v2 file

    @staticmethod
    def _facts_of(frame: Any) -> "_Facts":
        return bool(frame.trusted), speaker_keys(frame)

    def _anchors(self, rel: str) -> dict[str, tuple[str, "_Facts"]]:
        if rel not in self._files:
            by_anchor: dict[str, tuple[str, _Facts]] = {}
            for frame in self.sources.file_status(rel).frames:
                if frame.anchor not in by_anchor:
                    by_anchor[frame.anchor] = (frame.source_id, self._facts_of(frame))
            self._files[rel] = by_anchor
        return self._files[rel]

    def _v2_file(self, topic_path: str, link: str) -> str | None:
        """The v2 archive file ``link`` names from ``topic_path``'s folder, or None (cached:
        a topic's footnotes name the same few files)."""
        key = (topic_path, link)
        if key not in self._links:
            rel = posixpath.normpath(posixpath.join(posixpath.dirname(topic_path), link))
            parts = rel.split("/")
            self._links[key] = rel if len(parts) == 4 and parts[0] == "sources" \
                and parts[2] == "_v2" else None
        return self._links[key]

    def resolve(self, topic_path: str, target: str) -> str | None:
        link, sep, frag = target.partition("#")
        if sep and link.endswith(".md") and frag.startswith("source-"):
            rel = self._v2_file(topic_path, link)
            if rel is not None:
                found = self._anchors(rel).get(frag)
                if found is not None:
                    self._facts[found[0]] = found[1]
                    return found[0]
        return self.sources.resolve_target(topic_path, target)

    def _lookup(self, source_id: str) -> "_Facts | None":
        if source_id not in self._facts:
            frame = self.sources.lookup(source_id)
            if frame is None:
                return None
            self._facts[source_id] = self._facts_of(frame)
        return self._facts[source_id]

    def trusted(self, source_id: str) -> bool | None:
        facts = self._lookup(source_id)
        return None if facts is None else facts[0]

    def speakers(self, source_id: str) -> list[str]:
        facts = self._lookup(source_id)
        return [] if facts is None else facts[1]
