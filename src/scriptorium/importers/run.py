"""Running an import: files in, one report per source file out.

For every source file: skip it when the ledger says nothing changed (one ``stat``); else read
from where the last run stopped (from the start when the file was rewritten in place), feed
the parser's items to the session's graph under the session lock, make the nodes durable,
then save the graph state and the file's new offset, in that order. A line that is not JSON
is counted and reported with its line number; a file that is not JSON Lines at all (a
pretty-printed document) fails alone with a clear message, and the other files go on.
A last line without its newline is left for the next run unless it is already a whole JSON
object (a transcript being written right now).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Protocol

from ..errors import InvalidInput, ReasonCode, ScriptoriumError
from ..sessions import SessionStore
from .graph import Item, SessionGraph, has_lone_surrogate_escape, scrub
from .ledger import FileState, Ledger, head_hash

MAX_ERRORS_LISTED = 5


@dataclass
class FileReport:
    """What one source file contributed (DESIGN §7 shape, plus a few extra keys)."""

    path: str
    sessions_created: int = 0
    sessions_updated: int = 0
    nodes_added: int = 0
    forks: int = 0
    skipped: Counter = field(default_factory=Counter)
    unchanged: bool = False
    rewritten: bool = False
    dangling_parents: int = 0
    replaced_characters: int = 0  # lone surrogates in the source, kept as U+FFFD
    sessions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path, "sessions_created": self.sessions_created,
            "sessions_updated": self.sessions_updated, "nodes_added": self.nodes_added,
            "forks": self.forks, "skipped": dict(sorted(self.skipped.items())),
            "unchanged": self.unchanged, "sessions": sorted(set(self.sessions))}
        if self.rewritten:
            out["rewritten"] = True
        if self.dangling_parents:
            out["dangling_parents"] = self.dangling_parents
        if self.replaced_characters:
            out["replaced_characters"] = self.replaced_characters
        if self.errors:
            out["errors"] = self.errors
        return out


class LineParser(Protocol):
    """A JSON Lines format: which session a new file feeds, and each line's items."""

    kind: str

    def session_of(self, path: Path) -> str | None: ...

    def title_of(self, path: Path) -> str: ...

    def items(self, graph: SessionGraph, obj: dict, lineno: int) -> Iterator[Item]: ...

    def finish(self, graph: SessionGraph) -> None: ...


def open_ledger(store: SessionStore, home: Path | str, kind: str) -> Ledger:
    """The ledger of the home ``store`` belongs to: a PostgreSQL home's tables when the store
    is a PostgreSQL store (it has ``pg``), else ``home/imports/state.sqlite``."""
    pg = getattr(store, "pg", None)
    if pg is not None:
        from .ledger_pg import PgLedger

        return PgLedger(pg, kind)
    from .ledger_sqlite import SqliteLedger

    return SqliteLedger(Path(home), kind)


class Importer:
    """Shared machinery: the ledger, the store, sessions opened and graphs saved."""

    def __init__(self, store: SessionStore, home: Path | str, kind: str):
        self.store = store
        self.kind = kind
        self.ledger = open_ledger(store, home, kind)
        self.added_by_session: dict[str, int] = {}

    # --- sessions -------------------------------------------------------------------------
    def open_session(self, sid: str, title: str, report: FileReport, **meta: Any) -> bool:
        """Create ``sid`` if needed; True when it is new."""
        report.sessions.append(sid)
        if self.store.exists(sid):
            return False
        title, replaced = scrub(title[:120])
        meta, more = scrub(meta)
        report.replaced_characters += replaced + more
        self.store.create_session(sid, title=title, imported_from=self.kind, **meta)
        report.sessions_created += 1
        return True

    def run_graph(self, sid: str, report: FileReport, created: bool, feed: Any,
                  title: str = "") -> SessionGraph:
        """Let ``feed(graph)`` add items to ``sid`` under one session lock; the nodes are
        durable when this returns, and the graph state is written in the ledger's open
        transaction (the caller commits it). ``title`` names a still untitled session (one
        first created by a sub-agent file)."""
        state = self.ledger.session(sid)
        graph = SessionGraph(state, self.kind)
        with self.store.bulk(sid) as bulk:
            graph.bulk = bulk
            feed(graph)
            if title and not bulk.title and graph.added:
                bulk.update_meta(title=scrub(title[:120])[0])
        graph.bulk = None
        state.save_extra()
        report.nodes_added += graph.added
        report.forks += graph.forks
        report.dangling_parents += graph.dangling
        report.skipped.update(graph.skipped)
        if graph.added:
            if not created:
                report.sessions_updated += 1
            self.added_by_session[sid] = self.added_by_session.get(sid, 0) + graph.added
        return graph

    def commit(self) -> None:
        """One git commit per session that received nodes in this run."""
        if self.store.git:
            for sid, added in self.added_by_session.items():
                self.store.commit_turn(sid, f"import {self.kind}: {added} node(s)")

    @property
    def changed_sessions(self) -> list[str]:
        return list(self.added_by_session)

    # --- JSON Lines files -----------------------------------------------------------------
    def import_jsonl(self, path: Path, parser: LineParser) -> FileReport:
        report = FileReport(str(path))
        try:
            self.ledger.begin()
            self._import_jsonl(path, parser, report)
            self.ledger.commit()
        except ScriptoriumError as exc:
            self.ledger.rollback()
            if exc.code == ReasonCode.DATABASE_UNREACHABLE:
                raise  # the home itself is gone: no other file can go on either
            message = str(exc)
            report.errors.append(message if message.startswith(str(path)) else
                                 f"{path}: {message}")
        except OSError as exc:
            self.ledger.rollback()
            report.errors.append(f"{path}: cannot read: {exc.strerror or exc}")
        except BaseException:
            self.ledger.rollback()
            raise
        return report

    def _import_jsonl(self, path: Path, parser: LineParser, report: FileReport) -> None:
        st = os.stat(path)
        if self.ledger.unchanged(path, st):
            report.unchanged = True
            return
        old = self.ledger.get(path)
        offset, lines, sid, parse = 0, 0, None, {}
        if old is not None and old.offset <= st.st_size and old.session_id and (
                old.offset == 0 or head_hash(path, old.offset) == old.head):
            offset, lines, sid, parse = old.offset, old.lines, old.session_id, dict(old.parse)
        elif old is not None and old.offset:
            report.rewritten = True  # rewritten in place: read it again from the start
        if sid is None:
            _check_jsonl(path)
            sid = parser.session_of(path)
            if sid is None:
                raise InvalidInput(f"no session found in {path} (is it a {self.kind} file?)")
        title = parser.title_of(path) if offset == 0 else ""
        created = self.open_session(sid, title, report)
        end = {"offset": offset, "lines": lines}

        def feed(graph: SessionGraph) -> None:
            graph.file = parse
            for lineno, obj, next_offset in _lines(path, offset, st.st_size, lines, report):
                if obj is not None:
                    for item in parser.items(graph, obj, lineno):
                        graph.add(item)
                end["offset"], end["lines"] = next_offset, lineno
            parser.finish(graph)

        self.run_graph(sid, report, created, feed, title)
        if end["offset"] == 0 and report.errors:
            return  # nothing readable: leave the file for a fixed re-run
        self.ledger.put(path, FileState(
            size=st.st_size, mtime_ns=st.st_mtime_ns, inode=st.st_ino, offset=end["offset"],
            lines=end["lines"], head=head_hash(path, end["offset"]), session_id=sid,
            parse=parse))


def _lines(path: Path, offset: int, size: int, lines: int,
           report: FileReport) -> Iterator[tuple[int, dict | None, int]]:
    """``(line number, object or None, offset after the line)`` from ``offset`` to ``size``.

    Streams one line at a time. A line that is not a JSON object is reported and yields None;
    a file whose first line is not JSON stops at once (it is not JSON Lines).
    """
    lineno = lines
    with open(path, "rb") as fh:
        fh.seek(offset)
        pos = offset
        while pos < size:
            raw = fh.readline(size - pos)
            if not raw:
                break
            complete = raw.endswith(b"\n")
            lineno += 1
            stripped = raw.strip()
            if not stripped:
                pos += len(raw)
                if complete:
                    yield lineno, None, pos
                continue
            try:
                obj = json.loads(stripped)
            except (ValueError, UnicodeDecodeError) as exc:
                if not complete:  # half-written: the next run reads it whole
                    report.skipped["incomplete_last_line"] += 1
                    return
                if lineno == 1 and stripped in (b"{", b"["):
                    raise InvalidInput(f"{path}:1: not JSON Lines (one JSON document over "
                                       f"many lines?)") from None
                _error(report, f"{path}:{lineno}: not JSON ({exc})")
                report.skipped["malformed_line"] += 1
                pos += len(raw)
                yield lineno, None, pos
                continue
            pos += len(raw)
            if has_lone_surrogate_escape(stripped):
                obj, replaced = scrub(obj)
                report.replaced_characters += replaced
            if not isinstance(obj, dict):
                _error(report, f"{path}:{lineno}: not a JSON object")
                report.skipped["malformed_line"] += 1
                yield lineno, None, pos
                continue
            yield lineno, obj, pos


def _check_jsonl(path: Path) -> None:
    """Refuse a file whose first line opens a JSON document spread over many lines, before
    any session is made for it."""
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.strip():
                if raw.strip() in (b"{", b"["):
                    raise InvalidInput(f"{path}:1: not JSON Lines (one JSON document over "
                                       f"many lines?)")
                return


def _error(report: FileReport, message: str) -> None:
    if len(report.errors) < MAX_ERRORS_LISTED:
        report.errors.append(message)


def walk(paths: list[Path], suffix: str) -> list[Path]:
    """Files ending in ``suffix`` under ``paths`` (files taken as given), symlinked
    directories never followed, sorted; a path that does not exist is an error."""
    out: list[Path] = []
    for p in paths:
        p = Path(p).expanduser()
        if p.is_file():
            out.append(p.resolve())
            continue
        if not p.is_dir():
            raise InvalidInput(f"no such file or directory: {p}")
        for dirpath, dirnames, filenames in os.walk(p, followlinks=False):
            dirnames.sort()
            for name in sorted(filenames):
                full = Path(dirpath) / name
                if name.endswith(suffix) and full.is_file() and not full.is_symlink():
                    out.append(full.resolve())
    return out
