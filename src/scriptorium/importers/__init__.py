"""Importers: Claude Code, pi, Codex and ChatGPT conversations as DAG sessions, kept in sync.

    from scriptorium.importers import import_sources
    result = import_sources(store, home, "claude-code", ["~/.claude/projects"])
    for row in result.files: print(row.to_dict())

Each format module turns source lines into items (:mod:`.graph` explains the mapping);
:mod:`.run` reads files incrementally and :mod:`.ledger` keeps the bookkeeping inside the
home (a directory home's ``imports/state.sqlite``, or a PostgreSQL home's tables). The formats and what we map them to are described in ``docs/importers.md``.
This package imports only the session store and the shared errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..errors import InvalidInput
from ..sessions import SessionStore
from . import chatgpt, claude_code, codex, pi
from .run import FileReport, Importer

KINDS = ("claude-code", "pi", "codex", "chatgpt")
DEFAULT_PATHS = {"claude-code": claude_code.DEFAULT_PATH, "pi": pi.DEFAULT_PATH,
                 "codex": codex.DEFAULT_PATH}
_LINE_FORMATS = {"claude-code": (claude_code.ClaudeCodeParser, claude_code.discover),
                 "pi": (pi.PiParser, pi.discover), "codex": (codex.CodexParser, codex.discover)}

__all__ = ["KINDS", "DEFAULT_PATHS", "ImportResult", "FileReport", "import_sources"]


@dataclass
class ImportResult:
    """Per source file reports, and the sessions that received new nodes."""

    kind: str
    files: list[FileReport] = field(default_factory=list)
    changed_sessions: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [e for f in self.files for e in f.errors]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "files": [f.to_dict() for f in self.files],
                "changed_sessions": self.changed_sessions,
                "nodes_added": sum(f.nodes_added for f in self.files)}


def import_sources(store: SessionStore, home: Path | str, kind: str,
                   paths: Iterable[Path | str] | None = None) -> ImportResult:
    """Import (or bring up to date) the sources of format ``kind`` under ``paths``.

    ``paths`` defaults to the tool's own session directory (ChatGPT needs a file). A file
    that fails is reported in its row (``errors``) and the others go on. ``home`` is the
    directory home's path; a PostgreSQL store keeps the bookkeeping in its own home's tables.
    """
    if kind not in KINDS:
        raise InvalidInput(f"unknown import kind {kind!r}: expected one of {', '.join(KINDS)}")
    given = [Path(p).expanduser() for p in (paths or [])]
    if not given:
        if kind == "chatgpt":
            raise InvalidInput("import chatgpt needs the export's conversations.json or zip")
        given = [Path(DEFAULT_PATHS[kind]).expanduser()]
    result = ImportResult(kind)
    if kind == "chatgpt":
        for path in given:
            if not path.is_file():
                raise InvalidInput(f"no such file: {path}")
        imp: Importer = chatgpt.ChatGPTImporter(store, home, kind)
        try:
            for path in given:
                result.files.append(imp.import_file(path.resolve()))
        finally:
            imp.ledger.close()
    else:
        parser_cls, discover = _LINE_FORMATS[kind]
        files = discover(given)
        imp = Importer(store, home, kind)
        parser = parser_cls()
        try:
            for path in files:
                result.files.append(imp.import_jsonl(path, parser))
        finally:
            imp.ledger.close()
    imp.commit()
    result.changed_sessions = imp.changed_sessions
    return result
