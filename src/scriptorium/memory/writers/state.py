"""A topic's "Current state" block: what holds now, rewritten in place as batches change it.

One paragraph under ``## Current state`` right below the title: a line per value (the value
that holds, and the one it replaced), then decisions, open questions and action items, each
line citing its evidence. A later batch rewrites the same paragraph (same block id). A write
may not drop another batch's citations from a paragraph (:mod:`scriptorium.memory.foreign`),
and here it never has to: a value line that changes keeps the citations of the value it
replaced beside those of the new one (its evidence is the line's history, "303 ms (was 382
ms)"), and items pushed out of a full group fold into one "N earlier … below" line that keeps
their citations. So the block always cites at least what it cited before.

Only the line being written may change it: a value line is replaced only when every turn it
cites is on the batch's line, so another branch or conversation adds a line of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from ..claims import number, same_line, value_claim
from ..records import Record
from ..topics import Block
from . import facts as F

STATE = "Current state"
STATE_LIMIT = 8  # lines per group kept in the block (older ones fold into one line)
GROUPS = ("value", "When", "Rule", "Decided", "Open", "To do")
_FOLDED = {"When": ("dates", F.DATES), "Rule": ("constraints", F.CONSTRAINTS),
           "Decided": ("decisions", F.DECISIONS), "Open": ("open questions", F.QUESTIONS),
           "To do": ("action items", F.ACTIONS)}
_FOLDED_RE = re.compile(r"(\d+) earlier (dates|constraints|decisions|open questions|"
                        r"action items)\b")


@dataclass
class Entry:
    """One line of the block: its group, value line key (values only), text, citations."""

    group: str
    text: str
    labels: list[str]
    key: str = ""
    folded: int = 0          # an "N earlier …" line: how many items it stands for
    new: bool = field(default=False, compare=False)  # written by this batch

    def render(self) -> str:
        return f"- {self.text}" + "".join(f"[^{label}]" for label in self.labels)


def read_entries(block: Block | None) -> list[Entry]:
    """The block's lines as entries (a line the writer did not write is kept as a note)."""
    out: list[Entry] = []
    for claim in block.claims if block is not None else ():
        text = claim.text[2:] if claim.text.startswith("- ") else claim.text
        folded = _FOLDED_RE.match(text)
        if folded:
            group = next(g for g, (noun, _) in _FOLDED.items() if noun == folded.group(2))
            out.append(Entry(group, text, list(claim.citations), folded=int(folded.group(1))))
            continue
        tag = text.split(":", 1)[0]
        group = "To do" if tag.startswith("To do") else tag if tag in _FOLDED else "value"
        value = value_claim(text) if group == "value" else None
        out.append(Entry(group, text, list(claim.citations), key=value.key if value else ""))
    return out


def _line_of(fact: F.Fact) -> tuple[str, str] | None:
    """(group, text) of the state line for a fact, None for kinds the block leaves out."""
    if fact.kind == F.VALUES and fact.value:
        key = fact.key[:1].upper() + fact.key[1:] if fact.key else "Value"
        return "value", f"{key}: {F.shown(fact.value, fact.key)}"
    if fact.kind == F.DATES:
        return "When", "When: " + F.spoken_by(fact)
    if fact.kind == F.CONSTRAINTS:
        return "Rule", "Rule: " + F.spoken_by(fact)
    if fact.kind == F.DECISIONS:
        return "Decided", "Decided: " + fact.text.split(": ", 1)[-1]
    if fact.kind == F.QUESTIONS:
        return "Open", "Open: " + fact.text.split(": ", 1)[-1]
    if fact.kind == F.ACTIONS:
        return "To do", f"To do ({fact.owner}): " + fact.text.split(": ", 1)[-1]
    return None


def updated(entries: list[Entry], facts: list[F.Fact],
            cite: Callable[[list[Record]], list[str]],
            on_line: Callable[[list[str]], bool]) -> list[Entry]:
    """The block's entries once ``facts`` (this batch's, lines already resolved) are in.
    ``cite`` makes citation labels for records; ``on_line`` says whether labels cite only
    turns on the batch's line."""
    out = list(entries)
    for fact in facts:
        line = _line_of(fact)
        if line is None or fact.superseded_by:
            continue
        group, text = line
        if group == "value":
            old = next((e for e in reversed(out) if e.group == "value" and not e.folded
                        and same_line(e.key, fact.key) and (e.new or on_line(e.labels))), None)
            if old is not None:
                was = value_claim(old.text)
                before = was.value if was is not None else ""
                if before and number(before) != number(fact.value):
                    text = f"{old.text.split(':', 1)[0]}: {F.shown(fact.value, fact.key)} " \
                        f"(was {F.shown(before, fact.key)})"
                else:  # the same value said again: the line stands, with more evidence
                    text = old.text
                old.text, old.labels = text, old.labels + cite(fact.records)
                old.new = True
                continue
            if fact.replaces:
                text += f" (was {F.shown(fact.replaces, fact.key)})"
        out.append(Entry(group, text, cite(fact.records), key=fact.key, new=True))
    return _fold(out)


def _fold(entries: list[Entry]) -> list[Entry]:
    """Group order, at most STATE_LIMIT items per group: older items fold into one line."""
    out: list[Entry] = []
    for group in GROUPS:
        items = [e for e in entries if e.group == group and not e.folded]
        folded = [e for e in entries if e.group == group and e.folded]
        extra = items[:-STATE_LIMIT] if group in _FOLDED and len(items) > STATE_LIMIT else []
        if extra or folded:
            count = sum(e.folded for e in folded) + len(extra)
            noun, section = _FOLDED[group]
            labels = [label for e in folded + extra for label in e.labels]
            out.append(Entry(group, f"{count} earlier {noun} are under {section} below",
                             labels, folded=count))
        out.extend(items[len(extra):])
    out.extend(e for e in entries if e.group not in GROUPS)
    return out


def write_block(lines: list[str], block: Block | None, entries: list[Entry],
                definitions: list[str], shift: int = 0) -> None:
    """Put the block (``entries`` and the new ``definitions``) into the topic's ``lines``:
    in place of ``block`` (its id kept; ``shift``: lines added above it since it was
    parsed), else as a new section below the title."""
    body = [e.render() for e in entries]
    if not body:
        return
    if block is None:
        first = next(i for i, line in enumerate(lines) if line.startswith("# "))
        lines[first + 1:first + 1] = ["", f"## {STATE}", "", *body,
                                      *([""] + definitions if definitions else [])]
        return
    body[-1] += "".join(f" ^{i}" for i in block.ids)
    start = block.line - 1 + shift
    end = start
    while end < len(lines) and lines[end].strip():
        end += 1
    lines[start:end] = body
    if definitions:  # after the block's own definitions
        at = start + len(body)
        while at < len(lines) and not lines[at].strip():
            at += 1
        while at < len(lines) and lines[at].startswith("[^"):
            at += 1
        lines[at:at] = definitions
