"""The whole-or-nothing topic transaction (memory reference §3.9).

``Workspace.begin()`` stages a copy of ``topics/`` in the runtime dir; a writer edits
``stage/topics/**.md`` and nothing else. ``commit()`` then, under the workspace write lock:

1. re-checks the revision (changed since ``begin`` ⇒ CONCURRENT_UPDATE, the only retryable
   rejection);
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
6. makes exactly one git commit (``git add -A topics sources``: archived evidence rides along)
   and runs the install hooks.

Crash points are named (``fault_point``) so tests can kill a real process in the middle.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from ..errors import CorruptFile, ScriptoriumError
from ..faults import fault_point
from ..fsutil import atomic_write_json, fsync_dir, regular_files, safe_join
from .topics import (
    TopicDoc, TopicFormatError, normalize_topic, parse_topic, parse_topic_bytes,
    repoint_block_links, validate_tree,
)

if TYPE_CHECKING:  # pragma: no cover
    from .workspace import Workspace

# Purposes whose writer may delete blocks (a hand edit may not).
DELETING_PURPOSES = frozenset({"write", "reorganize", "backfill"})
JOURNAL_VERSION = 1


class TransactionError(ScriptoriumError):
    """A rejected commit. ``code`` says why; only CONCURRENT_UPDATE is worth retrying."""

    code = "COMMIT_REJECTED"

    def __init__(self, message: str, *, code: str | None = None, retryable: bool | None = None):
        code = code or self.code
        if retryable is None:
            retryable = code == "CONCURRENT_UPDATE"
        super().__init__(message, code=code, retryable=retryable)

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return 5 if self.code == "CONCURRENT_UPDATE" else 2


@dataclass
class TransactionResult:
    changed_files: list[str] = field(default_factory=list)   # "topics/…", sorted
    created_blocks: list[str] = field(default_factory=list)
    removed_blocks: list[str] = field(default_factory=list)
    revision: str = ""
    commit: str | None = None
    warnings: list[str] = field(default_factory=list)        # a failed hook or git commit

    def to_dict(self) -> dict:
        return {"changed_files": self.changed_files, "created_blocks": self.created_blocks,
                "removed_blocks": self.removed_blocks, "revision": self.revision,
                "commit": self.commit, "warnings": self.warnings}


# -- fault injection ------------------------------------------------------------------------------

# -- the transaction ------------------------------------------------------------------------------


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_tree(root: Path) -> dict[str, bytes]:
    """Regular files under ``root/topics`` as {"topics/…": bytes} (symlinks are not read)."""
    return {rel: (root / rel).read_bytes() for rel in regular_files(root, root / "topics")}


class Transaction:
    """A staged copy of topics/ and the commit that installs it (see the module docstring)."""

    def __init__(self, workspace: "Workspace", allowed_sources: Iterable[str] = (),
                 purpose: str = "write"):
        self.workspace = workspace
        self.allowed_sources = frozenset(allowed_sources)
        self.purpose = purpose
        self.id = uuid.uuid4().hex[:12]
        self.dir = workspace.runtime_dir / f"tx-{self.id}"
        self.stage = self.dir / "stage"
        self.closed = False
        with workspace.lock():
            workspace.recover()
            workspace.ensure_git()  # damaged history: the install's commit will warn
            self.base_revision = workspace.revision()
            self.committed = _read_tree(workspace.root)
            self.stage.mkdir(mode=0o700, parents=True)
            atomic_write_json(self.dir / "owner.json", {"pid": os.getpid(), "tx": self.id})
            (self.stage / "topics").mkdir(mode=0o700)
            for rel, data in self.committed.items():
                target = self.stage / rel
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                target.write_bytes(data)

    # -- context manager ------------------------------------------------------------------------

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def discard(self) -> None:
        """Drop the stage; nothing is installed. Safe to call twice. A stage an interrupted
        install still needs (the journal names it: its backups live there) is left for
        recovery."""
        self.closed = True
        if _journal_dir(self.workspace) == self.dir.name:
            return
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- commit -------------------------------------------------------------------------------------

    def commit(self, message: str) -> TransactionResult:
        """Validate the stage and install it whole or not at all; see the module docstring."""
        if self.closed:
            raise TransactionError("transaction already committed or discarded")
        ws = self.workspace
        try:
            with ws.lock():
                ws.recover()
                if ws.revision() != self.base_revision:
                    raise TransactionError("workspace changed while the writer was running "
                                           "(revision moved); retry on a fresh stage",
                                           code="CONCURRENT_UPDATE")
                plan = _Plan(self)
                plan.build()
                if not plan.writes:
                    return TransactionResult(revision=self.base_revision)
                result = plan.install(message)
        finally:
            self.discard()
        for hook in ws.install_hooks:
            try:
                hook(ws, result)
            except Exception as exc:  # a hook (e.g. the search index) never undoes an install
                result.warnings.append(f"install hook {getattr(hook, '__name__', hook)!r} "
                                       f"failed: {exc}")
        return result


class _Plan:
    """What one commit will install, computed and validated before anything moves."""

    def __init__(self, tx: Transaction):
        self.tx = tx
        self.ws = tx.workspace
        self.writes: dict[str, bytes | None] = {}   # "topics/…" -> new bytes, None = delete
        self.created: list[str] = []
        self.removed: list[str] = []

    # -- reading the stage ----------------------------------------------------------------------

    def _stage_files(self) -> dict[str, bytes]:
        stage = self.tx.stage
        if not (stage / "topics").is_dir() or (stage / "topics").is_symlink():
            raise TransactionError("the stage's topics/ directory is gone; nothing installed",
                                   code="READ_ONLY_PATH")
        out: dict[str, bytes] = {}
        for dirpath, dirnames, filenames in os.walk(stage, followlinks=False):
            for name in list(dirnames) + filenames:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, stage).replace(os.sep, "/")
                if rel != "topics" and not rel.startswith("topics/"):
                    raise TransactionError(f"{rel}: only topics/ may be written (sources/ is "
                                           "append-only and written by the runtime)",
                                           code="READ_ONLY_PATH")
                if os.path.islink(full):
                    raise TransactionError(f"{rel}: symlinks may not be written into topics/",
                                           code="READ_ONLY_PATH")
            for name in filenames:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, stage).replace(os.sep, "/")
                if not os.path.isfile(full):
                    raise TransactionError(f"{rel}: not a regular file", code="READ_ONLY_PATH")
                with open(full, "rb") as fh:
                    out[rel] = fh.read()
        return out

    # -- resolution ---------------------------------------------------------------------------------

    def _make_resolver(self, committed_docs: list[TopicDoc]) -> Callable[[str, str], str | None]:
        """Resolve a footnote target; a relative link made stale by moving a paragraph to
        another file is recovered from the committed file that held it."""
        arch = self.ws.sources
        by_target: dict[str, list[str]] = {}
        for doc in committed_docs:
            for ev in doc.evidence.values():
                for link in ev.sources:
                    by_target.setdefault(link.target, []).append(doc.path)

        def resolve(path: str, target: str) -> str | None:
            found = arch.resolve_target(path, target)
            if found is None:
                for old_path in by_target.get(target, []):
                    found = arch.resolve_target(old_path, target)
                    if found is not None:
                        break
            return found

        return resolve

    # -- build + validate -----------------------------------------------------------------------

    def build(self) -> None:
        tx, ws = self.tx, self.ws
        staged = self._stage_files()
        committed = tx.committed
        committed_docs = [parse_topic_bytes(data, rel, strict=False)
                          for rel, data in sorted(committed.items()) if rel.endswith(".md")]
        committed_ids = {i for d in committed_docs for b in d.blocks for i in b.ids}
        resolve = self._make_resolver(committed_docs)
        arch = ws.sources

        final: dict[str, bytes] = dict(committed)
        touched: set[str] = set()
        taken: set[str] = set()
        for rel in sorted(set(staged) | set(committed)):
            new = staged.get(rel)
            if new == committed.get(rel):
                continue
            if not rel.endswith(".md"):
                raise TransactionError(f"{rel}: topics/ holds only .md topic files",
                                       code="READ_ONLY_PATH")
            touched.add(rel)
            if new is None:
                final.pop(rel, None)
                continue
            try:
                text = new.decode("utf-8")
            except UnicodeDecodeError:
                raise TransactionError(f"{rel}: not valid UTF-8",
                                       code="INVALID_TOPIC_FORMAT") from None
            out = normalize_topic(text, rel, committed_ids=committed_ids, resolve=resolve,
                                  link_for=arch.canonical_link, taken_ids=taken)
            if out:
                final[rel] = out.encode("utf-8")
            else:
                final.pop(rel, None)

        docs: dict[str, TopicDoc] = {}
        try:
            for rel, data in sorted(final.items()):
                if rel.endswith(".md"):
                    docs[rel] = parse_topic_bytes(data, rel, strict=rel in touched)
            # block links follow paragraphs that moved to another file
            where = {i: d.path for d in docs.values() for b in d.blocks for i in b.ids}
            for rel, doc in list(docs.items()):
                if any(where.get(bid, path) != path for b in doc.blocks for path, bid in b.links):
                    text = repoint_block_links(final[rel].decode("utf-8"), rel, where)
                    final[rel] = text.encode("utf-8")
                    touched.add(rel)
                    docs[rel] = parse_topic(text, rel)
            validate_tree(docs.values())
        except TopicFormatError as exc:
            raise TransactionError(str(exc), code="INVALID_TOPIC_FORMAT") from None

        committed_refs: dict[str, set[str]] = {}
        for doc in committed_docs:
            for block in doc.blocks:
                refs = self._refs(doc, block, resolve, strict=False)
                for block_id in block.ids:
                    committed_refs.setdefault(block_id, set()).update(refs)
        for rel in sorted(touched):
            doc = docs.get(rel)
            if doc is None:
                continue
            for block in doc.blocks:
                refs = self._refs(doc, block, resolve, strict=True)
                prior: set[str] = set()
                for block_id in block.ids:
                    prior |= committed_refs.get(block_id, set())
                for ref in refs:
                    if ref in prior:
                        continue
                    frame = arch.lookup(ref)
                    where_ = f"{rel}:{block.line}"
                    if frame is None or not frame.trusted:
                        raise TransactionError(f"{where_}: source {ref} is not trusted evidence "
                                               "(pending sources may not be cited)",
                                               code="NOT_EVIDENCE")
                    if ref not in tx.allowed_sources:
                        raise TransactionError(f"{where_}: source reference {ref} is not "
                                               "evidence of this transaction", code="NOT_EVIDENCE")

        final_ids = {i for d in docs.values() for b in d.blocks for i in b.ids}
        self.created = sorted({b.id for d in docs.values() for b in d.blocks
                               if b.id and not (set(b.ids) & committed_ids)})
        self.removed = sorted({b.id for d in committed_docs for b in d.blocks
                               if b.id and not (set(b.ids) & final_ids)})
        if self.removed and tx.purpose not in DELETING_PURPOSES:
            raise TransactionError(f"a {tx.purpose} transaction may not delete blocks "
                                   f"({', '.join('^' + i for i in self.removed)})")
        for rel in sorted(touched):
            new = final.get(rel)
            if new != committed.get(rel):
                self.writes[rel] = new

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
                            f"[^{fid}] is not in the archive", code="MISSING_SOURCE")
                    continue
                if ref not in out:
                    out.append(ref)
        return out

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
        install_files(ws, tx.dir, tx.id, writes)
        result = TransactionResult(
            changed_files=sorted(p for p in self.writes), created_blocks=self.created,
            removed_blocks=self.removed, revision=ws.revision())
        try:
            result.commit = ws.git.commit_all(message, paths=["topics", "sources"])
        except ScriptoriumError as exc:
            result.warnings.append(
                f"memory history not committed ({exc.code}; the install stands): {exc}")
        fault_point("git-committed")
        done_install(ws)
        return result


# -- the journaled install ---------------------------------------------------------------------------


def _journal_dir(ws: "Workspace") -> str | None:
    try:
        journal = json.loads(ws.journal_path.read_text(encoding="utf-8"))
        return str(journal["dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _allowed_rel(ws: "Workspace", rel: str) -> bool:
    return rel.startswith("topics/") or rel == f"{ws.runtime_name}/runtime.json"


def install_files(ws: "Workspace", txdir: Path, tx_id: str, writes: dict[str, bytes | None]) -> None:
    """Replace ``writes`` in the workspace whole or not at all (caller holds the lock)."""
    new_dir, backup_dir = txdir / "new", txdir / "backup"
    entries = []
    for rel in sorted(writes):
        if not _allowed_rel(ws, rel):
            raise TransactionError(f"{rel}: not a path a transaction installs",
                                   code="READ_ONLY_PATH")
        data = writes[rel]
        target = safe_join(ws.root, rel)
        if data is not None:
            staged = new_dir / rel
            staged.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(staged, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
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
    _finish(ws, txdir, entries)
    fault_point("cleaned")
    # The journal stays until the caller has made the git commit (done_install), so a crash
    # before that commit is finished, history included, by the next lock holder.


def _prune_empty_dirs(ws: "Workspace", rels: Iterable[str]) -> None:
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


def _roll_back(ws: "Workspace", txdir: Path, entries: list[dict]) -> None:
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


def _finish(ws: "Workspace", txdir: Path, entries: list[dict]) -> None:
    shutil.rmtree(txdir / "backup", ignore_errors=True)
    shutil.rmtree(txdir / "new", ignore_errors=True)
    _prune_empty_dirs(ws, [e["path"] for e in entries if e["op"] == "delete"])


def done_install(ws: "Workspace") -> None:
    """Retire the journal once the install is committed to git."""
    ws.journal_path.unlink(missing_ok=True)
    fsync_dir(ws.runtime_dir)


def recover_install(ws: "Workspace") -> str | None:
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


def _clean_abandoned(ws: "Workspace") -> None:
    """Remove stage directories whose process died (no journal names them any more)."""
    try:
        names = [n for n in os.listdir(ws.runtime_dir) if n.startswith("tx-")]
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
