"""The file tools a model gets, confined to ``stage/topics``.

A model's tool call is untrusted input. Every path is checked *before* anything runs:
absolute paths, ``..`` segments, backslashes, symlinks, ``sources/`` and anything outside
``topics/`` are refused, and the refusal is returned as the tool result with guidance the
model can act on ("use a path like topics/people/dave.md"). Nothing is executed for a refused
call. Tool failures are results, not exceptions: whatever a tool raises, the run goes on and
the audit records it.

The model's patterns (grep's regex, glob's translation) run on RE2 (``google-re2``), whose
matching time is linear in the text: a backtracking engine can spend hours on ``(a+)+$`` while
the writer holds the workspace lock, blocking every other write.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ...errors import InvalidInput
from ...fsutil import atomic_write_text, safe_join

try:  # the llm extra brings it; without it grep and glob refuse rather than risk a hang
    import re2
except ImportError:  # pragma: no cover - exercised only without the extra
    re2 = None  # type: ignore[assignment]

READ_MAX_CHARS = 200_000
WRITE_MAX_BYTES = 512_000
MAX_HITS = 500
AUDIT_OUTPUT_CHARS = 1000

TOPICS = "topics"
PATH_HINT = "use a path relative to the workspace root, like topics/people/dave.md"


class Refused(Exception):
    """A tool call that must not run; the message is what the model is told."""


def _schema(name: str, description: str, properties: dict[str, Any],
            required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


_PATH = {"type": "string", "description": "Relative to the workspace root, e.g. topics/x.md"}

TOOL_SCHEMAS: list[dict[str, Any]] = [
    _schema("read", "Read a topic file (UTF-8 text).", {"path": _PATH}, ["path"]),
    _schema("write", "Create or replace a topic file under topics/ (parents are created). "
            "Use edit to change an existing file.",
            {"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
    _schema("edit", "Replace old_string with new_string in a topic file. old_string must "
            "match exactly and be unique unless replace_all is true.",
            {"path": _PATH, "old_string": {"type": "string"}, "new_string": {"type": "string"},
             "replace_all": {"type": "boolean", "default": False}},
            ["path", "old_string", "new_string"]),
    _schema("grep", "Search topic files with a regular expression; returns path:line: text.",
            {"pattern": {"type": "string"},
             "path": {"type": "string", "description": "File or directory (default topics)"},
             "ignore_case": {"type": "boolean", "default": False}},
            ["pattern"]),
    _schema("glob", "List topic files matching a glob pattern (** crosses directories), "
            "relative to path (default topics).",
            {"pattern": {"type": "string"},
             "path": {"type": "string", "description": "Directory (default topics)"}},
            ["pattern"]),
]
TOOL_NAMES = tuple(t["function"]["name"] for t in TOOL_SCHEMAS)


def bounded_regex(pattern: str, *, ignore_case: bool = False) -> Any:
    """``pattern`` compiled by RE2 (linear-time matching, bounded memory), or
    :class:`Refused` saying why the engine will not take it."""
    if re2 is None:
        raise Refused("pattern search needs the google-re2 package (pip install "
                      "'scriptorium[llm]'); use read and glob instead.")
    options = re2.Options()
    options.log_errors = False  # the reason goes to the model, not to our stderr
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise Refused(f"{reason}") from None


def glob_regex(pattern: str) -> Any:
    """A glob as a regex over ``/``-separated paths: ``*`` and ``?`` stay in one segment,
    ``**/`` spans any number of directories. A pattern RE2 refuses (``[z-a]``) is
    :class:`Refused` with guidance."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                out.append(re.escape("["))
                i += 1
                continue
            body = pattern[i + 1:end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    try:
        return bounded_regex("".join(out) + r"\z")
    except Refused as exc:
        raise Refused(f"invalid glob pattern {pattern!r} ({exc}); use * ? ** and ranges "
                      "written low to high such as [a-z].") from None


@dataclass
class ToolResult:
    status: str  # "ok" | "error"
    output: str


class StageTools:
    """read / write / edit / grep / glob over ``stage/topics`` and nowhere else."""

    def __init__(self, stage: Path):
        self.stage = Path(stage)
        self.handlers: dict[str, Callable[[dict[str, Any]], str]] = {
            "read": self.read, "write": self.write, "edit": self.edit,
            "grep": self.grep, "glob": self.glob}

    # -- the one entry point -----------------------------------------------------------------

    def run(self, name: str, arguments: Any) -> ToolResult:
        """Run one call; refusals and failures come back as ``status="error"`` results."""
        handler = self.handlers.get(name)
        if handler is None:
            return ToolResult("error", f"Error: unknown tool {name!r}; the tools are "
                                       f"{', '.join(TOOL_NAMES)}.")
        if not isinstance(arguments, dict):
            return ToolResult("error", "Error: arguments must be a JSON object, e.g. "
                                       '{"path": "topics/x.md"}.')
        try:
            return ToolResult("ok", handler(arguments))
        except Refused as exc:
            return ToolResult("error", f"Error: {exc}")
        except Exception as exc:  # a tool failure is the model's to read, never the run's end
            return ToolResult("error", f"Error: {type(exc).__name__}: {exc}")

    # -- path confinement ----------------------------------------------------------------------

    def resolve(self, raw: Any, *, default: str | None = None) -> tuple[str, Path]:
        """(``topics/…`` relative path, real path) or :class:`Refused` with guidance."""
        if raw is None and default is not None:
            raw = default
        if not isinstance(raw, str) or not raw.strip():
            raise Refused(f"a path is required; {PATH_HINT}.")
        if "\x00" in raw:
            raise Refused(f"the path contains a NUL byte; {PATH_HINT}.")
        if "\\" in raw:
            raise Refused(f"backslashes are not allowed in paths; use '/' ({PATH_HINT}).")
        if raw.startswith("/") or raw.startswith("~") or re.match(r"[A-Za-z]:", raw):
            raise Refused(f"absolute paths are not allowed ({raw!r}); {PATH_HINT}.")
        parts = [p for p in raw.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise Refused(f"'..' is not allowed in paths ({raw!r}): you can only work inside "
                          f"topics/; {PATH_HINT}.")
        rel = "/".join(parts)
        if not parts:
            raise Refused(f"the workspace root is not a topic path; {PATH_HINT}.")
        if parts[0] == "sources":
            raise Refused("sources/ is the evidence archive: append-only and written by the "
                          "runtime, so you cannot read or change it. Cite a turn by its ref "
                          "from the input, and edit files under topics/ only.")
        if parts[0] != TOPICS:
            raise Refused(f"{rel!r} is outside topics/; memory is only the Markdown files "
                          f"under topics/ ({PATH_HINT}).")
        current = self.stage
        for part in parts:
            current = current / part
            if current.is_symlink():
                raise Refused(f"{'/'.join(current.relative_to(self.stage).parts)} is a "
                              f"symbolic link and links are not followed; {PATH_HINT}.")
        try:
            real = safe_join(self.stage / TOPICS, posixpath.relpath(rel, TOPICS))
        except InvalidInput:
            raise Refused(f"{rel!r} leaves topics/; {PATH_HINT}.") from None
        return rel, real

    @staticmethod
    def _text(args: dict[str, Any], key: str, *, allow_empty: bool = True) -> str:
        value = args.get(key)
        if not isinstance(value, str):
            raise Refused(f"argument {key!r} must be a string.")
        if not allow_empty and value == "":
            raise Refused(f"argument {key!r} must not be empty.")
        return value

    def _writable(self, args: dict[str, Any]) -> tuple[str, Path]:
        rel, real = self.resolve(args.get("path"))
        if not rel.endswith(".md") or rel == TOPICS:
            raise Refused(f"{rel!r}: topic files are Markdown; name it like "
                          "topics/<subject>.md.")
        if real.exists() and not real.is_file():
            raise Refused(f"{rel!r} is a directory; name a .md file inside it.")
        return rel, real

    # -- the tools ------------------------------------------------------------------------------

    def read(self, args: dict[str, Any]) -> str:
        rel, real = self.resolve(args.get("path"))
        if real.is_dir():
            raise Refused(f"{rel!r} is a directory; use glob to list its files.")
        if not real.exists():
            raise Refused(f"{rel!r} does not exist; use glob to list topic files, or write to "
                          "create a new one.")
        text = real.read_text(encoding="utf-8", errors="replace")
        if len(text) > READ_MAX_CHARS:
            return text[:READ_MAX_CHARS] + f"\n[… truncated at {READ_MAX_CHARS} characters]"
        return text

    def write(self, args: dict[str, Any]) -> str:
        rel, real = self._writable(args)
        content = self._text(args, "content")
        size = len(content.encode("utf-8"))
        if size > WRITE_MAX_BYTES:
            raise Refused(f"content is {size} bytes; a topic file may hold at most "
                          f"{WRITE_MAX_BYTES}. Split the subject into several files.")
        if content and not content.endswith("\n"):
            content += "\n"
        existed = real.exists()
        real.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(real, content, durable=False)
        return f"{'replaced' if existed else 'created'} {rel} ({size} bytes)"

    def edit(self, args: dict[str, Any]) -> str:
        rel, real = self._writable(args)
        old = self._text(args, "old_string", allow_empty=False)
        new = self._text(args, "new_string")
        replace_all = args.get("replace_all", False) is True
        if not real.exists():
            raise Refused(f"{rel!r} does not exist; use write to create it.")
        if old == new:
            raise Refused("old_string and new_string are the same; nothing would change.")
        text = real.read_text(encoding="utf-8")
        count = text.count(old)
        if count == 0:
            raise Refused(f"old_string was not found in {rel}; read the file and copy the "
                          "exact text, including spaces and line breaks.")
        if count > 1 and not replace_all:
            raise Refused(f"old_string occurs {count} times in {rel}; include more "
                          "surrounding text to make it unique, or set replace_all to true.")
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        size = len(updated.encode("utf-8"))
        if size > WRITE_MAX_BYTES:
            raise Refused(f"the file would be {size} bytes; at most {WRITE_MAX_BYTES}.")
        atomic_write_text(real, updated, durable=False)
        return f"edited {rel} ({count if replace_all else 1} replacement(s))"

    def _files_under(self, rel: str, real: Path) -> list[tuple[str, Path]]:
        if real.is_file():
            return [(rel, real)]
        if not real.is_dir():
            raise Refused(f"{rel!r} does not exist; the memory files live under topics/.")
        out = []
        for root, dirs, files in os.walk(real, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
            for name in sorted(files):
                path = Path(root) / name
                if path.is_symlink() or not path.is_file():
                    continue
                out.append((path.relative_to(self.stage).as_posix(), path))
        return out

    def grep(self, args: dict[str, Any]) -> str:
        pattern = self._text(args, "pattern", allow_empty=False)
        try:
            regex = bounded_regex(pattern, ignore_case=args.get("ignore_case") is True)
        except Refused as exc:
            raise Refused(f"invalid regular expression ({exc}); escape special characters "
                          "such as [ ] ( ) ^ with a backslash; backreferences and lookaround "
                          "are not supported.") from None
        rel, real = self.resolve(args.get("path"), default=TOPICS)
        hits: list[str] = []
        for path_rel, path in self._files_under(rel, real):
            text = path.read_text(encoding="utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{path_rel}:{number}: {line}")
                    if len(hits) >= MAX_HITS:
                        return "\n".join(hits) + f"\n[… stopped at {MAX_HITS} matches]"
        return "\n".join(hits) if hits else "no matches"

    def glob(self, args: dict[str, Any]) -> str:
        pattern = self._text(args, "pattern", allow_empty=False)
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise Refused("glob patterns are relative to path (default topics/) and may not "
                          "contain '..' or start with '/'; e.g. **/*.md lists every topics/ file.")
        rel, real = self.resolve(args.get("path"), default=TOPICS)
        if not real.is_dir():
            raise Refused(f"{rel!r} is not a directory; glob lists files under a directory "
                          "such as topics.")
        regex = glob_regex(pattern)
        matches = [path_rel for path_rel, path in self._files_under(rel, real)
                   if regex.fullmatch(path.relative_to(real).as_posix())]
        if not matches:
            return "no files match"
        if len(matches) > MAX_HITS:
            return "\n".join(matches[:MAX_HITS]) + f"\n[… {len(matches) - MAX_HITS} more]"
        return "\n".join(matches)
