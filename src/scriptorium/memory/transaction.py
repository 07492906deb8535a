"""The whole-or-nothing topic transaction (memory reference §3.9).

``Workspace.begin()`` stages a copy of ``topics/`` in the runtime dir (reused between
transactions, so only files that changed are copied: see scriptorium.memory.stage); a writer
edits ``stage/topics/**.md`` and nothing else. What the committed tree holds (ids, citations,
block links) comes from the topic catalog (scriptorium.memory.catalog), so a commit reads and
parses only the files the writer changed. ``commit()`` then, under the workspace write lock:

1. checks that memory did not move since ``begin`` (⇒ CONCURRENT_UPDATE, the only retryable
   rejection; how, without stat'ing all of memory: scriptorium.memory.moved);
2. refuses anything written outside ``topics/`` (READ_ONLY_PATH: sources are append-only and
   written by the runtime only);
3. normalises the changed files (ids are given here, never by writers), parses them strictly
   and checks the tree (INVALID_TOPIC_FORMAT);
4. checks every footnote source resolves (MISSING_SOURCE) and that every source a block cites
   for the first time is a trusted source this transaction was given as evidence
   (NOT_EVIDENCE);
5. installs the changed files through a journal (``<runtime>/install.json``: prepared → move
   the old files to a backup → move the new ones in → committed → drop the backup), so a crash
   at any point is finished or rolled back by the next ``Workspace.open``, never a mix;
6. makes exactly one git commit (the changed files and the evidence archived for it ride
   along: ``WorkspaceDir.commit_history``) and runs the install hooks.

Crash points are named (``fault_point``) so tests can kill a real process in the middle.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from ..errors import ConcurrentUpdate, CorruptFile, ReasonCode, ScriptoriumError, WriteFailed
from ..faults import fault_point
from ..fsutil import atomic_write_json, fsync_dir, fsync_file, safe_join
from .catalog import TopicCatalog
from .fingerprints import sha256
from .moved import BeginState
from .foreign import BATCH_PURPOSES, BlockCites, taken_citations
from .stage import PARKED_PREFIX, StageError, checkout, park
from .directory import TransactionResult
from .normalize import normalize_topic
from .normalize_edit import normalize_edit
from .topics import (
    TopicDoc, TopicFormatError, parse_topic, parse_topic_bytes, repoint_block_links,
)

if TYPE_CHECKING:  # pragma: no cover
    from .directory import WorkspaceDir

# Purposes whose writer may delete blocks (a hand edit may not).
DELETING_PURPOSES = frozenset({"write", "reorganize", "backfill"})
JOURNAL_VERSION = 1


class TransactionError(WriteFailed):
    """A rejected commit. ``code`` says why; only CONCURRENT_UPDATE is worth retrying, and a
    TransactionError with that code is constructed as a :class:`StaleTransaction`, which is
    also a :class:`~scriptorium.errors.ConcurrentUpdate` (exit 5, retryable)."""

    code = ReasonCode.COMMIT_REJECTED

    def __new__(cls, message: str, *, code: ReasonCode | str | None = None,
                retryable: bool | None = None) -> "TransactionError":
        if code == ReasonCode.CONCURRENT_UPDATE and not issubclass(cls, ConcurrentUpdate):
            cls = StaleTransaction
        return super().__new__(cls, message)

    def __init__(self, message: str, *, code: ReasonCode | str | None = None,
                 retryable: bool | None = None) -> None:
        code = ReasonCode(code or self.code)
        if retryable is None:
            retryable = code == ReasonCode.CONCURRENT_UPDATE
        super().__init__(message, code=code, retryable=retryable)


class StaleTransaction(ConcurrentUpdate, TransactionError):
    """The workspace changed under the transaction: retrying on a fresh stage may work."""

    code = ReasonCode.CONCURRENT_UPDATE
    retryable = True


# -- fault injection ------------------------------------------------------------------------------

# -- the transaction ------------------------------------------------------------------------------


class Transaction:
    """A stage of topics/ and the commit that installs it (see the module docstring)."""

    def __init__(self, workspace: "WorkspaceDir", allowed_sources: Iterable[str] = (),
                 purpose: str = "write", own_blocks: Iterable[str] = ()):
        self.workspace = workspace
        self.allowed_sources = frozenset(allowed_sources)
        self.purpose = purpose
        self.own_blocks = frozenset(own_blocks)  # created earlier in this run: may go
        self.id = uuid.uuid4().hex[:12]
        self.closed = False
        self._settled = False
        with workspace.lock():
            recover_install(workspace)
            workspace.ensure_git()  # damaged history: the install's commit will warn
            self.catalog = TopicCatalog.of(workspace).refresh(hold=workspace.lock_hold())
            # what the commit checks memory against; a database home (which checks each
            # file it writes inside its own transaction instead) brings its own
            begin = getattr(workspace, "begin_state", None)
            self.base = begin(self.catalog) if begin is not None \
                else BeginState.take(workspace, self.catalog)
            self._stage = checkout(workspace, self.catalog)
        self.dir = self._stage.dir
        self.stage = self._stage.root

    # -- context manager ------------------------------------------------------------------------

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def discard(self) -> None:
        """Drop the writer's edits; nothing is installed. Safe to call twice. The stage is
        brought back to the committed files and kept for this process's next transaction;
        a stage an interrupted install still needs (the journal names it: its backups live
        there) is left for recovery."""
        if self.closed:
            return
        self.closed = True
        ws = self.workspace
        if _journal_dir(ws) == self.dir.name:
            return
        if not self._settled:
            try:
                edits = self._stage.changes()
                self._stage.settle({rel: _read_or_none(ws.root / rel) for rel in edits})
                self._settled = True
            except (OSError, StageError):
                pass
        if not (self._settled and park(ws, self._stage)):
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- commit -------------------------------------------------------------------------------------

    def commit(self, message: str, only: Iterable[str] | None = None) -> TransactionResult:
        """Validate the stage and install it whole or not at all; see the module docstring.
        ``only``: the writer declared these stage paths ("topics/…") are all it wrote, so
        only they are looked at (see ``writers.base.declares_edits``)."""
        if self.closed:
            raise TransactionError("transaction already committed or discarded")
        ws = self.workspace
        try:
            with ws.lock():
                ws.recover()
                if self.base.moved(ws):
                    raise self._stale()
                plan = _Plan(self)
                plan.build(only)
                if not plan.writes:
                    self._settle(plan)
                    return TransactionResult(workspace=ws)
                if self.base.overwritten(ws, plan.writes):
                    raise self._stale()
                result = plan.install(message)
                self._settle(plan)
        finally:
            self.discard()
            self.catalog.forget_recent()  # summaries kept for this commit's many questions
        for hook in ws.install_hooks:
            try:
                hook(ws, result)
            except Exception as exc:  # a hook (e.g. the search index) never undoes an install
                result.warnings.append(f"install hook {getattr(hook, '__name__', hook)!r} "
                                       f"failed: {exc}")
        return result

    def _settle(self, plan: "_Plan") -> None:
        """Bring the stage to what is now committed (only the files this commit saw change)."""
        try:
            self._stage.settle(plan.after)
            self._settled = True
        except OSError:
            pass


    def _stale(self) -> "TransactionError":
        """Memory moved under this transaction: the retry's begin must look at topics/ again
        even in the same lock hold (see ``TopicCatalog.refresh``)."""
        self.catalog.forget_hold()
        return TransactionError("workspace changed while the writer was running (revision "
                                "moved); retry on a fresh stage",
                                code=ReasonCode.CONCURRENT_UPDATE)


class _Where(dict):
    """The ``where`` mapping ``repoint_block_links`` reads, answered by a function."""

    def __init__(self, fn: Callable[[str], str | None]):
        super().__init__()
        self.fn = fn

    def get(self, key, default=None):  # type: ignore[override]
        found = self.fn(key)
        return default if found is None else found


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


class _Plan:
    """What one commit will install, computed and validated before anything moves. It reads
    only the files the writer changed (and files whose block links must follow a moved
    block); everything else it needs about the committed tree comes from the catalog."""

    def __init__(self, tx: Transaction):
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
            self._committed[rel] = _read_or_none(self.ws.root / rel) \
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

        def resolve_plain(path: str, target: str) -> str | None:
            key = (posixpath.dirname(path), target)
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

        self.plain = resolve_plain
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
            if hasattr(catalog, "before_validate"):  # a catalog of part of the tree
                catalog.before_validate(docs)  # (pg_catalog) fetches what these concern
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
        for fid in dict.fromkeys(block.citations):
            ev = doc.evidence.get(fid)
            if ev is None:
                continue
            for link in ev.sources:
                ref = resolve(doc.path, link.target)
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
            state = ws.load_runtime()
            rank = max(state.creation_order.values(), default=-1) + 1
            for block_id in self.created:
                if block_id not in state.creation_order:
                    state.creation_order[block_id] = rank
                    rank += 1
            writes[f"{ws.runtime_name}/runtime.json"] = state.dumps().encode("utf-8")
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


# -- the journaled install ---------------------------------------------------------------------------


def _journal_dir(ws: "WorkspaceDir") -> str | None:
    try:
        journal = json.loads(ws.journal_path.read_text(encoding="utf-8"))
        return str(journal["dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _allowed_rel(ws: "WorkspaceDir", rel: str) -> bool:
    return rel.startswith("topics/") or rel == f"{ws.runtime_name}/runtime.json"


def install_files(ws: "WorkspaceDir", txdir: Path, tx_id: str, writes: dict[str, bytes | None]) -> None:
    """Replace ``writes`` in the workspace whole or not at all (caller holds the lock)."""
    new_dir, backup_dir = txdir / "new", txdir / "backup"
    entries = []
    for rel in sorted(writes):
        if not _allowed_rel(ws, rel):
            raise TransactionError(f"{rel}: not a path a transaction installs",
                                   code=ReasonCode.READ_ONLY_PATH)
        data = writes[rel]
        target = safe_join(ws.root, rel)
        if data is not None:
            staged = new_dir / rel
            staged.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(staged, "wb") as fh:
                fh.write(data)
                fh.flush()
                fsync_file(fh.fileno())
            os.chmod(staged, 0o600)
        entries.append({"path": rel, "existed": target.exists(),
                        "op": "delete" if data is None else "put"})
    for parent in {(new_dir / e["path"]).parent for e in entries if e["op"] == "put"}:
        fsync_dir(parent)
    journal = {"version": JOURNAL_VERSION, "tx": tx_id, "dir": txdir.name, "state": "prepared",
               "entries": entries}
    fault_point("before-prepare")
    atomic_write_json(ws.journal_path, journal)
    fault_point("prepared")
    try:
        for n, entry in enumerate(entries):
            if entry["existed"]:
                backup = backup_dir / entry["path"]
                backup.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.replace(ws.root / entry["path"], backup)
                fault_point(f"backed-up-{n}")
        for n, entry in enumerate(entries):
            if entry["op"] == "put":
                target = ws.root / entry["path"]
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.replace(new_dir / entry["path"], target)
                fault_point(f"moved-in-{n}")
        for parent in {(ws.root / e["path"]).parent for e in entries}:
            fsync_dir(parent)
        journal["state"] = "committed"
        atomic_write_json(ws.journal_path, journal)
    except Exception:
        _roll_back(ws, txdir, entries)
        raise
    # Anything else (KeyboardInterrupt, a simulated crash) is treated like a crash: the journal
    # stays and the next lock holder finishes or rolls back.
    fault_point("committed")
    ws.bump_generation()
    _finish(ws, txdir, entries)
    fault_point("cleaned")
    # The journal stays until the caller has made the git commit (done_install), so a crash
    # before that commit is finished, history included, by the next lock holder.


def _prune_empty_dirs(ws: "WorkspaceDir", rels: Iterable[str]) -> None:
    """Remove directories under topics/ left empty by deleted or rolled-back files."""
    topics = ws.topics_dir.resolve()
    for rel in rels:
        parent = (ws.root / rel).parent
        while parent.resolve() != topics and topics in parent.resolve().parents:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent


def _roll_back(ws: "WorkspaceDir", txdir: Path, entries: list[dict]) -> None:
    backup_dir = txdir / "backup"
    for entry in reversed(entries):
        target = ws.root / entry["path"]
        backup = backup_dir / entry["path"]
        if backup.exists():
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.replace(backup, target)
        elif not entry["existed"] and target.exists():
            target.unlink()  # ours: nothing else writes while we hold the lock
    for parent in {(ws.root / e["path"]).parent for e in entries}:
        if parent.exists():
            fsync_dir(parent)
    _prune_empty_dirs(ws, [e["path"] for e in entries if not e["existed"]])
    ws.journal_path.unlink(missing_ok=True)
    fsync_dir(ws.runtime_dir)
    shutil.rmtree(txdir / "new", ignore_errors=True)
    shutil.rmtree(backup_dir, ignore_errors=True)


def _finish(ws: "WorkspaceDir", txdir: Path, entries: list[dict]) -> None:
    shutil.rmtree(txdir / "backup", ignore_errors=True)
    shutil.rmtree(txdir / "new", ignore_errors=True)
    _prune_empty_dirs(ws, [e["path"] for e in entries if e["op"] == "delete"])


def done_install(ws: "WorkspaceDir") -> None:
    """Retire the journal once the install is committed to git."""
    ws.journal_path.unlink(missing_ok=True)
    fsync_dir(ws.runtime_dir)


def recover_install(ws: "WorkspaceDir") -> str | None:
    """After a crash: a committed install is finished (and committed to git), a prepared one
    is rolled back. Caller holds the write lock. Returns "finished", "rolled back" or None."""
    path = ws.journal_path
    if not path.exists():
        _clean_abandoned(ws)
        return None
    try:
        journal = json.loads(path.read_text(encoding="utf-8"))
        state = journal["state"]
        txdir = ws.runtime_dir / journal["dir"]
        entries = journal["entries"]
        if not str(journal["dir"]).startswith("tx-") or "/" in journal["dir"] \
                or state not in ("prepared", "committed"):
            raise ValueError("unexpected journal contents")
        for entry in entries:
            safe_join(ws.root, entry["path"])
            if not _allowed_rel(ws, entry["path"]):
                raise ValueError(f"journal names {entry['path']!r}")
    except (OSError, ValueError, KeyError, TypeError, ScriptoriumError) as exc:
        raise CorruptFile(f"{path}: unreadable install journal ({exc}); inspect it and "
                          f"{ws.runtime_dir}/tx-* by hand") from None
    if state == "committed":
        ws.bump_generation()
        _finish(ws, txdir, entries)
        shutil.rmtree(txdir, ignore_errors=True)
        if ws.git.exists:
            try:
                ws.git.commit_all(f"memory: finish interrupted install {journal['tx']}",
                                  paths=["topics", "sources"])
            except ScriptoriumError:
                pass  # history catches up at the next commit (git add -A)
        done_install(ws)
        return "finished"
    _roll_back(ws, txdir, entries)
    shutil.rmtree(txdir, ignore_errors=True)
    return "rolled back"


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _clean_abandoned(ws: "WorkspaceDir") -> None:
    """Remove stage directories whose process died (no journal names them any more)."""
    try:
        names = [n for n in os.listdir(ws.runtime_dir) if n.startswith(("tx-", PARKED_PREFIX))]
    except OSError:
        return
    for name in names:
        txdir = ws.runtime_dir / name
        try:
            owner = json.loads((txdir / "owner.json").read_text(encoding="utf-8"))
            pid = owner.get("pid") if isinstance(owner, dict) else None
        except (OSError, ValueError):
            pid = None
            try:  # a directory being set up right now has no owner file yet
                if time.time() - txdir.stat().st_mtime < 60:
                    continue
            except OSError:
                continue
        if not _pid_alive(pid):
            shutil.rmtree(txdir, ignore_errors=True)
