"""What the search index holds: one document per topic claim and one per archived frame.

A claim is the unit a reader wants back (a block can say several things, each with its own
evidence and dates), so it is the unit we score. Each document carries the text to show, the
words to match (claim text, the topic path's words, the headings above it, its dates) and what
filters need (path, date ranges, speaker keys, the source ids it cites).

CJK, kana and hangul have no spaces between words, so the word tokenizer would see a whole
sentence as one token. Those runs are additionally indexed as single characters and adjacent
pairs (the reference's rule), and a query's CJK runs are searched as the same pairs.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable

from ..sources import Frame, parse_v2, read_legacy, read_text
from ..topics import TopicDoc, parse_topic

WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = (r"\u1100-\u11ff\u3040-\u309f\u30a0-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
        r"\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff")
CJK_RUN_RE = re.compile(f"[{_CJK}]+")
_WHEN_RE = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?")
_DAY_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_BLOCK_LINK_RE = re.compile(r"\[([^\[\]\n]*)\]\([^()\s]*#\^[A-Za-z0-9-]+\)")


def cjk_grams(text: str, *, for_query: bool = False) -> list[str]:
    """Characters and adjacent pairs of every CJK run. A query uses only the pairs of a
    longer run (a pair is far more specific than one character), the character of a
    one-character run."""
    out: list[str] = []
    if text.isascii():  # most text: no CJK run to look for
        return out
    for run in CJK_RUN_RE.findall(text):
        pairs = [run[i:i + 2] for i in range(len(run) - 1)]
        if for_query:
            out.extend(pairs or [run])
        else:
            out.extend(list(run) + pairs)
    return out


# A file's documents all carry its path, so the two caches below serve one file at a time:
# a few entries are enough, and more would keep a string for every topic of a long write.
PATH_CACHE = 64


@lru_cache(maxsize=PATH_CACHE)
def path_words(path: str) -> str:
    """``topics/projects/budget-plan.md`` -> ``projects budget plan`` (the folder and file
    names say what a topic is about)."""
    parts = path.split("/")
    if parts and parts[0] in ("topics", "sources"):
        parts = parts[1:]
    if parts and parts[-1].endswith(".md"):
        parts[-1] = parts[-1][:-3]
    return " ".join(" ".join(WORD_RE.findall(p)) for p in parts if p != "_v2")


@lru_cache(maxsize=PATH_CACHE)
def logical_path(path: str) -> str:
    """A v2 archive path also answers to its legacy logical path (``sources/p/_v2/t.md`` ->
    ``sources/p/t.md``), so one prefix filter finds both."""
    parts = path.split("/")
    if len(parts) == 4 and parts[0] == "sources" and parts[2] == "_v2":
        return "/".join([parts[0], parts[1], parts[3]])
    return path


@lru_cache(maxsize=4096)
def when_range(when: str) -> tuple[str, str] | None:
    """``YYYY`` / ``YYYY-MM`` / ``YYYY-MM-DD`` -> the first and last day it covers (ISO), or
    None for ``undated`` and anything that is not a real date."""
    m = _WHEN_RE.fullmatch(when.strip())
    if not m:
        return None
    year = int(m.group(1))
    try:
        if m.group(3):
            month, day = int(m.group(2)), int(m.group(3))
            if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
                return None
            day_s = f"{year:04d}-{month:02d}-{day:02d}"
            return day_s, day_s
        if m.group(2):
            month = int(m.group(2))
            if not 1 <= month <= 12:
                return None
            last = calendar.monthrange(year, month)[1]
            return f"{year:04d}-{month:02d}-01", f"{year:04d}-{month:02d}-{last:02d}"
    except (ValueError, calendar.IllegalMonthError):
        return None
    return f"{year:04d}-01-01", f"{year:04d}-12-31"


def timestamp_day(timestamp: str) -> str | None:
    """The calendar day an archived turn was said on (as written in its timestamp)."""
    m = _DAY_RE.match(timestamp or "")
    if not m:
        return None
    return m.group(0) if when_range(m.group(0)) else None


@dataclass
class Document:
    """One searchable unit. ``kind`` is ``claim`` (a topic claim) or ``source`` (a frame)."""

    kind: str
    path: str
    line: int
    text: str
    block_id: str | None = None
    claim: int = 0
    headings: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    ranges: list[tuple[str, str]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    source_id: str | None = None
    version: str = ""
    speakers: list[str] = field(default_factory=list)
    speaker: str = ""
    trusted: bool = True

    def fields(self) -> tuple[str, str, str, str]:
        """(body, context, dates, cjk) as indexed: what is said, where it is filed, when,
        and the CJK grams of all of it."""
        body = _BLOCK_LINK_RE.sub(r"\1", self.text) if "#^" in self.text else self.text
        context = " ".join([path_words(self.path), *self.headings, self.speaker]).strip()
        dates = " ".join(self.dates)
        cjk = " ".join(cjk_grams(body + " " + context))
        return body, context, dates, cjk


Resolve = Callable[[str, str], "str | None"]
Trusted = Callable[[str], "bool | None"]
Speakers = Callable[[str], "list[str]"]


def speaker_keys(frame: Frame) -> list[str]:
    """What ``--speaker`` matches for a turn: its speaker id, display name and label, any case."""
    return list(_speaker_keys(frame.speaker_id, frame.speaker_display, frame.label))


@lru_cache(maxsize=1024)
def _speaker_keys(*names: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(k.casefold() for k in names if k))


# The speaker keys of a trusted claim citing these sources, as its row already holds them
# (None: not known): what a claim shows of the turns it cites follows from their ids alone,
# as an archived turn never changes, so a write re-reads only the archive files its new
# claims cite (issue 12).
Known = Callable[[tuple[str, ...]], "list[str] | None"]


def claim_documents(doc: TopicDoc, resolve: Resolve,
                    trusted: Trusted = lambda _sid: True,
                    speakers: Speakers = lambda _sid: [],
                    known: Known | None = None) -> tuple[list[Document], int]:
    """The claims of every identified block of ``doc`` (legacy ``mem_`` blocks too), and how
    many footnote targets did not resolve to an archived source (so the caller can look
    again once more evidence is archived). A claim's speakers are those of the turns it
    cites, so ``--speaker`` finds what a person said in the notes as well as the archive.
    ``known``: what rows already indexed say of trusted claims' sources (see :data:`Known`)."""
    out: list[Document] = []
    unresolved = 0
    resolved_cache: dict[str, list[str]] = {}
    evidence_of = doc.evidence
    for block in doc.blocks:
        if not block.id and not block.legacy:
            continue
        headings = block.headings
        for n, claim in enumerate(block.claims):
            if not claim.text:
                continue
            dates: list[str] = []
            sources: list[str] = []
            dangling = False
            citations = claim.citations
            for fid in (citations if len(citations) == 1 else dict.fromkeys(citations)):
                evidence = evidence_of.get(fid)
                if evidence is None:
                    dangling = True
                    continue
                if evidence.when not in dates:
                    dates.append(evidence.when)
                ids = resolved_cache.get(fid)
                if ids is None:
                    ids = []
                    for link in evidence.sources:
                        sid = resolve(doc.path, link.target)
                        if sid is None:
                            unresolved += 1
                        elif sid not in ids:
                            ids.append(sid)
                    resolved_cache[fid] = ids
                if len(ids) < len(evidence.sources):
                    dangling = True
                for sid in ids:
                    if sid not in sources:
                        sources.append(sid)
            ranges = []
            for when in dates:
                covered = when_range(when)
                if covered is not None:
                    ranges.append(covered)
            is_trusted = not dangling and bool(sources)
            found = known(tuple(sources)) if known is not None and is_trusted else None
            keys: list[str] = list(found) if found is not None else []
            for sid in sources if found is None else ():
                is_trusted = is_trusted and trusted(sid) is True
                for key in speakers(sid):
                    if key not in keys:
                        keys.append(key)
            if len(dates) > 1:
                dates.sort()
            out.append(Document(
                kind="claim", path=doc.path, line=block.line, text=claim.text,
                block_id=block.id or None, claim=n, headings=list(headings),
                dates=dates, ranges=ranges, sources=sources, trusted=is_trusted,
                speakers=keys))
    return out, unresolved


def frame_documents(frames: Iterable[Frame]) -> list[Document]:
    """One document per archived frame; the speaker keys are its id, display name and
    label, casefolded, so ``--speaker`` matches any of them."""
    out: list[Document] = []
    seen: set[str] = set()
    for frame in frames:
        if frame.source_id in seen:
            continue
        seen.add(frame.source_id)
        day = timestamp_day(frame.timestamp)
        keys = speaker_keys(frame)
        out.append(Document(
            kind="source", path=frame.path, line=frame.line + 1, text=frame.content,
            headings=[], dates=[day] if day else [], ranges=[(day, day)] if day else [],
            sources=[frame.source_id], source_id=frame.source_id, version=frame.version,
            speakers=keys, speaker=frame.label or "",
            trusted=bool(frame.trusted)))
    return out


# What the index holds, by the folder a memory file lives in.
KINDS = ("topic", "source")
TOP = {"topic": "topics", "source": "sources"}


def kind_of(rel: str) -> str | None:
    """``topic`` for ``topics/**.md``, ``source`` for ``sources/**.md``, else None."""
    top, _, rest = rel.partition("/")
    if not rest or not rel.endswith(".md"):
        return None
    return {"topics": "topic", "sources": "source"}.get(top)


def file_documents(rel: str, data: bytes, resolve: Resolve, trusted: Trusted,
                   speakers: Speakers, doc: TopicDoc | None = None,
                   known: Known | None = None) -> tuple[list[Document], int]:
    """The documents of one memory file (either index's): a topic's claims, parsed leniently
    (a hand edit must still be found; footnotes resolved through ``resolve``, ``trusted`` and
    ``speakers``), with how many footnotes did not resolve; a source file's frames. ``doc``:
    the topic ``data`` already parsed (by the transaction that installed it); ``known``: see
    :func:`claim_documents`."""
    if kind_of(rel) == "topic":
        if doc is None:
            doc = parse_topic(data.decode("utf-8", errors="replace"), rel, strict=False)
        return claim_documents(doc, resolve, trusted, speakers, known)
    text = read_text(data)
    parts = rel.split("/")
    frames = parse_v2(text, rel).frames if len(parts) == 4 and parts[2] == "_v2" \
        else read_legacy(text, rel)
    return frame_documents(frames), 0
