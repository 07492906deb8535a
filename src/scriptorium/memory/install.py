"""The journaled install of a commit's files, and its recovery after a crash.

``install_files`` replaces a commit's files whole or not at all through a journal
(``<runtime>/install.json``: prepared -> move the old files to a backup -> move the new ones
in -> committed -> drop the backup); ``recover_install`` (run by the next holder of the write
lock) finishes a committed install, git commit included, or rolls a prepared one back.
Crash points are named (``fault_point``) so tests can kill a real process in the middle.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from ..errors import CorruptFile, ReasonCode, ScriptoriumError
from ..faults import fault_point
from ..fsutil import atomic_write_json, fsync_dir, fsync_file, safe_path
from .stage import PARKED_PREFIX
from .tx_errors import TransactionError

if TYPE_CHECKING:  # pragma: no cover
    from .directory import WorkspaceDir

__all__ = ["install_files", "done_install", "recover_install", "journal_dir"]

JOURNAL_VERSION = 1


def journal_dir(ws: "WorkspaceDir") -> str | None:
    try:
        journal = json.loads(ws.journal_path.read_text(encoding="utf-8"))
        return str(journal["dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _allowed_rel(ws: "WorkspaceDir", rel: str) -> bool:
    return rel.startswith("topics/") or rel == f"{ws.runtime_name}/runtime.json"


def install_files(ws: "WorkspaceDir", txdir: Path, tx_id: str, writes: dict[str, bytes | None]) -> None:
    """Replace ``writes`` in the workspace whole or not at all (caller holds the lock).
    Paths are joined as strings: a ``Path`` would intern each topic's name anew each time
    (see :func:`~scriptorium.fsutil.safe_path`)."""
    join, parent_of = os.path.join, os.path.dirname
    root, new_dir, backup_dir = str(ws.root), str(txdir / "new"), str(txdir / "backup")
    entries = []
    for rel in sorted(writes):
        if not _allowed_rel(ws, rel):
            raise TransactionError(f"{rel}: not a path a transaction installs",
                                   code=ReasonCode.READ_ONLY_PATH)
        data = writes[rel]
        target = safe_path(ws.root, rel)
        if data is not None:
            staged = join(new_dir, rel)
            os.makedirs(parent_of(staged), mode=0o700, exist_ok=True)
            with open(staged, "wb") as fh:
                fh.write(data)
                fh.flush()
                fsync_file(fh.fileno())
            os.chmod(staged, 0o600)
        entries.append({"path": rel, "existed": os.path.exists(target),
                        "op": "delete" if data is None else "put"})
    for parent in {parent_of(join(new_dir, e["path"])) for e in entries if e["op"] == "put"}:
        fsync_dir(parent)
    journal = {"version": JOURNAL_VERSION, "tx": tx_id, "dir": txdir.name, "state": "prepared",
               "entries": entries}
    fault_point("before-prepare")
    atomic_write_json(ws.journal_path, journal)
    fault_point("prepared")
    try:
        for n, entry in enumerate(entries):
            if entry["existed"]:
                backup = join(backup_dir, entry["path"])
                os.makedirs(parent_of(backup), mode=0o700, exist_ok=True)
                os.replace(join(root, entry["path"]), backup)
                fault_point(f"backed-up-{n}")
        for n, entry in enumerate(entries):
            if entry["op"] == "put":
                target = join(root, entry["path"])
                os.makedirs(parent_of(target), mode=0o700, exist_ok=True)
                os.replace(join(new_dir, entry["path"]), target)
                fault_point(f"moved-in-{n}")
        for parent in {parent_of(join(root, e["path"])) for e in entries}:
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
            safe_path(ws.root, entry["path"])
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
