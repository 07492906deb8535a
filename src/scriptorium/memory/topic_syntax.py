"""The topic format's pieces: what a topic file holds (headings, blocks and their claims,
footnote definitions, raw lines) and the line syntax the parser (scriptorium.memory.topics),
the normaliser and a one-pass reader of topic files (the embedded writer's scan of the topic it
extends, memory/writers/topic_scan.py) share. Pure: no filesystem, no archive."""

from __future__ import annotations

import datetime as _dt
import posixpath
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Union
from urllib.parse import unquote

from ..errors import InvalidInput, ReasonCode

__all__ = [
    "TopicFormatError", "SourceLink", "Evidence", "Claim", "Block", "Heading", "Raw", "Item",
    "TopicDoc", "is_local_label", "valid_when", "classify", "split_ids",
    "strip_before_citations", "collapse", "link_target", "bare_handles",
    "BLOCK_ID_RE", "FOOTNOTE_ID_RE", "CITATION_RE", "HEADING_RE", "DEF_START_RE",
    "SPECIAL_FIRST", "BARE_HANDLE_LABEL", "DEF_RE", "LEGACY_DEF_RE", "LINK_RE",
    "SOURCE_RE", "SOURCE_SEP_RE", "CANONICAL_DEF_RE",
]

BLOCK_ID_RE = re.compile(r"[A-Za-z0-9-]+")
FOOTNOTE_ID_RE = re.compile(r"[A-Za-z0-9_-]+")
# Labels a writer uses for evidence it adds; the runtime replaces them with ``e-<10 hex>``.
_LOCAL_LABEL_RE = re.compile(r"e\d+|new-evidence-[A-Za-z0-9_-]*|\d+")

CITATION_RE = re.compile(r"\[\^([^\[\]\n]*)\]")
HEADING_RE = re.compile(r"(#{1,6})(?:\s+(.*))?")
DEF_START_RE = re.compile(r"\[\^[^\]\n]*\]:")
DEF_RE = re.compile(
    r"\[\^(?P<fid>[^\]\n]*)\]:\s*Time:\s*(?P<when>`[^`]*`|[^;`]*?)\s*;\s*Sources:\s*(?P<src>.*)")
LEGACY_DEF_RE = re.compile(
    r"\[\^(?P<fid>[^\]\n]*)\]:\s*(?P<when>`[^`]*`|[^\s·]+)\s*·\s*Sources:\s*(?P<src>.*)")
# A definition as normalisation renders it, one source (what ``DEF_RE`` and ``SOURCE_RE`` read
# the same way, without a problem, when its time is valid and its label unpadded)
CANONICAL_DEF_RE = re.compile(
    r"\[\^([A-Za-z0-9_-]+)\]: Time: `([^`]*)`; Sources: \[([^\[\]]+)\]\(([^()\s]+)\)")
SOURCE_RE = re.compile(r"\[(.*?)\]\((.*?)\)(?=\s*,\s*\[|\s*$)")
SOURCE_SEP_RE = re.compile(r"\s*,\s*")
_WHEN_RE = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?")
LINK_RE = re.compile(r"\[([^\[\]\n]*)\]\(([^()\s]*)\)")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_ID_TAIL_RE = re.compile(r"[^\s\[\]\^]+")  # what may follow the last "^" of an id


class TopicFormatError(InvalidInput):
    """A topic file breaks the format; the message is ``path:line: what``."""

    code = ReasonCode.INVALID_TOPIC_FORMAT

    def __init__(self, path: str, line: int, what: str):
        super().__init__(f"{path}:{line}: {what}")
        self.path = path
        self.line = line
        self.what = what


@dataclass
class SourceLink:
    """One ``[label](target)`` of a definition; target is a link into sources/ or a handle."""

    label: str
    target: str


@dataclass
class Evidence:
    """A footnote definition: when the cited thing was observed, and where it is archived."""

    fid: str
    when: str
    sources: list[SourceLink]
    line: int = 0


@dataclass
class Claim:
    """The text since the previous citation group, with the footnotes that back it."""

    text: str
    citations: list[str]


@dataclass
class Heading:
    level: int
    text: str
    line: int = 0


@dataclass
class Raw:
    """Lines kept verbatim: HTML comments, ``<a`` lines, fenced code (and, when parsing
    leniently, lines that are broken)."""

    lines: list[str]
    line: int = 0


@dataclass
class Block:
    """One paragraph of memory. ``id`` is its identity ("" only for legacy ``mem_`` blocks),
    ``aliases`` are ids it absorbed in merges and must keep answering to."""

    id: str
    aliases: list[str]
    claims: list[Claim]
    headings: list[str]
    line: int
    text: str
    links: list[tuple[str, str]] = field(default_factory=list)  # (topic path, block id)

    @property
    def citations(self) -> list[str]:
        """Every footnote id cited, in order (a footnote cited twice appears twice)."""
        return [fid for claim in self.claims for fid in claim.citations]

    @property
    def ids(self) -> list[str]:
        return [*self.aliases, self.id] if self.id else list(self.aliases)

    @property
    def legacy(self) -> bool:
        cites = self.citations
        return bool(cites) and all(fid.startswith("mem_") for fid in cites)


Item = Union[Heading, Block, Evidence, Raw]


@dataclass
class TopicDoc:
    """One parsed topic file. ``items`` keeps file order for rendering; ``problems`` lists
    every rule broken (a strict parse raises the first instead)."""

    path: str
    blocks: list[Block]
    evidence: dict[str, Evidence]
    items: list[Item] = field(default_factory=list)
    problems: list[TopicFormatError] = field(default_factory=list)

    def block(self, block_id: str) -> Block | None:
        for block in self.blocks:
            if block_id in block.ids:
                return block
        return None


# -- small helpers ---------------------------------------------------------------------------


def is_local_label(fid: str) -> bool:
    """True for a writer's provisional evidence label (``e1``, ``new-evidence-x``, ``1``)."""
    return _LOCAL_LABEL_RE.fullmatch(fid) is not None


@lru_cache(maxsize=4096)  # a file repeats a few dates many times
def valid_when(when: str) -> bool:
    """``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD`` naming a real date, or ``undated``."""
    if when == "undated":
        return True
    m = _WHEN_RE.fullmatch(when)
    if not m:
        return False
    try:
        _dt.date(int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1))
    except ValueError:
        return False
    return True


BARE_HANDLE_LABEL = "source"
_BARE_HANDLE_RE = re.compile(r"[^\s\[\]()`,]+/[^\s\[\]()`,]+/[^\s\[\]()`,]+|D\d+:\d+")


def bare_handles(text: str) -> list[str] | None:
    """The handles of a Sources list written as bare source ids (``openprogram/s/n, …``), or
    None when the list is anything else."""
    if "[" in text:  # no handle holds one: a list of links (the usual case)
        return None
    parts = [part.strip() for part in SOURCE_SEP_RE.split(text.strip())] if text.strip() else []
    if parts and all(_BARE_HANDLE_RE.fullmatch(part) for part in parts):
        return parts
    return None


# The first characters of the lines that are not plain paragraph text (see ``classify``).
SPECIAL_FIRST = frozenset("`~#[<")


def classify(stripped: str) -> str:
    if not stripped:
        return "blank"
    if stripped.startswith("```") or stripped.startswith("~~~"):
        return "fence"
    if stripped.startswith("#") and HEADING_RE.fullmatch(stripped):
        return "heading"
    if stripped.startswith("[^") and DEF_START_RE.match(stripped):
        return "def"
    if stripped.startswith("<!--") or stripped.startswith("<a "):
        return "comment"
    return "text"


def split_ids(body: str) -> tuple[str, list[str]]:
    """Split the trailing `` ^a ^b`` run off a paragraph body."""
    rest = body.rstrip()
    ids: list[str] = []
    while True:
        caret = rest.rfind("^")
        if caret < 0:
            break
        token = rest[caret + 1:]
        if token and not _ID_TAIL_RE.fullmatch(token):
            break  # whitespace or a bracket after the last "^": no id ends the text
        before = rest[:caret]
        if before and not (before[-1].isspace() or before[-1] == "]"):
            break  # "x^2": part of the text, not an id
        ids.insert(0, token)
        rest = before.rstrip()
    return rest, ids


def strip_before_citations(body: str) -> str:
    """Remove the whitespace before each ``[^`` (``\\s+(?=\\[\\^)``, without a regex that
    tries every space of the paragraph)."""
    if "[^" not in body:
        return body
    parts = body.split("[^")
    last = parts.pop()
    return "[^".join([part.rstrip() for part in parts] + [last])


def collapse(text: str) -> str:
    return " ".join(text.split())


def link_target(doc_path: str, target: str) -> tuple[bool, str, str] | None:
    """Classify a Markdown link target. None: not a link to a topic. Else (is_block_link,
    topic path, fragment)."""
    if not target or _SCHEME_RE.match(target) or target.startswith("/"):
        return None
    path_part, _, fragment = target.partition("#")
    if not path_part:
        if fragment.startswith("^"):
            return True, doc_path, fragment
        return None  # a heading anchor in this file
    if not path_part.lower().endswith(".md"):
        return None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(doc_path), unquote(path_part)))
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("sources/"):
        return None
    return fragment.startswith("^"), resolved, fragment
