"""What the embedded writer reads of the topic it extends, in one pass over its lines.

The writer needs three things from a committed topic: its value claims outside the current
state (with the footnotes they cite), its current-state paragraph, and the footnote
definitions those cite. A full parse (:func:`scriptorium.memory.topics.parse_topic`)
validates every rule and resolves every definition's sources; the transaction does that
anyway once the writer is done, so here each paragraph is split into claims only when it can
hold a value (or is the current state), and a definition's sources are read only for the
footnotes asked about. The file was installed by a transaction, so it is well formed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..claims import ValueClaim, value_claim
from ..topics import CITATION_RE as _CITATION, HEADING_RE as _HEADING, Block, Claim

_DEFINITION = re.compile(r"\[\^([^\]\n]*)\]:")
_IDS = re.compile(r"(?:(?<=\s)|(?<=\]))\^([A-Za-z0-9-]+)\s*$")
_MAY_HOLD_VALUE = re.compile(r": [$€£]?\d")
_TARGET = re.compile(r"\]\(([^()\s]*)\)")
_LABEL = re.compile(r"\[\^e(\d+)\]")


@dataclass
class ScannedTopic:
    """``values``: (claim, text, footnote labels) in file order; ``state``: the first
    paragraph under ``state_heading``; ``counter``: the highest ``eN`` label used."""

    values: list[tuple[ValueClaim, str, list[str]]] = field(default_factory=list)
    state: Block | None = None
    definitions: dict[str, str] = field(default_factory=dict)
    counter: int = 0

    def targets(self, labels: list[str]) -> list[str]:
        """The source links the footnotes ``labels`` list (unknown labels list none)."""
        out: list[str] = []
        for label in labels:
            line = self.definitions.get(label, "")
            out += _TARGET.findall(line.partition("Sources:")[2])
        return out


def claims_of(text: str) -> list[Claim]:
    """A paragraph's claims: the text before each citation group, with its footnotes."""
    claims: list[Claim] = []
    pos, last_end = 0, -1
    for m in _CITATION.finditer(text):
        if m.start() == last_end and claims:
            claims[-1].citations.append(m.group(1))
        else:
            claims.append(Claim(" ".join(text[pos:m.start()].split()), [m.group(1)]))
        pos = last_end = m.end()
    return claims


def scan_topic(text: str, state_heading: str) -> ScannedTopic:
    out = ScannedTopic(counter=max((int(n) for n in _LABEL.findall(text)), default=0))
    heading = ""
    para: list[str] = []
    para_line = 0
    fence = ""
    comment = False

    def flush() -> None:
        nonlocal para
        if not para:
            return
        body = "\n".join(para)
        para = []
        ids: list[str] = []
        while (m := _IDS.search(body)) is not None:
            ids.insert(0, m.group(1))
            body = body[:m.start()].rstrip()
        if heading == state_heading:
            if out.state is None:
                out.state = Block(ids[-1] if ids else "", ids[:-1], claims_of(body),
                                  [heading], para_line, body)
            return
        if not _MAY_HOLD_VALUE.search(body):
            return
        for claim in claims_of(body):
            value = value_claim(claim.text)
            if value is not None:
                out.values.append((value, claim.text, claim.citations))

    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if fence or comment:  # inside fenced code or a multi-line comment
            if fence and line.startswith(fence):
                fence = ""
            comment = comment and "-->" not in line
            continue
        heading_match = _HEADING.fullmatch(line) if line.startswith("#") else None
        definition = _DEFINITION.match(line) if line.startswith("[^") else None
        if line and not (heading_match or definition
                         or line.startswith(("<!--", "<a ", "```", "~~~"))):
            if not para:
                para_line = number
            para.append(line)
            continue
        if para:
            flush()
        if line.startswith(("```", "~~~")):
            fence = line[:3]
        elif line.startswith("<!--"):
            comment = "-->" not in line[4:]
        elif heading_match:
            heading = (heading_match.group(2) or "").strip()
        elif definition:
            out.definitions[definition.group(1)] = line
    flush()
    return out
