"""The embedded writer: offline, deterministic and fast notes of what holds.

Each batch becomes facts (see :mod:`.facts`): decisions, action items with their owner, open
questions, values, dates, people's roles, preferences, constraints and notes, each one claim
citing the turns it came from, filed under a section named for its kind in the topic of the
conversation's subject. A topic on that subject is found anywhere under ``topics/`` (the
file name or its title), so a write extends it instead of creating a second file.

What holds: a value corrected later on the same line ("make it 150 instead") is written as
replacing the older one, and the older claim is marked ``(superseded: now 150)`` in place
(search ranks such claims last). Claims already in the topic count as the same line only
when every turn they cite is on the batch's branch (``request.line``), so an alternative
branch never overrides the line being written. Each topic opens with a "Current state"
block: the values that hold, decisions, open questions and action items, each line citing its
evidence, rewritten (same block id) as claims change. The exchange itself stays in the
evidence archive.

Writing a batch whose turns the topics already cite adds nothing: a redo after a crash is
free. The writer never writes ids; the transaction's normaliser assigns block and evidence ids.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from ...config import Settings
from ...fsutil import safe_join
from ..records import Record
from ..sources.ids import source_anchor
from ..topics import SUPERSEDED_MARK, parse_topic
from . import facts as F
from .base import WriteRequest, WriterAudit

STATE = "Current state"
STATE_LIMIT = 8  # lines per kind kept in the current state (newest win)
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
_VALUE_CLAIM = re.compile(r"(?P<key>[^:()\[\]]{1,60}): (?P<value>[^()]+?) \(")
_STATE_LINE = re.compile(r"- (?P<text>.*?)(?P<cites>(?:\[\^[^\]\n]+\])+)")


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


def slug(text: str) -> str:
    out = re.sub(r"[^\w]+", "-", text.lower(), flags=re.UNICODE).strip("-_")
    return out[:60].strip("-_")


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


def find_topic(topics_dir: Path, heading: str, relpath: str) -> str:
    """An existing topic on the subject anywhere under ``topics/`` (same file name, or a
    title whose slug is the subject's), else ``relpath``. Nearest the root wins, then name."""
    if (topics_dir / relpath).is_file():
        return relpath
    want = Path(relpath).stem
    found: list[str] = []
    for path in topics_dir.rglob("*.md"):
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(topics_dir).as_posix()
        if path.stem == want:
            found.append(rel)
            continue
        with path.open(encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
        if first.startswith("# ") and slug(first[2:]) == slug(heading):
            found.append(rel)
    return min(found, key=lambda r: (r.count("/"), r)) if found else relpath


class EmbeddedWriter:
    """Deterministic fact writer; see the module docstring."""

    name: str = "embedded"
    repair_attempts: int = 0  # deterministic: the same batch would be rejected the same way

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
        relpath = find_topic(request.topics_dir, heading, relpath)
        path = safe_join(request.topics_dir, relpath, "topic path")
        path.parent.mkdir(parents=True, exist_ok=True)
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
        facts = F.facts_of(todo)
        topic = _Topic(existing, f"topics/{relpath}", request.line)
        updated = topic.add(heading, facts, side_branch=request.side_branch)
        path.write_text(updated, encoding="utf-8")
        audit.add("write", path=f"topics/{relpath}", facts=len(facts),
                  turns=[r.source_id for r in todo])
        audit.summary = f"{len(facts)} fact(s) from {len(todo)} turn(s) in topics/{relpath}"
        return audit


class _Topic:
    """One topic file being extended: its prior claims, its current state, new sections."""

    def __init__(self, text: str, path: str, line: frozenset[str]):
        self.text = text
        self.doc = parse_topic(text, path, strict=False)
        self.on_line = {source_anchor(sid) for sid in line} | set(line)
        self.counter = max((int(n) for n in re.findall(r"\[\^e(\d+)\]", text)), default=0)

    # -- prior claims ----------------------------------------------------------------------

    def _cites_only_the_line(self, fids: list[str]) -> bool:
        targets = [s.target for fid in fids for s in getattr(self.doc.evidence.get(fid),
                                                             "sources", [])]
        return bool(targets) and all(t.rpartition("#")[2] in self.on_line or t in self.on_line
                                     for t in targets)

    def prior_values(self) -> list[tuple[F.Fact, str]]:
        """Holding value claims on the batch's line, with the claim text as written."""
        out = []
        for block in self.doc.blocks:
            if block.headings[-1:] == [STATE]:
                continue
            for claim in block.claims:
                m = _VALUE_CLAIM.match(claim.text)
                if not m or SUPERSEDED_MARK in claim.text:
                    continue
                if not self._cites_only_the_line(claim.citations):
                    continue
                key = m.group("key").strip().lower()
                key = "" if key == "value" else key
                out.append((F.Fact(F.VALUES, claim.text, [], key=key,
                                   value=m.group("value").strip()), claim.text))
        return out

    # -- rendering -------------------------------------------------------------------------

    def _cite(self, records: list[Record], definitions: list[str]) -> str:
        labels = []
        for record in dict.fromkeys(records):
            self.counter += 1
            label = f"e{self.counter}"
            labels.append(f"[^{label}]")
            words = " ".join(keywords(record.content, 3)) or record.role
            definitions.append(f"[^{label}]: Time: `{record.day()}`; "
                               f"Sources: [{words}]({record.source_id})")
        return "".join(labels)

    def _fact_text(self, fact: F.Fact) -> str:
        text = fact.text
        if fact.replaces:
            text += F.replaces_note(fact.replaces)
        if fact.superseded_by:
            text += F.superseded_note(fact.superseded_by)
        return text

    def add(self, heading: str, facts: list[F.Fact], *, side_branch: bool = False) -> str:
        prior = [] if side_branch else self.prior_values()
        facts = F.resolve_lines(facts, [fact for fact, _ in prior])
        if side_branch:
            for fact in facts:
                if fact.value:
                    fact.text += " (on a side branch)"
        # A write may change only paragraphs citing its own batch: a committed claim a new
        # value replaces is left as written; the new claim says what it replaces.
        lines = self.text.splitlines()
        if not any(line.startswith("# ") for line in lines):
            lines = [f"# {heading}", ""] + lines
        for kind in F.KINDS:
            chunk: list[str] = []
            for fact in facts:
                if fact.kind != kind:
                    continue
                definitions: list[str] = []
                body = self._fact_text(fact) + self._cite(fact.records, definitions)
                chunk += [body, "", *definitions, ""]
            if chunk:
                _insert_section(lines, kind, chunk[:-1])
        if not side_branch:
            self._write_state(lines, facts, prior)
        return "\n".join(lines).rstrip("\n") + "\n"

    def _write_state(self, lines: list[str], facts: list[F.Fact],
                     prior: list[tuple[F.Fact, str]]) -> None:
        """The Current state block of a new topic; a topic that has one (committed, so not
        this write's to change) gets a further block with what this batch settled."""
        old_block = next((b for b in self.doc.blocks if b.headings[-1:] == [STATE]), None)
        if old_block is not None:
            return self._append_state(lines, facts)
        dropped_keys = [f.key for f, _ in prior if f.superseded_by] + \
            [f.key for f in facts if f.value and f.kind in (F.VALUES, F.DECISIONS)]
        kept: list[tuple[str, str, str]] = []  # (kind tag, text, citations)
        if old_block is not None:
            for raw in old_block.text.split("\n"):
                m = _STATE_LINE.fullmatch(re.sub(r"(?: \^[A-Za-z0-9-]+)+$", "", raw.strip()))
                if not m:
                    continue
                tag = m.group("text").split(":", 1)[0]
                value = _VALUE_CLAIM.match(m.group("text") + " (")
                if value and _state_group(tag) == "value" and any(F.same_line(value.group("key").strip().lower(), k)
                                 for k in dropped_keys if k):
                    continue
                kept.append((tag, m.group("text"), m.group("cites")))
        definitions: list[str] = []
        new: list[tuple[str, str, str]] = []
        for fact in facts:
            line = _state_line(fact)
            if line is None or fact.superseded_by:
                continue
            if fact.kind == F.VALUES:  # one line per value: the newest statement of it
                new = [e for e in new if not (e[0] == "value" and F.same_line(
                    e[1].split(":", 1)[0].lower(), fact.key))]
            new.append((line[0], line[1], self._cite(fact.records, definitions)))
        entries = kept + new
        if not entries:
            return
        by_tag: dict[str, list[tuple[str, str, str]]] = {}
        for entry in entries:
            by_tag.setdefault(_state_group(entry[0]), []).append(entry)
        body = [f"- {text}{cites}" for group in ("value", "Decided", "Open", "To do")
                for _, text, cites in by_tag.get(group, [])[-STATE_LIMIT:]]
        if old_block is not None and old_block.id:
            body[-1] += f" ^{old_block.id}"
        start = next((i for i, line in enumerate(lines) if line == f"## {STATE}"), None)
        if start is None:
            first = next(i for i, line in enumerate(lines) if line.startswith("# "))
            block_lines = body + ([""] + definitions if definitions else [])
            lines[first + 1:first + 1] = ["", f"## {STATE}", ""] + block_lines
            return
        end = next((i for i in range(start + 1, len(lines))
                    if re.match(r"#{1,6} ", lines[i])), len(lines))
        # the kept lines' definitions stay; the normaliser drops those nothing cites now
        old_definitions = [line for line in lines[start + 1:end] if line.startswith("[^")]
        definitions = old_definitions + definitions
        block_lines = body + ([""] + definitions if definitions else [])
        lines[start + 1:end] = [""] + block_lines + ([""] if end < len(lines) else [])

    def _append_state(self, lines: list[str], facts: list[F.Fact]) -> None:
        definitions: list[str] = []
        body = []
        for fact in facts:
            line = _state_line(fact)
            if line is None or fact.superseded_by:
                continue
            text = line[1] + (F.replaces_note(fact.replaces) if fact.replaces else "")
            body.append(f"- {text}{self._cite(fact.records, definitions)}")
        if body:
            _insert_section(lines, STATE, body + [""] + definitions)


def _state_line(fact: F.Fact) -> tuple[str, str] | None:
    if fact.kind == F.VALUES and fact.value:
        key = fact.key[:1].upper() + fact.key[1:] if fact.key else "Value"
        return "value", f"{key}: {fact.value}"
    if fact.kind == F.DECISIONS:
        return "Decided", "Decided: " + fact.text.split(": ", 1)[-1]
    if fact.kind == F.QUESTIONS:
        return "Open", "Open: " + fact.text.split(": ", 1)[-1]
    if fact.kind == F.ACTIONS:
        return "To do", f"To do ({fact.owner}): " + fact.text.split(": ", 1)[-1]
    return None


def _state_group(tag: str) -> str:
    return tag if tag in ("Decided", "Open") else "To do" if tag.startswith("To do") \
        else "value"


def _insert_section(lines: list[str], section: str, chunk: list[str]) -> None:
    start = next((i for i, line in enumerate(lines) if line == f"## {section}"), None)
    if start is None:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", f"## {section}", ""] + chunk
        return
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"#{1,2} ", lines[i])),
               len(lines))
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    lines[end:end] = [""] + chunk + ([""] if end < len(lines) else [])
