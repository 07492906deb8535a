"""One topic file's summary for the catalog (scriptorium.memory.catalog): its blocks' ids,
lines, block links, footnote targets and the source ids they resolve to (no text), and the
keys that tell the catalog when an archive file a target was resolved in has been replaced."""

from __future__ import annotations

import os
import posixpath
import re
import stat
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .catalog_db import BlockSummary, TopicSummary
from .fingerprints import Fingerprint
from .topics import TopicDoc

if TYPE_CHECKING:  # pragma: no cover
    from .sources import SourceArchive

__all__ = ["slug", "title_of", "name_keys", "Resolve", "summarize", "block_summary",
           "archive_rel", "archive_key", "key_of"]


def slug(text: str) -> str:
    """A subject as a file-name stem: lower case, runs of non-word characters as ``-``."""
    out = re.sub(r"[^\w]+", "-", text.lower(), flags=re.UNICODE).strip("-_")
    return out[:60].strip("-_")


def title_of(data: bytes) -> str:
    """The topic's title: its first line when that is a ``# `` heading, else ""."""
    first = data.split(b"\n", 1)[0]
    return first[2:].decode("utf-8", errors="replace").strip() if first.startswith(b"# ") \
        else ""


def _targets(doc: TopicDoc, block) -> tuple[str, ...]:
    out: list[str] = []
    for fid in dict.fromkeys(block.citations):
        evidence = doc.evidence.get(fid)
        if evidence is not None:
            out.extend(link.target for link in evidence.sources)
    return tuple(out)


def name_keys(summary: TopicSummary) -> list[str]:
    keys = [f"stem:{posixpath.basename(summary.path)[:-3]}"]
    if slug(summary.title):
        keys.append(f"title:{slug(summary.title)}")
    return keys


Resolve = Callable[[str, str], "str | None"]  # (topic path, footnote target) -> source id


def archive_rel(topic_path: str, target: str) -> str | None:
    """The archive file a footnote target links, workspace-relative (None: not a link)."""
    link, sep, _ = target.partition("#")
    if not sep or not link.endswith(".md"):
        return None
    return _linked(posixpath.dirname(topic_path), link)


@lru_cache(maxsize=64)  # a topic's hundreds of footnotes link a few dozen archive files
def _linked(folder: str, link: str) -> str | None:
    rel = posixpath.normpath(posixpath.join(folder, link))
    return rel if rel.startswith("sources/") and ".." not in rel.split("/") else None


def key_of(keys: dict[str, str | None], topic_path: str) -> Callable[[str], str | None]:
    """Footnote target of ``topic_path`` -> the key of the archive file it links."""
    links: dict[tuple[str, str], str | None] = {}  # a target's link part -> the archive file

    def key(target: str) -> str | None:
        part = target.partition("#")[:2]
        if part not in links:
            links[part] = archive_rel(topic_path, target)
        link = links[part]
        return keys.get(link) if link is not None else None
    return key


def archive_key(root: Path, rel: str) -> str | None:
    """(mtime, size, inode) of a regular archive file, as text; None when it is not one."""
    try:
        st = os.lstat(os.path.join(root, rel))
    except (OSError, ValueError):
        return None
    return f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}" if stat.S_ISREG(st.st_mode) else None


def block_summary(block_id: str, ids: tuple[str, ...], line: int,
                  links: tuple[tuple[str, str], ...], targets: tuple[str, ...],
                  resolve: Resolve, path: str) -> BlockSummary:
    """A block's summary, its footnote targets resolved (each once per block)."""
    at = tuple(resolve(path, target) for target in targets)
    refs = tuple(dict.fromkeys(ref for ref in at if ref is not None))
    return BlockSummary(block_id, ids, line, links, targets, refs, None in at, at)


def summarize(doc: TopicDoc, sources: "SourceArchive", *, sha: str = "",
              fp: Fingerprint = (0, 0, 0, 0), checked_ns: int = 0,
              resolve: Resolve | None = None, title: str = "") -> TopicSummary:
    """The summary of one parsed topic file (its citations resolved through ``sources``, or
    ``resolve`` when given: a transaction passes the resolutions it already made)."""
    resolve = resolve or sources.resolve_target
    blocks = tuple(block_summary(block.id, tuple(block.ids), block.line, tuple(block.links),
                                 _targets(doc, block), resolve, doc.path)
                   for block in doc.blocks)
    return TopicSummary(doc.path, sha, fp, checked_ns, blocks, title)
