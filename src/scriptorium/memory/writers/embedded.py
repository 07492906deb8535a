"""The embedded writer: offline, deterministic and fast notes of what holds.

Each batch becomes facts (see :mod:`.facts`): decisions, action items with their owner, open
questions, values, dates, people's roles, preferences, constraints and notes, each one claim
citing the turns it came from, filed under a section named for its kind in the topic of the
conversation's subject. A topic on that subject is found anywhere under ``topics/`` (the
file name or its title), so a write extends it instead of creating a second file.

What holds: a value corrected later on the same line ("make it 150 instead") is written as
replacing the older one (``(replaces 160 ms)``). In the same batch the older claim is also
marked ``(superseded: now 150 ms)``; a committed claim of an earlier batch is left as written
(a write changes only paragraphs citing its own batch) and search derives that it is
superseded (:mod:`scriptorium.memory.search.supersession`). Claims already in the topic count
as the same line only when every turn they cite is on the batch's branch (``request.line``),
so an alternative branch never overrides the line being written. Each topic opens with one
"Current state" paragraph (:mod:`.state`), rewritten in place as claims change. The topic
being extended is read in one pass (:mod:`.topic_scan`), not parsed in full. The exchange
itself stays in the evidence archive.

Writing a batch whose turns the topics already cite adds nothing: a redo after a crash is
free. The writer never writes ids; the transaction's normaliser assigns block and evidence ids.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from ...config import Settings
from ...fsutil import safe_path
from ..catalog import slug, title_of
from ..records import Record
from ..sources.ids import source_anchor
from ..claims import SUPERSEDED_MARK, replaces_note, superseded_by, superseded_note
from . import facts as F
from . import state as S
from .topic_scan import ScannedTopic, scan_topic
from .base import WriteRequest, WriterAudit

if TYPE_CHECKING:  # pragma: no cover
    from ..catalog import TopicCatalog

MAX_STATEMENT_CHARS = 600

_STOPWORDS = frozenset("""
a about above after again against all also am an and any are aren't as at be because been before
being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
don't down during each few for from further had hadn't has hasn't have haven't having he he'd
he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once only or
other ought our ours ourselves out over own same shan't she she'd she'll she's should shouldn't so
some such than that that's the their theirs them themselves then there there's these they they'd
they'll they're they've this those through to too under until up very was wasn't we we'd we'll
we're we've were weren't what what's when when's where where's which while who who's whom why
why's with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves
ok okay thanks thank please yes yeah sure great good fine got noted just will shall may might must
would like one two also really well now still even get make know think want need see use say said
""".split())
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)


def _one_line(text: str) -> str:
    """What someone said, as plain claim text that can never be read as topic syntax.

    Whitespace collapses to single spaces (no line can start a heading, a fence, a comment or
    a footnote definition); a citation-looking ``[^`` gets a space; every ``^`` becomes the
    look-alike ``ˆ`` (no block id, wherever it stands); ``](`` gets a space, so
    ``[the plan](plan.md#^abcdef12)`` is text, not a link the tree must resolve. A turn that
    forged syntax would make the transaction reject its batch and block the branch for good.
    """
    text = " ".join(text.split())
    return text.replace("[^", "[ ^").replace("^", "ˆ").replace("](", "] (")


def content_words(text: str) -> list[str]:
    return [w for w in (x.lower() for x in _WORD.findall(text))
            if w not in _STOPWORDS and not w.isdigit() and len(w) > 1]


def keywords(text: str, limit: int = 3) -> list[str]:
    """The most salient words of ``text``, most salient first (ties in order of appearance)."""
    words = content_words(text)
    counts = Counter(words)
    first = {w: i for i, w in reversed(list(enumerate(words)))}
    capitalised = {w.lower() for w in _WORD.findall(text) if w[:1].isupper()}
    ranked = sorted(counts, key=lambda w: (-(counts[w] + (0.5 if w in capitalised else 0)
                                             + min(len(w), 10) / 20), first[w]))
    return ranked[:limit]


def condense(text: str) -> str:
    """A turn's statement on one line, long ones cut at a word boundary."""
    return F.shorten(F.clean(text), MAX_STATEMENT_CHARS)


def subject_of(title: str, batch: list[Record], hint: str = "") -> tuple[str, str]:
    """(heading, topic path relative to topics/) for a batch: the session title, else the
    most salient words of ``hint`` (the text the conversation opened with, the same for every
    batch of it, so its batches land in one topic), else of the batch."""
    if slug(title):
        return _one_line(title), slug(title) + ".md"
    text = hint if keywords(hint, 1) else (
        " ".join(r.content for r in batch if r.role == "user")
        or " ".join(r.content for r in batch))
    words = keywords(text, 2)
    if not words:
        return "Notes", "notes.md"
    heading = " ".join(words).capitalize()
    return heading, slug(heading) + ".md"


def find_topic(topics_dir: Path, heading: str, relpath: str,
               catalog: "TopicCatalog | None" = None) -> str:
    """An existing topic on the subject anywhere under ``topics/`` (same file name, or a
    title whose slug is the subject's), else ``relpath`` (relative to ``topics/``). Nearest
    the root wins, then name. With the ``catalog`` of the committed topics (which the stage
    mirrors at begin) no file is read; without one (a writer run on a bare directory) each
    topic's first line is."""
    stem = os.path.splitext(os.path.basename(relpath))[0]  # not a Path: see fsutil.safe_path
    if catalog is not None:
        found = [p[len("topics/"):] for p in catalog.named(stem, slug(heading))]
    else:
        found = [p.relative_to(topics_dir).as_posix() for p in topics_dir.rglob("*.md")
                 if p.is_file() and not p.is_symlink()
                 and (p.stem == stem or slug(title_of(p.read_bytes())) == slug(heading))]
    if relpath in found:
        return relpath
    return min(found, key=lambda r: (r.count("/"), r)) if found else relpath


class EmbeddedWriter:
    """Deterministic fact writer; see the module docstring."""

    name: str = "embedded"
    repair_attempts: int = 0  # deterministic: the same batch would be rejected the same way
    declares_edits: bool = True  # writes only through request.write_topic (see base.py)
    finds_topics_by_catalog: bool = True  # reads a topic only once find_topic names it


    @classmethod
    def from_settings(cls, settings: Settings) -> "EmbeddedWriter":
        """The entry-point factory (``scriptorium.writers``): nothing to configure."""
        return cls()

    def write(self, request: WriteRequest) -> WriterAudit:
        audit = WriterAudit(writer=self.name)
        todo = [r for r in request.batch if r.source_id not in request.cited]
        if not todo:
            audit.summary = "every turn of the batch is already cited; nothing to add"
            return audit
        heading, relpath = subject_of(request.session_title, list(request.batch),
                                      request.subject_hint)
        relpath = find_topic(request.topics_dir, heading, relpath, request.catalog)
        path = safe_path(request.topics_dir, relpath, "topic path")
        try:
            with open(path, encoding="utf-8") as fh:
                existing = fh.read()
        except FileNotFoundError:
            existing = ""
        facts = F.facts_of(todo)
        topic = _Topic(existing, request.line)
        updated = topic.add(heading, facts, side_branch=request.side_branch)
        request.write_topic(relpath, updated)
        audit.add("write", path=f"topics/{relpath}", facts=len(facts),
                  turns=[r.source_id for r in todo])
        audit.summary = f"{len(facts)} fact(s) from {len(todo)} turn(s) in topics/{relpath}"
        return audit


class _Topic:
    """One topic file being extended: its prior claims, its current state, new sections."""

    def __init__(self, text: str, line: frozenset[str]):
        self.text = text
        self.on_line = {source_anchor(sid) for sid in line} | set(line)
        self.counter = max((int(n) for n in re.findall(r"\[\^e(\d+)\]", text)), default=0)
        self._scanned: ScannedTopic | None = None
        self._sources: dict[str, str] = {}  # source id -> its definition's Sources part

    @property
    def scanned(self) -> ScannedTopic:
        """The topic as read in one pass, on first use (a side branch's write needs none)."""
        if self._scanned is None:
            self._scanned = scan_topic(self.text, S.STATE)
        return self._scanned

    # -- prior claims ----------------------------------------------------------------------

    def _cites_only_the_line(self, fids: list[str]) -> bool:
        targets = self.scanned.targets(fids)
        return bool(targets) and all(t.rpartition("#")[2] in self.on_line or t in self.on_line
                                     for t in targets)

    def prior_values(self) -> list[F.Fact]:
        """The value claims that hold on the batch's line, oldest first: not marked
        superseded, not replaced by a later claim on the line."""
        found = [(value, text) for value, text, labels in self.scanned.values
                 if SUPERSEDED_MARK not in text and self._cites_only_the_line(labels)]
        out = []
        for i, (value, text) in enumerate(found):
            if superseded_by(value, [later for later, _ in found[i + 1:]]) is None:
                out.append(F.Fact(F.VALUES, text, [], key=value.key, value=value.value))
        return out

    # -- rendering -------------------------------------------------------------------------

    def _cite(self, records: list[Record], definitions: list[str]) -> list[str]:
        labels = []
        for record in dict.fromkeys(records):
            self.counter += 1
            label = f"e{self.counter}"
            labels.append(label)
            rest = self._sources.get(record.source_id)
            if rest is None:  # a turn the state and a section both cite is described once
                words = " ".join(keywords(record.content, 3)) or record.role
                rest = self._sources[record.source_id] = \
                    f"Time: `{record.day()}`; Sources: [{words}]({record.source_id})"
            definitions.append(f"[^{label}]: {rest}")
        return labels

    def _fact_text(self, fact: F.Fact) -> str:
        text = fact.text
        if fact.replaces:
            text += replaces_note(F.shown(fact.replaces, fact.key))
        if fact.superseded_by:
            text += superseded_note(F.shown(fact.superseded_by, fact.key))
        return text

    def add(self, heading: str, facts: list[F.Fact], *, side_branch: bool = False) -> str:
        facts = F.resolve_lines(facts, [] if side_branch else self.prior_values())
        if side_branch:
            for fact in facts:
                if fact.value:
                    fact.text += " (on a side branch)"
        # A write may change only paragraphs citing its own batch: a committed claim a new
        # value replaces is left as written; the new claim says what it replaces, and the
        # current state (which keeps every citation it had) says what holds.
        lines = self.text.splitlines()
        shift = 0
        if not any(line.startswith("# ") for line in lines):
            lines = [f"# {heading}", ""] + lines
            shift = 2
        if not side_branch:
            block = self.scanned.state
            definitions: list[str] = []
            entries = S.updated(S.read_entries(block), facts,
                                lambda records: self._cite(records, definitions),
                                self._cites_only_the_line)
            S.write_block(lines, block, entries, definitions, shift)
        for kind in F.KINDS:
            chunk: list[str] = []
            for fact in facts:
                if fact.kind != kind:
                    continue
                definitions = []
                labels = self._cite(fact.records, definitions)
                body = self._fact_text(fact) + "".join(f"[^{label}]" for label in labels)
                chunk += [body, "", *definitions, ""]
            if chunk:
                _insert_section(lines, kind, chunk[:-1])
        return "\n".join(lines).rstrip("\n") + "\n"


def _insert_section(lines: list[str], section: str, chunk: list[str]) -> None:
    """Add ``chunk`` at the end of ``## section``; a new section goes before the first
    section that comes after it in :data:`facts.KINDS` order (else at the end)."""
    start = lines.index(f"## {section}") if f"## {section}" in lines else None
    if start is None:
        later = F.KINDS[F.KINDS.index(section) + 1:] if section in F.KINDS else ()
        at = next((i for i, line in enumerate(lines)
                   if line.startswith("## ") and line[3:] in later), None)
        if at is not None:
            lines[at:at] = [f"## {section}", ""] + chunk + [""]
            return
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", f"## {section}", ""] + chunk
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("# ", "## "))),
               len(lines))
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    lines[end:end] = [""] + chunk + ([""] if end < len(lines) else [])
