"""A small wrapper over the git CLI for the per-session and per-workspace history repos.

Repos are initialised lazily with a repo-local identity, so no global git config is needed,
and committing is skipped when nothing is staged.

Every git call is pinned to its own repository (``GIT_DIR``/``GIT_WORK_TREE`` set, and
``GIT_CEILING_DIRECTORIES`` above it), so a damaged ``.git`` makes git fail instead of
discovering whatever repository encloses the home and staging unrelated files there. A repo
is created in a temporary directory and renamed to ``.git`` once complete, so a process killed
during ``git init`` leaves no half-made ``.git``; one found anyway (an older version, a copy) is
re-created when it holds no history and refused with :class:`GitDamaged` when it does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .errors import CorruptFile, ReasonCode, WriteFailed
from .faults import fault_point
from .fsutil import atomic_write_text

# Variables that would point git somewhere else than the repository we name.
_ENV_KEEP_OUT = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                 "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
                 "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM",
                 "GIT_CONFIG_COUNT")
INIT_PREFIX = ".git-init-"  # a repository being created, renamed to .git when complete
UNPACKED_NAME = "scriptorium-unpacked"  # in .git: commits made since the last packing
# Every git we run writes no reflog: two lines a commit (about 350 bytes, more than the text
# of a small write) that only ``git gc`` would ever expire, and we never run it. Our histories
# only move forward (a commit on top of HEAD), so every commit a reflog would name is
# reachable from HEAD anyway.
_CONFIG = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.logAllRefUpdates",
           "GIT_CONFIG_VALUE_0": "false"}


@dataclass(frozen=True)
class PackPolicy:
    """When a history's loose objects are packed (:meth:`GitRepo.pack_if_due`): once
    ``every`` commits were made since the last packing, or once the loose objects hold
    ``loose_bytes`` (None: not looked at). Loose objects are whole compressed copies of each
    changed file and tree, until a packing stores them as deltas. ``quick``: the packing
    tries one delta base per object and deflates fast (see :meth:`GitRepo.repack`)."""

    every: int
    loose_bytes: int | None = None
    quick: bool = False


class GitUnavailable(WriteFailed):
    """git is needed for history and is not installed."""

    code = ReasonCode.GIT_UNAVAILABLE


class GitDamaged(CorruptFile):
    """A ``.git`` that is not a usable repository and holds history we must not discard."""

    code = ReasonCode.GIT_DAMAGED


def _has_history(gitdir: Path) -> bool:
    """Does a (possibly damaged) git directory hold any object or ref worth keeping?"""
    if (gitdir / "packed-refs").is_file():
        return True
    for sub in ("objects", "refs"):
        base = gitdir / sub
        if not base.is_dir():
            continue
        for _dirpath, _dirnames, filenames in os.walk(base):
            if filenames:
                return True
    return False


class GitRepo:
    """History of one directory. Callers serialise access (they hold their own lock)."""

    def __init__(self, path: Path, name: str = "scriptorium", email: str = "scriptorium@local"):
        self.path = Path(path)
        self.name = name
        self.email = email

    @property
    def gitdir(self) -> Path:
        return self.path / ".git"

    def _run(self, args: Sequence[str], check: bool = True,
             gitdir: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run git on this repository only: never one found by searching upward."""
        env = {k: v for k, v in os.environ.items() if k not in _ENV_KEEP_OUT
               and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))}
        env.setdefault("GIT_CONFIG_NOSYSTEM", "1")
        env.update(_CONFIG)
        work_tree = os.path.abspath(self.path)
        # absolute: git runs with cwd = the work tree, so a relative home would point elsewhere
        env["GIT_DIR"] = os.path.abspath(gitdir if gitdir is not None else self.gitdir)
        env["GIT_WORK_TREE"] = work_tree
        env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(work_tree)
        # our identity whatever the repository's or the user's config says (a history made
        # by an older version, a copied home, a global user.name): each commit object has the
        # size we measured. Not shorter: a commit packs as a ~100-byte delta of its parent
        # only while that delta is under half its size; a shorter one is stored whole (a
        # 250-byte commit: ~145 bytes packed, against ~125 for the 300-byte one we write)
        for role in ("AUTHOR", "COMMITTER"):
            env[f"GIT_{role}_NAME"], env[f"GIT_{role}_EMAIL"] = self.name, self.email
        try:
            proc = subprocess.run(["git", *args], cwd=work_tree, env=env, text=True,
                                  capture_output=True)
        except FileNotFoundError:
            raise GitUnavailable("git is not installed; it is needed for history") from None
        if check and proc.returncode != 0:
            said = proc.stderr.strip() or proc.stdout.strip()
            full = "No space left on device" in said or "Disk quota exceeded" in said
            raise WriteFailed(  # a full disk passes: retry once space is freed
                f"git {args[0]} failed in {self.path}: {said}",
                code=ReasonCode.DISK_FULL if full else ReasonCode.GIT_FAILED, retryable=full)
        return proc

    @property
    def exists(self) -> bool:
        return os.path.lexists(self.gitdir)

    def problem(self) -> str | None:
        """Why ``.git`` is not a usable repository (None when it looks like one, or is
        missing). A cheap structural check, the one git itself makes to accept a directory:
        a real directory (not a symlink or a ``gitdir:`` file pointing elsewhere) with HEAD,
        objects/ and refs/."""
        gitdir = self.gitdir
        if not os.path.lexists(gitdir):
            return None
        if gitdir.is_symlink():
            return f"{gitdir} is a symlink"
        if not gitdir.is_dir():
            return f"{gitdir} is not a directory"
        if not (gitdir / "HEAD").is_file():
            return f"{gitdir} has no HEAD"
        for sub in ("objects", "refs"):
            if not (gitdir / sub).is_dir():
                return f"{gitdir} has no {sub}/"
        return None

    def repairable(self) -> bool:
        """Is the repo missing, or a damaged ``.git`` that :meth:`ensure` may re-create
        because it holds nothing worth keeping?"""
        if not self.exists:
            return True
        gitdir = self.gitdir
        return (self.problem() is not None and gitdir.is_dir() and not gitdir.is_symlink()
                and not _has_history(gitdir))

    def ensure(self, exclude: Iterable[str] = (), initial_message: str = "init",
               include_existing: bool = True) -> bool:
        """Make sure a usable repo exists; return True when it was created now.

        A missing repo is created; a damaged one is created anew when it holds no history
        (a ``git init`` killed half-way), else :class:`GitDamaged` is raised. The initial
        commit holds the files already there (``include_existing``), or is empty so that the
        change which triggered the init gets a commit of its own."""
        self._clear_stale_inits()
        problem = self.problem()
        if self.exists and problem is None:
            return False
        if problem is not None:
            if self.repairable():
                shutil.rmtree(self.gitdir)  # nothing to keep: an init that never finished
            else:
                raise GitDamaged(f"git history {problem}; it is not a usable repository and "
                                 f"may hold history, so it is left alone (move it aside to "
                                 f"start a new history)")
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f"{INIT_PREFIX}{uuid.uuid4().hex[:8]}"
        try:
            self._run(["init", "-q", "--initial-branch=main"], gitdir=tmp)
            for key, value in (("user.name", self.name), ("user.email", self.email),
                               ("commit.gpgsign", "false")):
                self._run(["config", key, value], gitdir=tmp)
            info = tmp / "info"
            info.mkdir(parents=True, exist_ok=True)
            with open(info / "exclude", "a", encoding="utf-8") as fh:
                fh.write("\n".join([f"/{INIT_PREFIX}*", *exclude]) + "\n")
            fault_point("git-init")
            if include_existing:
                self._run(["add", "-A"], gitdir=tmp)
            self._run(["commit", "-q", "--no-verify", "--allow-empty", "-m", initial_message],
                      gitdir=tmp)
            os.rename(tmp, self.gitdir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return True

    def _clear_stale_inits(self) -> None:
        """Remove repositories a process killed during :meth:`ensure` left half-made (callers
        serialise every command on a repo, so none is being made now)."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return
        for name in names:
            if name.startswith(INIT_PREFIX):
                shutil.rmtree(self.path / name, ignore_errors=True)

    def clear_stale_locks(self) -> list[str]:
        """Remove the lock files a git process killed mid-command leaves behind (index, HEAD,
        refs); return their paths relative to ``.git``.

        Git takes these with O_EXCL and never breaks them, so one left by a SIGKILLed commit
        makes every later commit fail for good. Callers serialise every command on a repo
        under their own lock, so a lock file found when they start one is stale.
        """
        gitdir = self.path / ".git"
        found = [gitdir / "index.lock", gitdir / "HEAD.lock"]
        if (gitdir / "refs").is_dir():
            found += sorted((gitdir / "refs").rglob("*.lock"))
        removed = []
        for path in found:
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append(path.relative_to(gitdir).as_posix())
        return removed

    def commit_all(self, message: str, paths: Sequence[str] | None = None,
                   allow_empty: bool = False) -> str | None:
        """Stage everything (or ``paths``) and commit; None when nothing changed. A lock a
        killed git left behind is cleared first (see :meth:`clear_stale_locks`)."""
        problem = self.problem()
        if problem is not None or not self.exists:
            raise GitDamaged(f"cannot commit: {problem or f'{self.gitdir} is missing'}")
        self.clear_stale_locks()
        if paths is None:
            self._run(["add", "-A"])
        else:
            existing = [p for p in paths if (self.path / p).exists()]
            if existing:
                self._run(["add", "-A", "--", *existing])
        if not allow_empty:
            staged = self._run(["diff", "--cached", "--quiet"], check=False)
            if staged.returncode == 0:
                return None
        args = ["commit", "-q", "--no-verify", "-m", message]
        if allow_empty:
            args.insert(1, "--allow-empty")
        self._run(args)
        return self._run(["rev-parse", "HEAD"]).stdout.strip()

    def pack_count(self) -> int:
        try:
            return sum(1 for n in os.listdir(self.path / ".git" / "objects" / "pack")
                       if n.endswith(".pack"))
        except OSError:
            return 0

    def loose_bytes(self) -> int:
        """Bytes of the loose objects (``objects/xx/``): each a whole compressed copy of one
        version of a file or tree, until a packing turns them into deltas."""
        total = 0
        objects = self.gitdir / "objects"
        try:
            fanout = [e for e in os.scandir(objects) if len(e.name) == 2 and e.is_dir()]
        except OSError:
            return 0
        for entry in fanout:
            try:
                with os.scandir(entry.path) as files:
                    total += sum(f.stat(follow_symlinks=False).st_size for f in files)
            except OSError:
                continue
        return total

    def repack(self, *, quick: bool = False) -> None:
        """Pack loose objects (each a whole compressed copy of a file version) as deltas,
        merging packs geometrically (each pack at least twice the size of the next), so the
        amortised cost stays small however long the history grows. ``quick`` tries one delta
        base per object (the previous version of the same path, where successive versions of
        one big tree differ by a few entries) and deflates fast: about half the time."""
        self.clear_stale_locks()
        fast = ["-c", "pack.compression=1"] if quick else []
        self._run([*fast, "repack", "-d", "-q", "--geometric=2",
                   *(["--window=1"] if quick else [])])

    def pack_if_due(self, policy: PackPolicy) -> bool:
        """Count the commit just made and pack the history when ``policy`` says it is due;
        True when it packed. The count lives in ``.git`` (so short processes add up, and
        every writer of the repository shares it). A failed packing raises and leaves the
        count due, so the next commit packs; the commit itself stands either way."""
        counter = self.gitdir / UNPACKED_NAME
        try:
            count = int(counter.read_text(encoding="ascii")) + 1
        except (OSError, ValueError):
            count = 1
        due = count >= policy.every or (policy.loose_bytes is not None
                                        and self.loose_bytes() >= policy.loose_bytes)
        if due:
            self.repack(quick=policy.quick)  # raises: the count is not reset, still due
            # A history made before reflogs were turned off still appends to the reflog
            # files it has (git writes one that exists): they go, and none is made again.
            shutil.rmtree(self.gitdir / "logs", ignore_errors=True)
            count = 0
        atomic_write_text(counter, f"{count}\n", durable=False)
        return due

    def commit_paths(self, message: str, paths: Sequence[str],
                     tree_compression: int | None = None) -> str | None:
        """Stage only the files ``paths`` (added, changed or deleted) and commit on top of
        HEAD; None when the tree did not change.

        Its cost follows the changed files rather than the tracked tree: ``update-index``
        stages exactly the named files (no pathspec walk, no ignore rules: callers name the
        files they wrote), plumbing (write-tree, commit-tree, update-ref) skips the
        porcelain's stat of every tracked file and its diff summary, a split index makes
        each update write only the entries that changed, and ``write-tree --missing-ok``
        skips looking up every blob the index names (one ``stat`` per file of a loose object
        store): the blobs staged now were just written by ``update-index``, the others by
        earlier commits. (The new tree object of a directory still lists all of its
        entries: a commit in a flat directory of n files writes O(n) bytes.)

        ``tree_compression`` is the zlib level of the loose tree and commit objects this
        writes (``core.looseCompression``): 0 stores a flat directory's big tree without
        deflating it, the larger part of the commit's cost at 10,000 files; the caller then
        packs the history often (:meth:`repack`), which compresses them as deltas."""
        self.clear_stale_locks()
        if paths:
            self._run(["-c", "core.splitIndex=true", "update-index", "--add", "--remove", "--",
                       *paths])
        level = [] if tree_compression is None else ["-c", f"core.looseCompression="
                                                           f"{tree_compression}"]
        tree = self._run([*level, "write-tree", "--missing-ok"]).stdout.strip()
        heads = self._run(["rev-parse", "HEAD", "HEAD^{tree}"], check=False)
        if heads.returncode != 0:  # no commit yet: the porcelain knows how to start
            return self.commit_all(message, paths=list(paths))
        head, head_tree = heads.stdout.split()
        if tree == head_tree:
            return None
        sha = self._run([*level, "commit-tree", tree, "-p", head, "-m", message]).stdout.strip()
        self._run(["update-ref", "HEAD", sha, head])
        return sha

    def log(self, limit: int = 50) -> list[dict]:
        if not self.exists or self.problem() is not None:
            return []
        out = self._run(["log", f"-{limit}", "--format=%H%x00%ct%x00%s"], check=False)
        rows = []
        for line in out.stdout.splitlines():
            sha, ts, msg = line.split("\x00", 2)
            rows.append({"sha": sha, "timestamp": int(ts), "message": msg})
        return rows

    def revisions(self, paths: Sequence[str]) -> list[tuple[str, str, dict[str, bytes | None]]]:
        """Every commit that changed ``paths``, oldest first: ``(sha, message, {path: the
        bytes it left, None when it deleted the file})`` (a home copy replays them)."""
        if not self.exists or self.problem() is not None:
            return []
        shas = self._run(["rev-list", "--reverse", "HEAD", "--", *paths],
                         check=False).stdout.split()
        out = []
        for sha in shas:
            message = self._run(["log", "-1", "--format=%B", sha]).stdout.strip()
            names = self._run(["diff-tree", "--root", "--no-commit-id", "--name-status", "-r",
                               "--no-renames", "-z", sha, "--", *paths]).stdout.split("\0")
            files: dict[str, bytes | None] = {}
            for status, path in zip(names[0::2], names[1::2]):
                files[path] = None if status == "D" else \
                    self._run(["show", f"{sha}:{path}"]).stdout.encode("utf-8")
            out.append((sha, message, files))
        return out

    def added_matches(self, pattern: str, paths: Sequence[str]) -> set[str] | None:
        """Every match of the regex ``pattern`` on a line that some commit added under
        ``paths`` (what the history ever held there); None when there is no history to read."""
        if not self.exists:
            return None
        proc = self._run(["log", "-p", "--format=", "--no-color", "--no-ext-diff",
                          "--no-renames", "--", *paths], check=False)
        if proc.returncode != 0:
            return None
        regex = re.compile(pattern)
        found: set[str] = set()
        for line in proc.stdout.splitlines():
            if line.startswith("+") and not line.startswith("+++ "):
                found.update(regex.findall(line))
        return found

    def fsck(self) -> bool:
        """True when the object store is intact."""
        return self._run(["fsck", "--no-progress"], check=False).returncode == 0
