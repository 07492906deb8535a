"""Inputs shared by the cost benchmarks: generated memory workspaces (cached under
benchmarks/out/, gitignored, since a 50 MB one takes minutes to make) and the pre-change code
extracted from git, so a baseline runs the old path in its own process on the same input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
# The last commit before the write path stopped growing with memory (issue 12).
BASELINE_COMMIT = "6c50144"


# What the cost benchmarks' child processes share, run after they made ``mem`` (a Memory):
# a session of synthetic turns, the bytes of the files under a path, and CPU time spent by the
# process and the git it ran.
CHILD_HELPERS = r'''
def session(sid, n, title):
    mem.store.create_session(sid, title=title)
    for i in range(n):
        text = (f"Question {i}: which hotel near Alfama has a meeting room for {i % 20 + 5}?"
                if i % 2 == 0 else
                f"The Alfama Grand has a room for {i % 20 + 5}; I will hold it until day "
                f"{i % 28 + 1}.")
        mem.store.append_message(sid, {"role": "user" if i % 2 == 0 else "assistant",
                                       "content": text}, commit=False)

def size(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total

def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # git
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
'''


def cached_workspace(mb: float) -> Path:
    """A memory workspace with ~``mb`` MB of topics citing archived turns, with git history."""
    path = OUT / f"write-ws-{mb:g}mb"
    if (path / ".done").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    sys.path.insert(0, str(HERE))
    from topic_gen import build  # one generator for every benchmark

    build(path, mb)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q", "--initial-branch=main"], ["add", "-A"],
                 ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "seed"]):
        subprocess.run(["git", *args], cwd=path, check=True, env=env, capture_output=True)
    (path / ".git" / "info" / "exclude").write_text("/.scriptorium*\n/.nativemem*\n")
    (path / ".done").write_text("")
    return path


def packed_workspace(mb: float) -> Path:
    """:func:`cached_workspace` with its history packed (``git repack -a -d``), as a memory
    that has been written to for a while keeps it: growth measured on it is what the
    writes add, not a packing of the seed's loose objects that happens to fall in."""
    path = OUT / f"write-ws-{mb:g}mb-packed"
    if (path / ".done").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(cached_workspace(mb), path, symlinks=True,
                    ignore=shutil.ignore_patterns(".done"))
    subprocess.run(["git", "repack", "-a", "-d", "-q"], cwd=path, check=True,
                   env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
    (path / ".done").write_text("")
    return path


def copy_workspace(mb: float, dest: Path, packed: bool = False) -> Path:
    source = packed_workspace(mb) if packed else cached_workspace(mb)
    shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns(".done"))
    return dest


def baseline_src(commit: str = BASELINE_COMMIT) -> Path:
    """``src/`` of ``commit`` (default BASELINE_COMMIT), extracted once into benchmarks/out/."""
    path = OUT / f"baseline-{commit}"
    if not (path / "src").is_dir():
        path.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "src"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(path)], input=archive, check=True)
    return path / "src"


def ours_src() -> Path:
    return REPO / "src"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
