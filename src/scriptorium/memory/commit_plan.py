"""What one commit installs, computed and validated before anything moves.

A :class:`CommitPlan` reads only the topic files the writer changed (and files whose block
links must follow a moved block); what it needs of the rest of memory (ids, citations, block
links) comes from the topic catalog. It normalises the changed files (only the paragraphs
a write changed when it can: scriptorium.memory.normalize_edit), checks them strictly and
against the tree, checks their evidence, then installs them (scriptorium.memory.install) and
makes the one git commit. scriptorium.memory.transaction says in what order, and why.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from ..errors import ReasonCode, ScriptoriumError
from ..faults import fault_point
from .fingerprints import sha256
from .foreign import BATCH_PURPOSES, BlockCites, taken_citations
from .stage import StageError
from .tx_result import TransactionResult
from .install import done_install, install_files
from .normalize import normalize_topic
from .normalize_edit import normalize_edit
from .topics import (
    TopicDoc, TopicFormatError, parse_topic, parse_topic_bytes, repoint_block_links,
)
from .tx_errors import TransactionError
from .walk import read_rel

if TYPE_CHECKING:  # pragma: no cover
    from .catalog import TopicCatalog
    from .directory import WorkspaceDir
    from .moved import BeginState
    from .stage import Stage


class Staged(Protocol):
    """What a plan needs of its transaction (scriptorium.memory.transaction, which builds
    plans: named by what it provides, not imported)."""

    workspace: "WorkspaceDir"
    catalog: "TopicCatalog"
    allowed_sources: frozenset[str]
    purpose: str
    own_blocks: frozenset[str]
    base: "BeginState"
    dir: Path
    id: str
    _stage: "Stage"

__all__ = ["CommitPlan", "DELETING_PURPOSES", "read_or_none"]

# Purposes whose writer may delete blocks (a hand edit may not).
DELETING_PURPOSES = frozenset({"write", "reorganize", "backfill"})


class _Where(dict):
    """The ``where`` mapping ``repoint_block_links`` reads, answered by a function."""

    def __init__(self, fn: Callable[[str], str | None]):
        super().__init__()
        self.fn = fn

    def get(self, key, default=None):  # type: ignore[override]
        found = self.fn(key)
        return default if found is None else found


def read_or_none(root: Path, rel: str) -> bytes | None:
    """The bytes of ``root/rel`` (by a string path: :func:`~.walk.read_rel`), None if it
    cannot be read."""
    try:
        return read_rel(root, rel)
    except OSError:
        return None


class CommitPlan:
    """What one commit will install, computed and validated before anything moves. It reads
    only the files the writer changed (and files whose block links must follow a moved
    block); everything else it needs about the committed tree comes from the catalog."""

    def __init__(self, tx: Staged):
        self.tx = tx
        self.ws = tx.workspace
        self.catalog = tx.catalog
        self.writes: dict[str, bytes | None] = {}   # "topics/…" -> new bytes, None = delete
        self.docs: dict[str, TopicDoc | None] = {}  # parsed writes, for the catalog
        self.after: dict[str, bytes | None] = {}    # what the stage must hold afterwards
        self.created: list[str] = []
        self.removed: list[str] = []
        self._committed: dict[str, bytes | None] = {}
        self.resolve = self._make_resolver()

    def committed(self, rel: str) -> bytes | None:
        if rel not in self._committed:
            self._committed[rel] = read_or_none(self.ws.root, rel) \
                if self.catalog.summary(rel) is not None else None
        return self._committed[rel]

    # -- resolution ---------------------------------------------------------------------------------

    def _make_resolver(self) -> Callable[[str, str], str | None]:
        """Resolve a footnote target; a relative link made stale by moving a paragraph to
        another file is recovered from the committed file that held it. The archive cannot
        change under the lock, so each target is resolved once per plan (``self.plain`` keeps
        the archive's own answers, which the catalog learns the installed files with). A
        target the committed file already cites is answered from the catalog while its
        archive file is the one it was resolved in (see ``TopicCatalog.resolutions``):
        re-reading the archive file of every footnote of a long topic made a write cost as
        much as the topic's history."""
        # The closures hold what they use, never ``self``: a plan that referred to itself
        # through them would be a reference cycle, freed (with every topic it parsed) only by
        # an occasional full garbage collection, so a long ``write --all`` would hold many.
        arch, catalog = self.ws.sources, self.catalog
        plain: dict[tuple[str, str], str | None] = {}
        known: dict[str, dict[str, str]] = {}  # topic path -> its committed resolutions
        committed_paths = catalog.paths_citing

        folders: dict[str, str] = {}

        def resolve_plain(path: str, target: str) -> str | None:
            folder = folders.get(path)
            if folder is None:
                folder = folders[path] = posixpath.dirname(path)
            key = (folder, target)
            if key not in plain:
                if path not in known:
                    known[path] = catalog.resolutions(path)
                ref = known[path].get(target)
                plain[key] = ref if ref is not None else arch.resolve_target(path, target)
            return plain[key]

        def resolve(path: str, target: str) -> str | None:
            found = resolve_plain(path, target)
            if found is None:
                for old_path in committed_paths(target):
                    found = resolve_plain(old_path, target)
                    if found is not None:
                        break
            return found

        def resolve_known(path: str, target: str) -> str | None:
            """``resolve_plain``, answering a committed footnote at once."""
            found = known[path].get(target) if path in known else None
            return found if found is not None else resolve_plain(path, target)

        self.plain = resolve_known
        self.known = known
        return resolve

    # -- build + validate -----------------------------------------------------------------------

    def build(self, only: Iterable[str] | None = None) -> None:
        tx, ws, catalog = self.tx, self.ws, self.catalog
        try:
            changes = tx._stage.changes(only)
        except StageError as exc:
            raise TransactionError(str(exc), code=ReasonCode.READ_ONLY_PATH) from None
        committed_ids = catalog.has_id()
        resolve = self.resolve
        arch = ws.sources
        links: dict[tuple[str, str], str | None] = {}

        def link_for(path: str, source_id: str) -> str | None:
            key = (posixpath.dirname(path), source_id)
            if key not in links:
                links[key] = arch.canonical_link(path, source_id)
            return links[key]

        final: dict[str, bytes | None] = {}
        touched: set[str] = set()
        taken: set[str] = set()
        for rel, new in changes.items():
            if new == self.committed(rel):
                continue
            if not rel.endswith(".md"):
                raise TransactionError(f"{rel}: topics/ holds only .md topic files",
                                       code=ReasonCode.READ_ONLY_PATH)
            touched.add(rel)
            if new is None:
                final[rel] = None
                continue
            try:
                text = new.decode("utf-8")
            except UnicodeDecodeError:
                raise TransactionError(f"{rel}: not valid UTF-8",
                                       code=ReasonCode.INVALID_TOPIC_FORMAT) from None
            out = self._normalize_edit(rel, text, committed_ids, link_for, taken)
            if out is None:
                out = normalize_topic(text, rel, committed_ids=committed_ids, resolve=resolve,
                                      link_for=link_for, taken_ids=taken)
            final[rel] = out.encode("utf-8") if out else None

        docs: dict[str, TopicDoc] = {}
        try:
            for rel, data in sorted(final.items()):
                if data is not None:
                    docs[rel] = parse_topic_bytes(data, rel, strict=True)
            catalog.before_validate(docs)
            where = {i: d.path for d in docs.values() for b in d.blocks for i in b.ids}

            def where_now(block_id: str) -> str | None:
                if block_id in where:
                    return where[block_id]
                held = [p for p in catalog.paths_of(block_id) if p not in touched]
                return held[0] if held else None

            # block links follow paragraphs that moved to another file
            linking = {rel for rel, path, bid, _ in catalog.links() if rel not in touched
                       and where_now(bid) not in (None, path)}
            linking |= {rel for rel, doc in docs.items() for b in doc.blocks
                        for path, bid in b.links if where_now(bid) not in (None, path)}
            for rel in sorted(linking):
                data = final.get(rel) if rel in touched else self.committed(rel)
                if data is None:
                    continue
                text = repoint_block_links(data.decode("utf-8", errors="replace"), rel,
                                           _Where(where_now))
                final[rel] = text.encode("utf-8")
                touched.add(rel)
                docs[rel] = parse_topic(text, rel)
                for b in docs[rel].blocks:
                    for i in b.ids:
                        where[i] = rel
            self._validate(docs, touched, where_now)
        except TopicFormatError as exc:
            raise TransactionError(str(exc), code=ReasonCode.INVALID_TOPIC_FORMAT) from None

        # what the touched files held, paragraph by paragraph (for the foreign-citation rule)
        before = [BlockCites(tuple(b.ids), frozenset(b.refs)) for rel in sorted(touched)
                  for b in (catalog.summary(rel).blocks if catalog.summary(rel) else ())]
        after: dict[str, frozenset[str]] = {}
        for rel in sorted(touched):
            doc = docs.get(rel)
            if doc is None:
                continue
            for block in doc.blocks:
                refs = self._refs(doc, block, resolve, strict=True)
                after.update((block_id, frozenset(refs)) for block_id in block.ids)
                prior: set[str] = set()
                for block_id in block.ids:
                    prior |= catalog.refs_of(block_id)
                for ref in refs:
                    if ref in prior:
                        continue
                    frame = arch.lookup(ref)
                    where_ = f"{rel}:{block.line}"
                    if frame is None or not frame.trusted:
                        raise TransactionError(f"{where_}: source {ref} is not trusted evidence "
                                               "(pending sources may not be cited)",
                                               code=ReasonCode.NOT_EVIDENCE)
                    if ref not in tx.allowed_sources:
                        raise TransactionError(f"{where_}: source reference {ref} is not "
                                               "evidence of this transaction", code=ReasonCode.NOT_EVIDENCE)

        if tx.purpose in BATCH_PURPOSES:
            foreign = taken_citations(before, after, batch=tx.allowed_sources,
                                      own_blocks=tx.own_blocks)
            if foreign:
                raise TransactionError(
                    f"{'; '.join(foreign)}: a write may only remove or change paragraphs that "
                    "cite its own batch; keep the others with their ^id and citations",
                    code=ReasonCode.FOREIGN_CITATION_REMOVED)

        new_ids = {i for d in docs.values() for b in d.blocks for i in b.ids}

        def survives(block_id: str) -> bool:
            return block_id in new_ids or any(p not in touched
                                              for p in catalog.paths_of(block_id))

        self.created = sorted({b.id for d in docs.values() for b in d.blocks
                               if b.id and not any(i in committed_ids for i in b.ids)})
        removed: set[str] = set()
        for rel in touched:
            summary = catalog.summary(rel)
            for block in summary.blocks if summary is not None else ():
                if block.id and not any(survives(i) for i in block.ids):
                    removed.add(block.id)
        self.removed = sorted(removed)
        if self.removed and tx.purpose not in DELETING_PURPOSES:
            raise TransactionError(f"a {tx.purpose} transaction may not delete blocks "
                                   f"({', '.join('^' + i for i in self.removed)})")
        for rel in sorted(touched):
            new = final.get(rel)
            if new != self.committed(rel):
                self.writes[rel] = new
                self.docs[rel] = docs.get(rel)
        for rel in {*changes, *touched}:
            self.after[rel] = self.writes[rel] if rel in self.writes else self.committed(rel)

    def _normalize_edit(self, rel: str, text: str, committed_ids, link_for,
                        taken: set[str]) -> str | None:
        """The normalised file from only the paragraphs the writer changed, when the committed
        file is one normalisation wrote (None: normalise it whole)."""
        normal = getattr(self.catalog, "normal_sha", None)
        sha = normal(rel) if normal is not None else None
        old = self.committed(rel) if sha is not None else None
        if old is None or sha256(old) != sha:
            return None
        try:
            committed = old.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return normalize_edit(committed, text, rel, committed_ids=committed_ids,
                              resolve=self.resolve, link_for=link_for, taken_ids=taken)

    def _refs(self, doc: TopicDoc, block, resolve, *, strict: bool) -> list[str]:
        out: list[str] = []
        # what ``resolve`` answers first for the committed file's footnotes, asked at once
        known = self.known.get(doc.path, {})
        for fid in dict.fromkeys(block.citations):
            ev = doc.evidence.get(fid)
            if ev is None:
                continue
            for link in ev.sources:
                ref = known.get(link.target) or resolve(doc.path, link.target)
                if ref is None:
                    if strict:
                        raise TransactionError(
                            f"{doc.path}:{ev.line}: source [{link.label}]({link.target}) of "
                            f"[^{fid}] is not in the archive", code=ReasonCode.MISSING_SOURCE)
                    continue
                if ref not in out:
                    out.append(ref)
        return out

    def _validate(self, docs: dict[str, TopicDoc], touched: set[str],
                  where_now: Callable[[str], str | None]) -> None:
        """``validate_tree`` over the tree after this commit, reading only what changed:
        block ids unique across files, every block link names an existing id."""
        catalog = self.catalog
        seen: dict[str, tuple[str, int]] = {}
        for rel in sorted(docs):
            for block in docs[rel].blocks:
                for block_id in block.ids:
                    other = [p for p in catalog.paths_of(block_id) if p not in touched]
                    if other:
                        raise TopicFormatError(rel, block.line, f"duplicate block id "
                                               f"^{block_id} (also {other[0]})")
                    if block_id in seen and seen[block_id][0] != rel:
                        raise TopicFormatError(rel, block.line, f"duplicate block id ^{block_id} "
                                               f"(also {seen[block_id][0]}:{seen[block_id][1]})")
                    seen.setdefault(block_id, (rel, block.line))
                for _, block_id in block.links:
                    if where_now(block_id) is None:
                        raise TopicFormatError(rel, block.line, f"dangling block link "
                                               f"^{block_id} (no block has this id)")
        for block_id in catalog.duplicates():
            held = [p for p in catalog.paths_of(block_id) if p not in touched]
            if len(held) > 1:
                raise TopicFormatError(held[1], 0, f"duplicate block id ^{block_id} (also "
                                       f"{held[0]})")
        for rel, _, block_id, line in catalog.links():
            if rel not in touched and where_now(block_id) is None:
                raise TopicFormatError(rel, line, f"dangling block link ^{block_id} (no block "
                                       "has this id)")

    # -- install -------------------------------------------------------------------------------------

    def install(self, message: str) -> TransactionResult:
        ws, tx = self.ws, self.tx
        writes: dict[str, bytes | None] = dict(self.writes)
        if self.created:
            writes[f"{ws.runtime_name}/runtime.json"] = ws.runtime_with_created(self.created)
        # each installed topic hashed once, for the catalog and the search index alike
        shas = {rel: sha256(data) for rel, doc in self.docs.items()
                if doc is not None and (data := self.writes.get(rel)) is not None}
        installing = getattr(self.catalog, "installing", None)
        if installing is not None:  # a database home stores the summaries with the install
            installing(self.docs, self.writes, shas, self.plain)
        published = ws.publish(writes, message, self.created, self.removed, tx.base)
        try:
            install_files(ws, tx.dir, tx.id, writes)
        except Exception:
            if published is None:
                raise
            ws.refresh(full=True)  # the database holds the install: the mirror follows it
        self.catalog.installed(self.docs, self.writes, shas, self.plain)
        result = TransactionResult(
            changed_files=sorted(p for p in self.writes), created_blocks=self.created,
            removed_blocks=self.removed, workspace=ws,
            parsed={rel: (sha, self.docs[rel], self.writes[rel]) for rel, sha in shas.items()})
        # topic files the catalog saw change since this process's last commit (a hand edit
        # its refresh found) join the history by name with this install
        seq, last = self.catalog.seq, self.catalog.history_seq
        moved = self.catalog.changed_since(last) if last is not None else None
        try:
            result.commit = ws.commit_history(message, sorted({*self.writes, *(moved or ())}))
            self.catalog.history_seq = seq
        except ScriptoriumError as exc:
            result.warnings.append(
                f"memory history not committed ({exc.code}; the install stands): {exc}")
        fault_point("git-committed")
        done_install(ws)
        return result
