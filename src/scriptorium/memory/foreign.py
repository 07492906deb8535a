"""What a batch's write may not take from the rest of memory.

A writer (a model above all) edits a staged copy of every topic, so it can delete or rewrite
paragraphs that cite other conversations. Those turns are marked: no later write offers them
again, so a paragraph lost here is a turn lost silently. A write may therefore only remove a
paragraph, or drop a citation from one, when what it cites is the batch being written (or the
paragraph was created earlier in the same run); everything else it must keep, under one of its
ids (merging into another paragraph keeps the old id as an alias). The transaction applies the
rule (FOREIGN_CITATION_REMOVED) for the purposes that carry a batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

# Purposes whose transaction carries a batch of evidence and so falls under this rule.
BATCH_PURPOSES = frozenset({"write", "backfill"})


@dataclass(frozen=True)
class BlockCites:
    """A paragraph's ids (aliases and id) and the source ids it cites."""

    ids: tuple[str, ...]
    sources: frozenset[str]


def taken_citations(before: Iterable[BlockCites], after: Mapping[str, frozenset[str]], *,
                    batch: frozenset[str], own_blocks: frozenset[str] = frozenset()) -> list[str]:
    """What the write takes from other turns, one line per paragraph (empty: nothing).

    ``before``: the committed paragraphs of the files the write touched; ``after``: block id
    (and alias) -> sources of the paragraph holding it once installed. A paragraph citing
    only the batch, or one ``own_blocks`` names, may go; any other must survive under one of
    its ids and keep every citation outside the batch.
    """
    problems: list[str] = []
    for block in before:
        if not block.ids or own_blocks.intersection(block.ids):
            continue
        foreign = sorted(block.sources - batch)
        holder = next((after[i] for i in reversed(block.ids) if i in after), None)
        name = "^" + block.ids[-1]
        if holder is None:
            if foreign or not block.sources:
                why = (f"which cites {', '.join(foreign[:3])}" if foreign
                       else "which cites no turn of this batch")
                problems.append(f"the edit removes {name}, {why} (not this batch)")
        else:
            dropped = [ref for ref in foreign if ref not in holder]
            if dropped:
                problems.append(f"the edit drops the citation of {', '.join(dropped[:3])} "
                                f"(not this batch) from {name}")
    return problems
