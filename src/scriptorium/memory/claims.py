"""How a value claim reads, and what it says it replaces: the grammar both the embedded
writer (which writes it) and search (which ranks by it) rely on.

A value claim opens with its line and value: ``P99 latency alert threshold: 150 ms (the
user: …)``. A later claim that changes the value says what it replaces: ``… (replaces 160
ms)``. Within one batch the writer also marks the older claim ``(superseded: now 150 ms)``;
across batches it cannot edit the committed older claim, so "superseded" is derived when
memory is read: a value claim is superseded when a later claim in the same topic, on the same
line, replaces its value (:func:`superseded_by`). Pure: no file, no index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

# How a claim says a later one replaced it ("… (superseded: now 150)").
SUPERSEDED_MARK = "(superseded"
REPLACES_MARK = "(replaces "

_VALUE_CLAIM = re.compile(r"(?:- )?(?P<key>[^:()\[\]]{1,60}): "
                          r"(?P<value>[$€£]?\d[^()]{0,40}?)(?: \(|$)")
_REPLACES = re.compile(r"\(replaces (?P<old>[^()]+?)\)")
_NUMBER = re.compile(r"[$€£]?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class ValueClaim:
    """A claim's line (lower case), value, and the value it says it replaces ("" if none)."""

    key: str
    value: str
    replaces: str = ""


def value_claim(text: str) -> ValueClaim | None:
    """The line and value a claim opens with, or None when it states no value."""
    m = _VALUE_CLAIM.match(text.strip())
    if m is None:
        return None
    key = m.group("key").strip().lower()
    replaced = _REPLACES.search(text, m.end("value"))
    return ValueClaim("" if key == "value" else key, m.group("value").strip(),
                      replaced.group("old").strip() if replaced else "")


def number(value: str) -> str:
    """The number a value opens with, without separators ("1,500 euros" -> "1500")."""
    m = _NUMBER.match(value)
    return m.group(0).replace(",", "") if m else value


def same_line(a: str, b: str) -> bool:
    """Two value keys name the same line: equal, or the same head word with another shared
    word (or one of them is that head word alone)."""
    if not a or not b:
        return False
    if a == b:
        return True
    wa, wb = a.split(), b.split()
    if len(set(wa) & set(wb)) >= 2:
        return True
    return wa[-1] == wb[-1] and (len(wa) == 1 or len(wb) == 1)


def superseded_note(new_value: str) -> str:
    return f" {SUPERSEDED_MARK}: now {new_value})"


def replaces_note(old_value: str) -> str:
    return f" {REPLACES_MARK}{old_value})"


def replaces(later: ValueClaim, earlier: ValueClaim) -> bool:
    """Does ``later`` say it replaces ``earlier``'s value on ``earlier``'s line?"""
    return bool(later.replaces) and same_line(later.key, earlier.key) \
        and number(later.replaces) == number(earlier.value) \
        and number(later.value) != number(earlier.value)


def superseded_by(claim: ValueClaim, later: Sequence[ValueClaim]) -> int | None:
    """The index in ``later`` (claims after ``claim`` in its topic) of the first that
    replaces it, else None."""
    return next((i for i, other in enumerate(later) if replaces(other, claim)), None)
