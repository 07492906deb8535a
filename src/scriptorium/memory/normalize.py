"""The runtime's normalisation of a writer's staged topic file (memory reference §2.4).

Writers never write ids: they cite evidence with local labels (``[^e1]``) and may invent
``^ids``; normalising gives every label an ``e-`` + 10 hex id derived from what it cites,
every new paragraph an 8 hex id derived from its content, re-renders definitions canonically
and prunes what nothing cites. :func:`normalize_topic` does it to a whole file;
:func:`normalize_items` is the same rules on a run of items, with what lies outside them
asked of an :class:`Outside` (scriptorium.memory.normalize_edit normalises only the
paragraphs a write changed that way and keeps the rest of the file as it was).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import KeysView, Set
from typing import Callable, Iterable, Protocol

from .topics import (
    CITATION_RE, FOOTNOTE_ID_RE, Block, Evidence, Heading, Item, TopicDoc, collapse,
    is_local_label, parse_topic, render_block, render_topic,
)

__all__ = ["normalize_topic", "normalize_items", "prune_sections", "Outside", "NotLocal",
           "Resolve", "LinkFor"]

Resolve = Callable[[str, str], "str | None"]
LinkFor = Callable[[str, str], "str | None"]


class NotLocal(Exception):
    """The items cannot be normalised apart from the rest of their file: a rule would reach
    outside them (the caller normalises the whole file instead)."""


class Outside(Protocol):
    """What the rest of the file (outside the items being normalised) holds. It is a file
    the normalisation left as it is: no local labels, every block id committed."""

    def defines(self, fid: str) -> bool:
        """A definition of ``fid`` is outside."""

    def definition(self, fid: str) -> Evidence | None:
        """The first definition of ``fid`` outside, parsed."""

    def cites(self, fid: str) -> bool:
        """A paragraph outside cites ``fid``."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def normalize_topic(text: str, path: str, *, committed_ids: Iterable[str], resolve: Resolve,
                    link_for: LinkFor, taken_ids: set[str] | None = None) -> str:
    """Apply the runtime's normalisation to a writer's staged topic file (reference §2.4).

    1. local evidence labels (``[^e1]``) get ``e-`` + 10 hex ids derived from what they cite;
    2. an orphan local citation is bound to the unclaimed definitions after its paragraph;
    3. trailing ``^ids`` that are not committed are stripped (writers invent them);
    4. each evidence-bearing paragraph without an id gets 8 hex derived from its content;
    5. definitions re-rendered canonically (handles become relative links via ``link_for``);
    6. definitions nothing cites and record-free sections are pruned.

    Returns the canonical text, or "" when the file holds no block (delete it). The result
    is not validated: strict-parse it. Normalising the output again changes nothing.
    ``taken_ids`` (optional) are ids other files of the same transaction already use; new ids
    avoid them and are added to the set.
    """
    committed = committed_ids if isinstance(committed_ids, (Set, KeysView)) \
        else set(committed_ids)
    items = parse_topic(text, path, strict=False).items
    kept = prune_sections(normalize_items(items, path, committed=committed, resolve=resolve,
                                          link_for=link_for, taken_ids=taken_ids))
    if not any(isinstance(item, Block) for item in kept):
        return ""
    return render_topic(TopicDoc(path=path, blocks=[], evidence={}, items=kept))


def normalize_items(items: list[Item], path: str, *, committed: Set[str] | KeysView[str],
                    resolve: Resolve, link_for: LinkFor, taken_ids: set[str] | None = None,
                    outside: Outside | None = None) -> list[Item]:
    """Steps 1-6 of :func:`normalize_topic` but the section pruning, on ``items`` (changed in
    place); returns the items kept. ``outside``: the rest of the file, when ``items`` are not
    all of it (raises :class:`NotLocal` when a rule would need more of it than it answers)."""
    blocks = [(i, item) for i, item in enumerate(items) if isinstance(item, Block)]
    defs = [(i, item) for i, item in enumerate(items) if isinstance(item, Evidence)]

    resolved: dict[int, list[str]] = {}  # id(evidence) -> resolved targets
    for _, ev in defs:
        resolved[id(ev)] = [resolve(path, s.target) or s.target for s in ev.sources]

    # 1-2: bind local citations to definition items.
    binding: dict[tuple[int, str], Evidence] = {}
    claimed: set[int] = set()
    orphans: dict[int, list[str]] = {}
    defs_of: dict[str, list[tuple[int, Evidence]]] = {}
    for dpos, ev in defs:
        defs_of.setdefault(ev.fid, []).append((dpos, ev))
    for bi, (pos, block) in enumerate(blocks):
        for fid in dict.fromkeys(block.citations):
            if not is_local_label(fid):
                continue
            same = defs_of.get(fid, [])
            after = [ev for dpos, ev in same if dpos > pos]
            before = [ev for dpos, ev in same if dpos < pos]
            chosen = after[0] if after else (before[-1] if before else None)
            if chosen is None:
                orphans.setdefault(bi, []).append(fid)
            else:
                binding[(bi, fid)] = chosen
                claimed.add(id(chosen))
    if orphans and outside is not None:
        raise NotLocal("an orphan label binds to definitions up to the next paragraph")
    for bi, labels in orphans.items():
        pos = blocks[bi][0]
        nxt = blocks[bi + 1][0] if bi + 1 < len(blocks) else len(items)
        free = [ev for dpos, ev in defs
                if pos < dpos < nxt and id(ev) not in claimed and is_local_label(ev.fid)]
        for fid, ev in zip(labels, free):
            binding[(bi, fid)] = ev
            claimed.add(id(ev))

    used_fids = {ev.fid for _, ev in defs if not is_local_label(ev.fid)}
    if outside is not None and any(outside.defines(fid) for fid in used_fids):
        raise NotLocal("a footnote defined both here and outside")  # which one counts?
    new_fid: dict[int, str] = {}
    for _, ev in defs:
        if not is_local_label(ev.fid) or id(ev) not in claimed:
            continue
        k = 0
        while True:
            fid = "e-" + _sha(f"evidence|{ev.when}|{'|'.join(resolved[id(ev)])}|{k}")[:10]
            if fid not in used_fids and not (outside is not None and outside.defines(fid)):
                break
            k += 1
        used_fids.add(fid)
        new_fid[id(ev)] = fid

    by_fid: dict[str, Evidence] = {}
    for _, ev in defs:
        by_fid.setdefault(ev.fid, ev)

    def evidence_key(bi: int, fid: str) -> str:
        ev = binding.get((bi, fid)) or (None if is_local_label(fid) else by_fid.get(fid))
        if ev is None and outside is not None and not is_local_label(fid):
            ev = outside.definition(fid)
            if ev is not None and id(ev) not in resolved:
                resolved[id(ev)] = [resolve(path, s.target) or s.target for s in ev.sources]
        if ev is None:
            return fid
        return f"{ev.when}|{'|'.join(resolved[id(ev)])}"

    # 3-4: ids.
    taken = set(taken_ids) if taken_ids is not None else set()  # besides the committed
    for _, block in blocks:
        kept = [i for i in block.ids if i in committed]
        block.aliases, block.id = kept[:-1], (kept[-1] if kept else "")
        taken.update(kept)
    for bi, (_, block) in enumerate(blocks):
        if not block.id and block.citations and not block.legacy:
            stable = CITATION_RE.sub(lambda m: "[^" + evidence_key(bi, m.group(1)) + "]",
                                      block.text)
            k = 0
            while True:
                bid = _sha(f"block|{path}|{collapse(stable)}|{k}")[:8]
                if bid not in taken and bid not in committed:
                    break
                k += 1
            taken.add(bid)
            if taken_ids is not None:
                taken_ids.add(bid)
            block.id = bid

        def relabel(m: re.Match[str], bi: int = bi) -> str:
            ev = binding.get((bi, m.group(1)))
            if ev is not None and id(ev) in new_fid:
                return f"[^{new_fid[id(ev)]}]"
            return m.group(0)

        block.text = CITATION_RE.sub(relabel, block.text)

    # 5: canonical definitions.
    for _, ev in defs:
        if id(ev) in new_fid:
            ev.fid = new_fid[id(ev)]
        for source in ev.sources:
            source_id = resolve(path, source.target)
            if source_id is not None:
                link = link_for(path, source_id)
                if link:
                    source.target = link

    # 6: prune definitions nobody cites (sections: prune_sections).
    cited = {m.group(1) for _, b in blocks for m in CITATION_RE.finditer(b.text)}
    kept_items: list[Item] = []
    for item in items:
        if isinstance(item, Evidence) and item.fid not in cited \
                and FOOTNOTE_ID_RE.fullmatch(item.fid) \
                and not (outside is not None and outside.cites(item.fid)):
            continue  # evidence of a deleted paragraph, or a label nothing claimed
        if isinstance(item, Block) and not render_block(item):
            continue  # nothing left of it (a bare invented "^id")
        kept_items.append(item)
    return kept_items


def prune_sections(items: list[Item]) -> list[Item]:
    """Drop every heading whose section (up to the next heading of the same or a higher
    level) holds no block, together with that section's contents except definitions."""
    out: list[Item] = []
    i = 0
    while i < len(items):
        item = items[i]
        if isinstance(item, Heading):
            j = i + 1
            while j < len(items) and not (isinstance(items[j], Heading)
                                          and items[j].level <= item.level):  # type: ignore[union-attr]
                j += 1
            if not any(isinstance(x, Block) for x in items[i + 1:j]):
                # keep definitions: a block elsewhere in the file may cite them
                out.extend(x for x in items[i + 1:j] if isinstance(x, Evidence))
                i = j
                continue
        out.append(item)
        i += 1
    return out
