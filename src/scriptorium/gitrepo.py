"""A small wrapper over the git CLI for the per-session and per-workspace history repos.

Repos are initialised lazily with a repo-local identity, so no global git config is needed,
and committing is skipped when nothing is staged.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterable, Sequence

from .errors import ScriptoriumError

_ENV_KEEP_OUT = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")


class GitUnavailable(ScriptoriumError):
    code = "GIT_UNAVAILABLE"


class GitRepo:
    """History of one directory. Callers serialise access (they hold their own lock)."""

    def __init__(self, path: Path, name: str = "scriptorium", email: str = "scriptorium@local"):
        self.path = Path(path)
        self.name = name
        self.email = email

    def _run(self, args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in _ENV_KEEP_OUT}
        env.setdefault("GIT_CONFIG_NOSYSTEM", "1")
        try:
            proc = subprocess.run(["git", *args], cwd=self.path, env=env, text=True,
                                  capture_output=True)
        except FileNotFoundError:
            raise GitUnavailable("git is not installed; it is needed for history") from None
        if check and proc.returncode != 0:
            raise ScriptoriumError(
                f"git {args[0]} failed in {self.path}: {proc.stderr.strip() or proc.stdout.strip()}",
                code="GIT_FAILED")
        return proc

    @property
    def exists(self) -> bool:
        return (self.path / ".git").exists()

    def ensure(self, exclude: Iterable[str] = (), initial_message: str = "init",
               include_existing: bool = True) -> bool:
        """Initialise the repo if missing; return True when it was created now.

        The initial commit holds the files already there (``include_existing``), or is empty
        so that the change which triggered the init gets a commit of its own."""
        if self.exists:
            return False
        self.path.mkdir(parents=True, exist_ok=True)
        self._run(["init", "-q", "--initial-branch=main"])
        self._run(["config", "user.name", self.name])
        self._run(["config", "user.email", self.email])
        self._run(["config", "commit.gpgsign", "false"])
        lines = list(exclude)
        if lines:
            info = self.path / ".git" / "info"
            info.mkdir(parents=True, exist_ok=True)
            with open(info / "exclude", "a", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")
        self.commit_all(initial_message, paths=None if include_existing else [],
                        allow_empty=True)
        return True

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

    def log(self, limit: int = 50) -> list[dict]:
        if not self.exists:
            return []
        out = self._run(["log", f"-{limit}", "--format=%H%x00%ct%x00%s"], check=False)
        rows = []
        for line in out.stdout.splitlines():
            sha, ts, msg = line.split("\x00", 2)
            rows.append({"sha": sha, "timestamp": int(ts), "message": msg})
        return rows

    def fsck(self) -> bool:
        """True when the object store is intact."""
        return self._run(["fsck", "--no-progress"], check=False).returncode == 0
