"""The embedded writer as it was before issue 16 (a transcript of what was said, one claim per
turn), kept verbatim as the recall benchmark's baseline. Not part of the library."""


from __future__ import annotations

import re
from dataclasses import dataclass, field

from scriptorium.fsutil import safe_join
from scriptorium.memory.records import Record
from scriptorium.memory.writers.base import WriteRequest, WriterAudit
# helpers the rewrite kept unchanged
from scriptorium.memory.writers.embedded import content_words, keywords, subject_of

SECTIONS = ("Decisions", "Preferences", "Requests", "Facts", "Questions and answers",
            "Sub-agent work")
MAX_STATEMENT_CHARS = 600
MAX_SENTENCES = 3

_PREFERENCE = re.compile(
    r"\b(prefer\w*|favou?rite|i (?:really )?(?:like|love|hate|dislike|enjoy)|rather|"
    r"avoid\w*|don'?t want|do not want|can'?t stand|always|never)\b", re.I)
_DECISION = re.compile(
    r"\b(decid\w*|decision|we will|we'll|i will|i'll|let'?s|going to|book\w*|chose|choose|"
    r"agree[sd]?|plan(?:ned|s)? to|go with|confirm\w*|schedul\w*|approv\w*|must|"
    r"should)\b", re.I)
_REQUEST_VERBS = frozenset("""
find search look check compare list show give tell send email call write draft prepare create
make add remove update fix summarize summarise explain translate remind order buy reserve cancel
arrange organize organise research review please can could would
""".split())
_SENTENCE = re.compile(r"(?<=[.!?…])\s+(?=\S)")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)


def _one_line(text: str) -> str:
    """Collapse whitespace so a turn's text can never break the paragraph or forge syntax."""
    text = " ".join(text.split())
    # A citation-looking "[^" or a trailing "^id" inside a claim would be read as syntax.
    return text.replace("[^", "[ ^").replace(" ^", " ˆ")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


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
    """Which section a paragraph opened by ``record`` belongs to."""
    text = record.content
    if record.origin in ("spawn", "sub-agent"):
        return "Sub-agent work"
    if record.role == "user" and "?" in text:
        return "Questions and answers"
    if record.role == "user" and _PREFERENCE.search(text):
        return "Preferences"
    if _DECISION.search(text):
        return "Decisions"
    words = _words(text)
    if record.role == "user" and words and words[0] in _REQUEST_VERBS:
        return "Requests"
    return "Facts"


def claim(record: Record, section: str) -> str:
    """The claim stating what ``record`` said, in words that say who said it and how."""
    statement = condense(record.content)
    if record.origin == "spawn":
        return f"A sub-agent was given the task: {statement}"
    if record.origin == "sub-agent":
        who = "The sub-agent" if record.role == "assistant" else "The delegating agent"
        return f"{who} reported: {statement}"
    who = record.speaker_name or f"The {record.role}"
    if record.role == "assistant":
        verb = "committed" if _DECISION.search(record.content) else "answered"
        prefix = f"In a retried reply, {record.speaker_name or 'the assistant'}" \
            if record.origin == "retry" else who
        return f"{prefix} {verb}: {statement}"
    if record.origin == "edit":
        return f"{who} corrected an earlier message: {statement}"
    verb = {"Questions and answers": "asked", "Preferences": "stated a preference",
            "Decisions": "decided", "Requests": "requested"}.get(section, "said")
    return f"{who} {verb}: {statement}"


def is_trivial(record: Record) -> bool:
    """A turn with nothing to remember on its own ("ok", "thanks!")."""
    return not content_words(record.content)


@dataclass
class _Paragraph:
    section: str
    claims: list[tuple[str, list[Record]]] = field(default_factory=list)


class BaselineWriter:
    """Deterministic topic writer; see the module docstring."""

    name = "baseline"
    repair_attempts = 0  # deterministic: the same batch would be rejected the same way

    def write(self, request: WriteRequest) -> WriterAudit:
        audit = WriterAudit(writer=self.name)
        todo = [r for r in request.batch if r.source_id not in request.cited]
        if not todo:
            audit.summary = "every turn of the batch is already cited; nothing to add"
            return audit
        heading, relpath = subject_of(request.session_title, list(request.batch),
                                      request.subject_hint)
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
        """Exchanges (a user turn and the reply to it) or single turns, in batch order."""
        out: list[_Paragraph] = []
        index = 0
        while index < len(todo):
            record = todo[index]
            if is_trivial(record) and out:  # fold the citation into the previous claim
                out[-1].claims[-1][1].append(record)
                index += 1
                continue
            section = classify(record)
            paragraph = _Paragraph(section, [(claim(record, section), [record])])
            nxt = todo[index + 1] if index + 1 < len(todo) else None
            if record.role == "user" and nxt is not None and nxt.role == "assistant" \
                    and not is_trivial(nxt):
                paragraph.claims.append((claim(nxt, section), [nxt]))
                index += 1
            out.append(paragraph)
            index += 1
        return out

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
