"""Which found claims a later claim replaces, for one reader: derived when memory is read.

A write may not edit another batch's paragraphs, so when a later batch changes a value the
committed older claim stays as written; the newer claim says ``(replaces <old value>)``. Here
a value claim counts as superseded when a claim after it in the same topic, on the same value
line, replaces its value (:mod:`scriptorium.memory.claims`), or when the writer marked it so
in words (``(superseded: now …)``, done within one batch). For a branch-aware reader the
replacing claim must not be an alternative: a change said on another branch of the reader's
conversation does not supersede what holds on the reader's line. Superseded claims keep
``SUPERSEDED_WEIGHT`` of their score, so the value that holds ranks first and the history
stays findable.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from ..claims import REPLACES_MARK, SUPERSEDED_MARK, ValueClaim, superseded_by, value_claim
from ..provenance import ALTERNATIVE, BranchReader

SUPERSEDED_WEIGHT = 0.2  # share of its score a superseded claim keeps

Row = dict[str, Any]
Ranked = list[tuple[Row, float]]


def demote(score: float) -> float:
    """A superseded claim's score: a share of a positive relevance; a similarity at or below
    zero (embedding) moves down by the same margin."""
    return score * SUPERSEDED_WEIGHT if score > 0 else score - (1.0 - SUPERSEDED_WEIGHT)


def rank_holding_first(index: Any, ranked: Ranked, reader: BranchReader | None) -> Ranked:
    """``ranked`` (best first) with every claim superseded for ``reader`` demoted and the
    list re-sorted (stable, so equal scores keep their order)."""
    candidates = {row["id"]: value_claim(row["text"]) for row, _ in ranked
                  if row["kind"] == "claim"}
    candidates = {doc: claim for doc, claim in candidates.items() if claim is not None}
    if not candidates:
        return ranked
    replacers = _replacers(index, list(candidates))
    out = []
    for row, score in ranked:
        claim = candidates.get(row["id"])
        if claim is not None and _superseded(row, claim, replacers.get(row["path"], []),
                                             reader):
            score = demote(score)
        out.append((row, score))
    return sorted(out, key=lambda item: -item[1])


def _replacers(index: Any, doc_ids: Sequence[int]) -> dict[str, list[tuple[Row, ValueClaim]]]:
    """topic path -> the claims of that topic that say what they replace, in file order."""
    out: dict[str, list[tuple[Row, ValueClaim]]] = {}
    for start in range(0, len(doc_ids), 500):
        chunk = doc_ids[start:start + 500]
        rows = index.replacer_rows(REPLACES_MARK, chunk) if hasattr(index, "replacer_rows") \
            else index.rows(
            "SELECT d.id, d.path, d.line, d.claim, d.text, d.sources FROM docs d WHERE "
            "d.kind = 'claim' AND instr(d.text, ?) > 0 AND d.path IN (SELECT path FROM docs "
            f"WHERE id IN ({','.join('?' * len(chunk))})) ORDER BY d.path, d.line, d.claim",
            [REPLACES_MARK, *chunk])
        for row in rows:
            claim = value_claim(row["text"])
            if claim is not None and claim.replaces and \
                    not any(r["id"] == row["id"] for r, _ in out.get(row["path"], [])):
                out.setdefault(row["path"], []).append((row, claim))
    return out


def _superseded(row: Row, claim: ValueClaim,
                replacers: list[tuple[Row, ValueClaim]], reader: BranchReader | None) -> bool:
    later = [(r, c) for r, c in replacers if (r["line"], r["claim"]) > (row["line"], row["claim"])]
    while later:
        found = superseded_by(claim, [c for _, c in later])
        if found is None:
            break
        other = later[found][0]
        if reader is None or reader.branch_of(json.loads(other["sources"])) != ALTERNATIVE:
            return True
        later = later[found + 1:]  # said on another branch: look for one on the reader's line
    return SUPERSEDED_MARK in row["text"] and not _marked_on_another_branch(
        claim, replacers, reader)


def _marked_on_another_branch(claim: ValueClaim, replacers: list[tuple[Row, ValueClaim]],
                              reader: BranchReader | None) -> bool:
    """A claim the writer marked superseded whose every replacement is, for this reader, an
    alternative (the correction was said on a branch the reader is not on)."""
    if reader is None:
        return False
    found = [r for r, c in replacers if superseded_by(claim, [c]) is not None]
    return bool(found) and all(reader.branch_of(json.loads(r["sources"])) == ALTERNATIVE
                               for r in found)
