"""Normalising only what a write changed; the rest of a long topic file is kept as it is.

A batch adds a few paragraphs to a topic (and rewrites its current-state paragraph).
Normalising the whole staged file (:func:`.normalize.normalize_topic`) parsed every paragraph
and resolved every footnote of it, so a write's time and its transient memory grew with the
topic. When the committed file is one the runtime's normalisation wrote (the catalog says so:
``TopicCatalog.normal_sha``), each of its paragraphs is already what normalising gives. So the
staged file is compared with it unit by unit (what blank lines separate, and each line of a
run of definitions), only the units the writer added or changed are parsed and normalised,
with the same rules (:func:`.normalize.normalize_items`, which asks the rest of the file what a
rule needs by searching its text), and the result is spliced between the unchanged units.

Wherever a rule could reach an unchanged unit (a heading inserted above other units, a
removed paragraph that took a footnote's last citation, fenced code or a comment that may span
blank lines, an orphan label) :func:`normalize_edit` answers None and the caller normalises
the whole file: what it returns is byte for byte what ``normalize_topic`` returns
(tests/memory/test_normalize_edit.py checks it on random files and edits).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import KeysView, Set
from difflib import SequenceMatcher
from itertools import accumulate
from typing import Callable, Iterator

from .normalize import LinkFor, NotLocal, Resolve, normalize_items, prune_sections
from .topics import (
    CITATION_RE, DEF_START_RE, Block, Evidence, Heading, Item, Parser, classify, render_item,
)

__all__ = ["normalize_edit"]

# A blank-line group that is a run of definition lines (each line as ``_is_def_group`` reads it)
_DEF_RUN = re.compile(r"\[\^[^\]\n]*\]:[^\n]*(?:\n\[\^[^\]\n]*\]:[^\n]*)*")
# Text where a blank line may not end an item (fences, comments) or line ends are not "\n".
_UNSPLICEABLE = ("```", "~~~", "<!--", "\r")


def _is_def_group(group: str) -> bool:
    return group.startswith("[^") and DEF_START_RE.match(group) is not None


def _is_paragraph(group: str) -> bool:
    return classify(group.split("\n", 1)[0]) == "text"


def _units(text: str) -> tuple[list[str], list[int]]:
    """``text`` cut where one item surely ends and the next begins: at blank lines, and
    between the lines of a run of definitions (a paragraph's definitions change one by one:
    a write adds some under a paragraph it rewrites). Returns the units and their offsets."""
    units: list[str] = []
    starts: list[int] = []
    pos = 0
    for group in text.split("\n\n"):
        if "\n" in group and _DEF_RUN.fullmatch(group) is not None:
            lines = group.split("\n")
            units += lines
            starts += accumulate((len(line) + 1 for line in lines[:-1]), initial=pos)
            pos += len(group) + 2
        else:
            units.append(group)
            starts.append(pos)
            pos += len(group) + 2
    return units, starts


class _Rest:
    """The unchanged units of the staged file (:class:`.normalize.Outside`), answered by
    searching the staged text outside the changed spans (no parse)."""

    def __init__(self, text: str, spans: list[tuple[int, int]], kept: Callable[[], Iterator[str]],
                 path: str):
        self.text, self.spans, self.kept, self.path = text, spans, kept, path
        self.starts = [start for start, _ in spans]
        self._defs: dict[str, Evidence | None] = {}

    def _changed(self, pos: int) -> bool:
        k = bisect.bisect_right(self.starts, pos) - 1
        return k >= 0 and pos < self.spans[k][1]

    def _def_lines(self, fid: str) -> Iterator[int]:
        """Where each line ``[^fid]: …`` outside the changes starts."""
        head = f"[^{fid}]:"
        if self.text.startswith(head) and not self._changed(0):
            yield 0
        pattern = "\n" + head
        pos = self.text.find(pattern)
        while pos >= 0:
            if not self._changed(pos + 1):
                yield pos + 1
            pos = self.text.find(pattern, pos + 1)

    def defines(self, fid: str) -> bool:
        return next(self._def_lines(fid), None) is not None

    def definition(self, fid: str) -> Evidence | None:
        if fid not in self._defs:
            at = next(self._def_lines(fid), None)
            found = None
            if at is not None:
                end = self.text.find("\n", at)
                line = self.text[at:end if end >= 0 else len(self.text)]
                found = Parser(self.path).definition(line.strip(), 0)
            self._defs[fid] = found
        return self._defs[fid]

    def cites(self, fid: str) -> bool:
        pattern = f"[^{fid}]"
        outside = self.text.count(pattern) - sum(self.text.count(pattern, start, end)
                                                 for start, end in self.spans)
        if outside <= sum(1 for _ in self._def_lines(fid)):
            return False  # each occurrence outside starts a definition line
        return any(pattern in group for group in self.kept()  # exact: paragraphs only
                   if _is_paragraph(group))


def normalize_edit(committed: str, staged: str, path: str, *,
                   committed_ids: Set[str] | KeysView[str], resolve: Resolve,
                   link_for: LinkFor, taken_ids: set[str] | None = None) -> str | None:
    """What ``normalize_topic(staged, …)`` returns, computed from the units of ``staged``
    (:func:`_units`) that differ from ``committed`` (the committed file, which normalisation wrote); None when
    that cannot be done apart from the rest of the file (then nothing was changed, not even
    ``taken_ids``)."""
    if not committed.endswith("\n") or any(m in committed or m in staged
                                           for m in _UNSPLICEABLE):
        return None
    text = staged.rstrip("\n")
    (old, old_starts), (new, starts) = _units(committed[:-1]), _units(text)
    ops = SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    changes = [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in ops if tag != "equal"]
    spans = [(starts[j1], starts[j2 - 1] + len(new[j2 - 1])) for _, _, j1, j2 in changes
             if j2 > j1]

    def kept_units() -> Iterator[str]:
        return (g for tag, i1, i2, _, _ in ops if tag == "equal" for g in old[i1:i2])

    items: list[Item] = []
    region: dict[int, int] = {}  # id(item) -> the change it comes from
    gone_fids: set[str] = set()
    gone_blocks: list[bool] = []
    for r, (i1, i2, j1, j2) in enumerate(changes):
        # only their items: a change's citations of definitions outside it are no problem
        gone = Parser(path).read("\n\n".join(old[i1:i2])) if i2 > i1 else []
        added = Parser(path).read("\n\n".join(new[j1:j2])) if j2 > j1 else []
        lost = [x for x in gone if isinstance(x, Block)]
        if any(isinstance(x, Heading) for x in gone):
            return None  # the sections around it change
        if any(isinstance(x, Heading) for x in added) and (j2 < len(new) or lost):
            return None  # a new section cuts an unchanged one short
        gone_blocks.append(bool(lost))
        gone_fids.update(fid for block in lost for fid in block.citations)
        for item in added:
            region[id(item)] = r
        items += added

    rest = _Rest(text, spans, kept_units, path)
    taken = set(taken_ids) if taken_ids is not None else None
    try:
        kept = normalize_items(items, path, committed=committed_ids, resolve=resolve,
                               link_for=link_for, taken_ids=taken, outside=rest)
    except NotLocal:
        return None
    cited = {m.group(1) for x in kept if isinstance(x, Block)
             for m in CITATION_RE.finditer(x.text)}
    for fid in gone_fids - cited:
        if rest.defines(fid) and not rest.cites(fid):
            return None  # its definition outside loses its last citation: pruned
    by_change: list[list[Item]] = [[] for _ in changes]
    for item in kept:
        by_change[region[id(item)]].append(item)
    for r, lost_any in enumerate(gone_blocks):
        if lost_any and not any(isinstance(x, Block) for x in by_change[r]):
            return None  # its section may be left without a paragraph
    if changes and changes[-1][3] == len(new):  # the only change that may hold headings
        by_change[-1] = prune_sections(by_change[-1])
    if not any(isinstance(x, Block) for change in by_change for x in change) \
            and not any(map(_is_paragraph, kept_units())):
        return None  # no paragraph left: the file goes

    pieces: list[tuple[str, bool, bool]] = []  # text, starts with a definition, ends with one
    r = 0
    for tag, i1, i2, _, _ in ops:
        if tag == "equal":  # as it stands in the committed file
            pieces.append((committed[old_starts[i1]:old_starts[i2 - 1] + len(old[i2 - 1])],
                           _is_def_group(old[i1]), _is_def_group(old[i2 - 1])))
            continue
        for item in by_change[r]:
            rendered, is_def = render_item(item), isinstance(item, Evidence)
            if rendered or is_def:
                pieces.append((rendered, is_def, is_def))
        r += 1
    out: list[str] = []
    previous_def = False
    for piece, first_def, last_def in pieces:
        if out:
            out.append("\n" if previous_def and first_def else "\n\n")
        out.append(piece)
        previous_def = last_def
    if taken_ids is not None and taken is not None:
        taken_ids |= taken
    return "".join(out) + "\n" if out else ""
