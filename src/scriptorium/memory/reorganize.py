"""Reorganize memory: merge paragraphs that say the same thing, and never silently lose one.

Duplicates accumulate for ordinary reasons: a non-idempotent writer redoing a batch after a
crash writes the same turn twice; two branches of a conversation restate the same fact. The
``embedded`` organizer finds near-duplicate blocks deterministically (normalised word sets,
then an order-aware ratio; numbers and negations must agree) and merges each group into its
first block: the merged ids become aliases of the kept one (`` ^old ^kept``, memory reference
§2.4), every citation moves with its claim, equivalent footnotes collapse into one. The
``llm`` organizer lets a model edit the staged topics with the writer's file tools.

Whatever edits the stage, the result goes through the same transaction as a write (purpose
``reorganize``: no new evidence may be cited) and is refused when more than a quarter of the
block ids that existed before no longer resolve (an id kept as an alias counts as kept):
consolidation that deletes is the failure users of other memory systems complain about most.

Reorganize never merges across lines: two paragraphs whose cited turns lie on mutually
exclusive branches of one session (an edit, a retry: no reader stands on both) are never
merged, even when they read alike — they are alternatives, and differing values stay side by
side. The embedded organizer skips such pairs; any organizer's result that merged them is
refused (:class:`~scriptorium.memory.provenance.LineOracle` decides, from the session DAGs).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..config import Settings
from ..errors import InvalidInput, ReasonCode, WriteFailed
from .duplicates import (JACCARD_MIN, RATIO_MIN, Exclusive, _Entry, _guards, find_duplicates,
                         same_thing, tokens)
from .provenance import LineOracle
from .normalize import prune_sections
from .topics import (Block, Evidence, SourceLink, TopicDoc, TopicFormatError,
                     parse_topic, render_topic, repoint_block_links)

if TYPE_CHECKING:  # pragma: no cover
    from .workspace import Workspace

LOCK_TIMEOUT = 5.0
MAX_DROP_SHARE = 0.25
COMMIT_MESSAGE = "memory: reorganize topics"


__all__ = ["ReorganizeRefused", "ReorganizeReport", "Organized", "reorganize", "same_thing",
           "merge_duplicates", "find_duplicates"]


class ReorganizeRefused(WriteFailed):
    """The reorganized topics would lose too many blocks; nothing was installed."""

    code = ReasonCode.REORGANIZE_REFUSED


@dataclass
class ReorganizeReport:
    """What a reorganize did. ``status``: ``ok`` (installed), ``unchanged`` (nothing to do),
    ``empty`` (no topics). ``merged``: one entry per group folded into a kept block."""

    status: str
    changed_files: list[str] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)
    before_blocks: int = 0
    after_blocks: int = 0
    writer: str = "embedded"
    revision: str | None = None
    dropped: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "changed_files": list(self.changed_files),
                "merged": [dict(m) for m in self.merged], "before_blocks": self.before_blocks,
                "after_blocks": self.after_blocks, "writer": self.writer,
                "revision": self.revision, "dropped": list(self.dropped),
                "skipped": list(self.skipped), "summary": self.summary}


# -- editing staged topic files ----------------------------------------------------------------


def _block_text(block: Block) -> str:
    return " ".join(c.text for c in block.claims if c.text)


def _rebase(target: str, from_path: str, to_path: str) -> str:
    """A relative link target written in ``from_path``, rewritten for ``to_path``."""
    link, sep, frag = target.partition("#")
    if not link or "://" in link or link.startswith("/") or not link.endswith(".md"):
        return target
    absolute = posixpath.normpath(posixpath.join(posixpath.dirname(from_path), link))
    rel = posixpath.relpath(absolute, posixpath.dirname(to_path) or ".")
    return rel + sep + frag


class _Stage:
    """The staged topic files, parsed, with the edits a merge needs."""

    def __init__(self, stage: Path, resolve: Callable[[str, str], str | None],
                 link_for: Callable[[str, str], str | None]):
        self.stage = Path(stage)
        self.resolve = resolve
        self.link_for = link_for
        self.docs: list[TopicDoc] = []
        self.skipped: list[str] = []
        self.dirty: set[int] = set()
        for rel in topic_files(self.stage):
            try:
                text = (self.stage / rel).read_text(encoding="utf-8")
                self.docs.append(parse_topic(text, rel, strict=True))
            except (TopicFormatError, UnicodeDecodeError, OSError):
                self.skipped.append(rel)  # never rewrite what we cannot read exactly

    def evidence_key(self, doc: TopicDoc, fid: str) -> tuple[str, tuple[str, ...]] | None:
        ev = doc.evidence.get(fid)
        if ev is None:
            return None
        targets = []
        for link in ev.sources:
            sid = self.resolve(doc.path, link.target)
            targets.append(sid if sid is not None else
                           "link:" + _rebase(link.target, doc.path, "topics/_.md"))
        return ev.when, tuple(sorted(set(targets)))

    def adopt(self, doc: TopicDoc, fid: str, src: TopicDoc, after: Block) -> str:
        """The footnote id in ``doc`` meaning what ``fid`` means in ``src``: an equivalent
        existing definition, else a copy (links re-pointed from ``doc``'s directory)."""
        key = self.evidence_key(src, fid)
        for own in doc.evidence:
            if self.evidence_key(doc, own) == key:
                return own
        ev = src.evidence[fid]
        sources = []
        for link in ev.sources:
            sid = self.resolve(src.path, link.target)
            target = (self.link_for(doc.path, sid) if sid is not None else None) \
                or _rebase(link.target, src.path, doc.path)
            sources.append(SourceLink(link.label, target))
        new_fid = fid
        k = 0
        while new_fid in doc.evidence:
            new_fid = "e-" + hashlib.sha256(
                f"evidence|{ev.when}|{'|'.join(s.target for s in sources)}|{k}"
                .encode()).hexdigest()[:10]
            k += 1
        copy = Evidence(new_fid, ev.when, sources)
        doc.evidence[new_fid] = copy
        doc.items.insert(self._definition_slot(doc, after), copy)
        return new_fid

    @staticmethod
    def _definition_slot(doc: TopicDoc, block: Block) -> int:
        """Where a new definition for ``block`` goes: after the run of definitions that
        follows it (or right after it)."""
        pos = next(i for i, item in enumerate(doc.items) if item is block) + 1
        while pos < len(doc.items) and isinstance(doc.items[pos], Evidence):
            pos += 1
        return pos

    def merge(self, kept_doc: TopicDoc, kept: Block, doc: TopicDoc, block: Block) -> None:
        """Fold ``block`` (of ``doc``) into ``kept``: ids become aliases, each claim's
        citations join the most similar kept claim, the block leaves its file."""
        for claim in block.claims:
            if not claim.citations:
                continue
            target = max(kept.claims, key=lambda c: difflib.SequenceMatcher(
                None, tokens(c.text), tokens(claim.text), autojunk=False).ratio())
            for fid in claim.citations:
                own = self.adopt(kept_doc, fid, doc, kept)
                target.citations.append(own)
        # Equivalent footnotes cited side by side collapse into the first.
        for claim in kept.claims:
            seen: dict[Any, str] = {}
            out: list[str] = []
            for fid in claim.citations:
                key = self.evidence_key(kept_doc, fid) or fid
                if key not in seen:
                    seen[key] = fid
                    out.append(fid)
            claim.citations = out
        kept.aliases = list(dict.fromkeys(
            [*kept.aliases, *block.aliases, block.id])) if block.id else kept.aliases
        kept.text = " ".join(c.text + "".join(f"[^{f}]" for f in c.citations)
                             for c in kept.claims)
        doc.items = [item for item in doc.items if item is not block]
        doc.blocks = [b for b in doc.blocks if b is not block]
        self.dirty.add(id(kept_doc))
        self.dirty.add(id(doc))

    def write(self) -> list[str]:
        """Write back every edited file (unused definitions and empty sections pruned, a
        file left without blocks removed) and re-point block links to moved ids."""
        where = {i: doc.path for doc in self.docs for b in doc.blocks for i in b.ids}
        changed: list[str] = []
        for doc in self.docs:
            path = self.stage / doc.path
            if id(doc) in self.dirty:
                cited = {fid for b in doc.blocks for fid in b.citations}
                doc.items = prune_sections([
                    item for item in doc.items
                    if not (isinstance(item, Evidence) and item.fid not in cited)])
                if not doc.blocks:
                    path.unlink()
                    changed.append(doc.path)
                    continue
                text = render_topic(doc)
            else:
                text = path.read_text(encoding="utf-8")
            text2 = repoint_block_links(text, doc.path, where)
            if id(doc) in self.dirty or text2 != text:
                path.write_text(text2, encoding="utf-8")
                changed.append(doc.path)
        return changed


def topic_files(stage: Path) -> list[str]:
    """Workspace-relative paths of the ``topics/**.md`` files under ``stage`` (no symlinks)."""
    base = Path(stage) / "topics"
    out: list[str] = []
    if not base.is_dir() or base.is_symlink():
        return out
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames
                             if not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if name.endswith(".md") and not os.path.islink(full):
                out.append(Path(full).relative_to(stage).as_posix())
    return sorted(out)


def block_sources(doc: TopicDoc, block: Block,
                  resolve: Callable[[str, str], str | None]) -> tuple[str, ...]:
    """The source ids a staged block cites (unresolvable links left out)."""
    out: list[str] = []
    for fid in block.citations:
        evidence = doc.evidence.get(fid)
        for link in evidence.sources if evidence is not None else ():
            sid = resolve(doc.path, link.target)
            if sid is not None and sid not in out:
                out.append(sid)
    return tuple(out)


def merge_duplicates(stage: Path, resolve: Callable[[str, str], str | None],
                     link_for: Callable[[str, str], str | None], *,
                     jaccard_min: float = JACCARD_MIN, ratio_min: float = RATIO_MIN,
                     exclusive: Exclusive | None = None
                     ) -> tuple[list[dict[str, Any]], list[str]]:
    """The embedded organizer: merge near-duplicate blocks of the staged topics in place,
    never two whose cited turns ``exclusive`` says lie on mutually exclusive branches.
    Returns (merge groups, files it could not parse and left alone)."""
    staged = _Stage(stage, resolve, link_for)
    entries: list[_Entry] = []
    for d, doc in enumerate(staged.docs):
        for block in doc.blocks:
            if not block.id:  # legacy blocks have no id to keep as an alias
                continue
            text = _block_text(block)
            toks = tokens(text)
            entries.append(_Entry(d, block, text, toks, frozenset(toks), _guards(text),
                                  block_sources(doc, block, resolve)))
    groups = find_duplicates(entries, jaccard_min, ratio_min, exclusive)
    merged: list[dict[str, Any]] = []
    for k in sorted(groups):
        keep = entries[k]
        kept_doc = staged.docs[keep.doc_index]
        absorbed: list[str] = []
        paths = []
        for i in groups[k]:
            other = entries[i]
            doc = staged.docs[other.doc_index]
            absorbed.extend(other.block.ids)
            paths.append(doc.path)
            staged.merge(kept_doc, keep.block, doc, other.block)
        merged.append({"kept": keep.block.id, "aliases": absorbed, "path": kept_doc.path,
                       "from": sorted(set(paths)), "text": keep.text[:200]})
    if merged:
        staged.write()
    return merged, staged.skipped


# -- the census that guards against loss -------------------------------------------------------


@dataclass
class Census:
    """What the staged topics hold: paragraphs, identity ids, every id (aliases too) and
    each identity's aliases."""

    blocks: int
    identities: set[str]
    every: set[str]
    aliases: dict[str, set[str]]


def census(stage: Path) -> Census:
    """Count the staged topics, read leniently so a file an organizer broke still counts
    what it holds."""
    out = Census(0, set(), set(), {})
    for rel in topic_files(stage):
        try:
            text = (Path(stage) / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        doc = parse_topic(text, rel, strict=False)
        for block in doc.blocks:
            if not block.ids:
                continue
            out.blocks += 1
            if block.id:
                out.identities.add(block.id)
                out.aliases[block.id] = set(block.aliases)
            out.every.update(block.ids)
    return out


def check_loss(before_ids: set[str], after_ids: set[str],
               max_share: float = MAX_DROP_SHARE) -> list[str]:
    """Ids that no longer resolve; raises ReorganizeRefused when they are more than
    ``max_share`` of the blocks that existed before (aliases count as kept)."""
    dropped = sorted(before_ids - after_ids)
    if before_ids and len(dropped) > max_share * len(before_ids):
        raise ReorganizeRefused(
            f"reorganize refused: it would drop {len(dropped)} of {len(before_ids)} blocks "
            f"(more than {int(max_share * 100)}%), e.g. ^{dropped[0]}; nothing was changed")
    return dropped


# -- organizers --------------------------------------------------------------------------------

@dataclass
class Organized:
    """What an organizer reports about its edits of the stage."""

    merged: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""
    skipped: list[str] = field(default_factory=list)
    # False: the organizer cannot say what it merged (a model); it is read off the ids.
    merges_reported: bool = True


Organizer = Callable[[Path, Any], Organized]


def embedded_organizer(stage: Path, workspace: Any,
                       exclusive: Exclusive | None = None) -> Organized:
    """Deterministic near-duplicate merging (see the module docstring)."""
    sources = workspace.sources
    merged, skipped = merge_duplicates(stage, sources.resolve_target, sources.canonical_link,
                                       exclusive=exclusive)
    note = f"; left {len(skipped)} unreadable file(s) alone" if skipped else ""
    return Organized(merged, f"{len(merged)} group(s) of near-duplicate paragraphs merged"
                             f"{note}", skipped)


def llm_organizer(settings: Settings | None) -> Organizer:
    """A model edits the staged topics with the llm writer's file tools."""
    from .reorganize_llm import LLMOrganizer

    organizer = LLMOrganizer.from_settings(settings or Settings())

    def run(stage: Path, workspace: Any) -> Organized:
        return Organized([], organizer.organize(
            stage, log_dir=getattr(workspace, "runtime_dir", None)), merges_reported=False)

    return run


# -- the operation -----------------------------------------------------------------------------


def _merged_from_ids(before: Census, after: Census,
                     where: dict[str, str]) -> list[dict[str, Any]]:
    """For an organizer that does not report merges (a model): blocks whose alias list
    grew, with the ids they absorbed."""
    out = []
    for block_id in sorted(after.aliases, key=lambda i: (where.get(i, ""), i)):
        new = sorted(after.aliases[block_id] - before.aliases.get(block_id, set()))
        if new:
            out.append({"kept": block_id, "aliases": new, "path": where.get(block_id, "")})
    return out


def _locations(stage: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for rel in topic_files(stage):
        doc = parse_topic((stage / rel).read_text(encoding="utf-8", errors="replace"), rel,
                          strict=False)
        for block in doc.blocks:
            if block.id:
                out[block.id] = rel
    return out


def _crossed_lines(stage: Path, kept: set[str], oracle: LineOracle,
                   resolve: Callable[[str, str], str | None]) -> str | None:
    """The first merged block whose cited turns lie on mutually exclusive branches."""
    for rel in topic_files(stage):
        doc = parse_topic((stage / rel).read_text(encoding="utf-8", errors="replace"), rel,
                          strict=False)
        for block in doc.blocks:
            if block.id in kept:
                cited = block_sources(doc, block, resolve)
                if oracle.exclusive(cited, cited):
                    return block.id
    return None


def _session_store(workspace: Any) -> Any:
    """The home's session store beside the workspace (``home/memory`` -> ``home/sessions``),
    or None when there is none: then no line constrains a merge."""
    from ..sessions import SessionStore

    sessions = Path(workspace.root).parent / "sessions"
    return SessionStore(sessions) if sessions.is_dir() else None


def reorganize(workspace: "Workspace", writer_kind: str = "embedded", settings: Settings | None = None,
               *, organizer: Organizer | None = None, lock_timeout: float = LOCK_TIMEOUT,
               store: Any = None) -> ReorganizeReport:
    """Merge paragraphs that say the same thing, through one transaction.

    ``writer_kind``: ``embedded`` (deterministic, offline) or ``llm`` (the configured model).
    ``organizer`` replaces both: a callable ``(stage, workspace) -> Organized`` that edits
    ``stage/topics`` (tests use it to prove the loss guard). Raises ReorganizeRefused
    (nothing installed) when more than a quarter of the blocks would stop resolving, or when
    a merge joined paragraphs from mutually exclusive branches of a session (``store``: the
    session store, default the home's); a busy workspace is a retryable ConcurrentUpdate.
    """
    oracle = LineOracle(store if store is not None else _session_store(workspace))
    if organizer is None:
        if writer_kind == "embedded":
            def organizer(stage: Path, ws: Any) -> Organized:
                return embedded_organizer(stage, ws, exclusive=oracle.exclusive)
        elif writer_kind == "llm":
            organizer = llm_organizer(settings)
        else:
            raise InvalidInput(f"unknown reorganize writer {writer_kind!r} (embedded or llm)")
    report = ReorganizeReport(status="empty", writer=writer_kind)
    with workspace.lock(timeout=lock_timeout):
        with workspace.begin(allowed_sources=[], purpose="reorganize") as tx:
            stage = Path(tx.stage)
            before = census(stage)
            report.before_blocks = report.after_blocks = before.blocks
            if not before.blocks:
                report.summary = "no topic blocks to reorganize"
                return report
            done = organizer(stage, workspace)
            after = census(stage)
            report.after_blocks = after.blocks
            report.dropped = check_loss(before.identities, after.every)
            report.merged = done.merged if done.merges_reported else \
                _merged_from_ids(before, after, _locations(stage))
            crossed = _crossed_lines(stage, {m["kept"] for m in report.merged}, oracle,
                                     workspace.sources.resolve_target)
            if crossed is not None:
                raise ReorganizeRefused(
                    f"reorganize refused: paragraph ^{crossed} would merge claims said on "
                    "mutually exclusive branches of one conversation; nothing was changed")
            report.summary = done.summary
            report.skipped = list(done.skipped)
            result = tx.commit(COMMIT_MESSAGE)
    report.changed_files = sorted(result.changed_files)
    report.revision = getattr(result, "revision", None)
    report.status = "ok" if report.changed_files else "unchanged"
    if not report.changed_files:
        report.merged = []
    return report
