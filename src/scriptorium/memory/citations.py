"""What memory's topics cite: the bridge from a topic block back to the turns it came from.

Used by the write step (a redo after a crash is recognised when every turn of the batch is
already cited), by verify (marked but uncited turns) and by search (a hit's sources).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .topics import Block, TopicDoc
    from .workspace import Workspace


def block_sources(workspace: "Workspace", doc: "TopicDoc", block: "Block") -> list[str]:
    """The source ids ``block`` cites, in citation order, each once."""
    out: list[str] = []
    for fid in block.citations:
        evidence = doc.evidence.get(fid)
        if evidence is None:
            continue
        for link in evidence.sources:
            source_id = workspace.sources.resolve_target(doc.path, link.target)
            if source_id is not None and source_id not in out:
                out.append(source_id)
    return out


def citation_map(workspace: "Workspace") -> dict[str, list[tuple[str, str]]]:
    """source id -> [(topic path, block id), …] over every committed topic."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for doc in workspace.topic_docs():
        for block in doc.blocks:
            for source_id in block_sources(workspace, doc, block):
                out[source_id].append((doc.path, block.id))
    return dict(out)


def cited_sources(workspace: "Workspace") -> set[str]:
    """Every source id some committed topic block cites."""
    return set(citation_map(workspace))
