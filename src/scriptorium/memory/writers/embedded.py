"""The embedded writer: offline, deterministic and fast.

Each batch becomes topic paragraphs that state what was said, each citing the turns it came
from, filed in a topic named for the conversation's subject (the session title, else its most
salient words) under sections a reader scans by kind: Decisions, Preferences, Facts, Questions
and answers. A user question and the reply that follows it share one paragraph, so a search
for either finds both. Turns with nothing to say ("ok, thanks") add their citation to the
paragraph before them, so every turn of the batch is cited and a redo can be recognised.

Writing a batch whose turns the topics already cite adds nothing: a redo after a crash is free.
The writer never writes ids; the transaction's normaliser assigns block and evidence ids.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ...fsutil import safe_join
from ..records import Record
from .base import WriteRequest, WriterAudit

SECTIONS = ("Decisions", "Preferences", "Facts", "Questions and answers")
MAX_STATEMENT_CHARS = 600
MAX_SENTENCES = 3

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

_PREFERENCE = re.compile(
    r"\b(prefer\w*|favou?rite|like[sd]?|love[sd]?|hate[sd]?|dislike[sd]?|allerg\w*|vegetarian|"
    r"vegan|always|never|rather|avoid\w*|don'?t want|do not want|can'?t stand)\b", re.I)
_DECISION = re.compile(
    r"\b(decid\w*|decision|we will|we'll|i will|i'll|let'?s|going to|book\w*|chose|choose|"
    r"agree[sd]?|plan(?:ned|s)? to|go with|confirm\w*|schedul\w*|approv\w*|must|should)\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?…])\s+(?=\S)")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)


def _one_line(text: str) -> str:
    """Collapse whitespace so a turn's text can never break the paragraph or forge syntax."""
    text = " ".join(text.split())
    # A citation-looking "[^" or a trailing "^id" inside a claim would be read as syntax.
    return text.replace("[^", "[ ^").replace(" ^", " ˆ")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def content_words(text: str) -> list[str]:
    return [w for w in _words(text) if w not in _STOPWORDS and not w.isdigit() and len(w) > 1]


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
    """The statement of a turn: short turns whole, long ones as their most informative
    sentences in their original order."""
    flat = _one_line(text)
    if len(flat) <= MAX_STATEMENT_CHARS:
        return flat
    sentences = _SENTENCE.split(flat)
    scored = []
    for index, sentence in enumerate(sentences):
        informative = len(content_words(sentence)) + 2 * len(re.findall(r"\d", sentence)) ** 0.5
        scored.append((informative + (3 if index == 0 else 0), index))
    keep = sorted(i for _, i in sorted(scored, reverse=True)[:MAX_SENTENCES])
    out = " ".join(sentences[i] for i in keep)
    if len(out) > MAX_STATEMENT_CHARS:
        out = out[: MAX_STATEMENT_CHARS - 1].rstrip() + "…"
    return out


def classify(record: Record) -> str:
    """Which section a turn's statement belongs to."""
    text = record.content
    if record.role == "user" and _PREFERENCE.search(text):
        return "Preferences"
    if _DECISION.search(text):
        return "Decisions"
    return "Facts"


def is_question(record: Record) -> bool:
    return record.role == "user" and "?" in record.content


def is_trivial(record: Record) -> bool:
    """A turn with nothing to remember on its own ("ok", "thanks!")."""
    return not content_words(record.content)


def slug(text: str) -> str:
    out = re.sub(r"[^\w]+", "-", text.lower(), flags=re.UNICODE).strip("-_")
    return out[:60].strip("-_")


def subject_of(title: str, batch: list[Record]) -> tuple[str, str]:
    """(heading, topic path relative to topics/) for a batch: the session title, else the
    batch's most salient words."""
    if slug(title):
        return title.strip(), slug(title) + ".md"
    text = " ".join(r.content for r in batch if r.role == "user") or " ".join(
        r.content for r in batch)
    words = keywords(text, 2)
    if not words:
        return "Notes", "notes.md"
    heading = " ".join(words).capitalize()
    return heading, slug(heading) + ".md"


@dataclass
class _Paragraph:
    section: str
    claims: list[tuple[str, list[Record]]] = field(default_factory=list)


class EmbeddedWriter:
    """Deterministic topic writer; see the module docstring."""

    name = "embedded"

    def write(self, request: WriteRequest) -> WriterAudit:
        audit = WriterAudit(writer=self.name)
        todo = [r for r in request.batch if r.source_id not in request.cited]
        if not todo:
            audit.summary = "every turn of the batch is already cited; nothing to add"
            return audit
        heading, relpath = subject_of(request.session_title, list(request.batch))
        paragraphs = self._paragraphs(todo)
        if not paragraphs:
            audit.summary = "nothing to add"
            return audit
        path = safe_join(request.topics_dir, relpath, "topic path")
        path.parent.mkdir(parents=True, exist_ok=True)
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
        updated = self._insert(existing, heading, paragraphs)
        path.write_text(updated, encoding="utf-8")
        audit.add("write", path=f"topics/{relpath}", paragraphs=len(paragraphs),
                  turns=[r.source_id for r in todo])
        audit.summary = f"{len(paragraphs)} paragraph(s) for {len(todo)} turn(s) in topics/{relpath}"
        return audit

    # -- building paragraphs -------------------------------------------------------------

    def _paragraphs(self, todo: list[Record]) -> list[_Paragraph]:
        out: list[_Paragraph] = []
        index = 0
        while index < len(todo):
            record = todo[index]
            nxt = todo[index + 1] if index + 1 < len(todo) else None
            if is_trivial(record):
                if out:  # fold the citation into the previous paragraph's last claim
                    out[-1].claims[-1][1].append(record)
                else:
                    out.append(_Paragraph("Facts", [(self._claim(record, "said"), [record])]))
                index += 1
                continue
            if is_question(record) and nxt is not None and nxt.role == "assistant" \
                    and not is_trivial(nxt):
                out.append(_Paragraph("Questions and answers", [
                    (self._claim(record, "asked"), [record]),
                    (self._claim(nxt, "answered"), [nxt]),
                ]))
                index += 2
                continue
            section = classify(record)
            out.append(_Paragraph(section, [(self._claim(record, self._verb(record, section)),
                                             [record])]))
            index += 1
        return out

    @staticmethod
    def _verb(record: Record, section: str) -> str:
        if record.role == "user":
            return {"Preferences": "stated a preference", "Decisions": "decided",
                    "Facts": "said"}[section] if not is_question(record) else "asked"
        return "committed" if section == "Decisions" else "answered"

    @staticmethod
    def _claim(record: Record, verb: str) -> str:
        speaker = "The user" if record.role == "user" else "The assistant"
        statement = condense(record.content)
        return f"{speaker} {verb}: {statement}"

    # -- rendering into the topic file ---------------------------------------------------

    @staticmethod
    def _render(paragraph: _Paragraph, counter: list[int]) -> str:
        body: list[str] = []
        definitions: list[str] = []
        for text, recs in paragraph.claims:
            labels = []
            for record in recs:
                counter[0] += 1
                label = f"e{counter[0]}"
                labels.append(f"[^{label}]")
                words = " ".join(keywords(record.content, 3)) or record.role
                definitions.append(
                    f"[^{label}]: Time: `{record.day()}`; Sources: [{words}]({record.source_id})")
            body.append(text + "".join(labels))
        return " ".join(body) + "\n\n" + "\n".join(definitions) + "\n"

    def _insert(self, existing: str, heading: str, paragraphs: list[_Paragraph]) -> str:
        lines = existing.splitlines()
        if not any(line.startswith("# ") for line in lines):
            lines = [f"# {heading}", ""] + lines
        counter = [self._highest_local_label(existing)]
        for section in SECTIONS:
            chunks = [self._render(p, counter) for p in paragraphs if p.section == section]
            if not chunks:
                continue
            text_lines = "\n".join(chunks).rstrip("\n").split("\n")
            start = next((i for i, line in enumerate(lines) if line == f"## {section}"), None)
            if start is None:
                while lines and not lines[-1].strip():
                    lines.pop()
                lines += ["", f"## {section}", ""] + text_lines
                continue
            end = next((i for i in range(start + 1, len(lines))
                        if re.match(r"#{1,2} ", lines[i])), len(lines))
            while end > start + 1 and not lines[end - 1].strip():
                end -= 1
            lines[end:end] = [""] + text_lines + ([""] if end < len(lines) else [])
        return "\n".join(lines).rstrip("\n") + "\n"

    @staticmethod
    def _highest_local_label(text: str) -> int:
        found = [int(n) for n in re.findall(r"\[\^e(\d+)\]", text)]
        return max(found, default=0)


def topic_path_for(title: str, batch: list[Record]) -> Path:
    """Where the embedded writer files ``batch`` (relative to the workspace)."""
    return Path("topics") / subject_of(title, batch)[1]
