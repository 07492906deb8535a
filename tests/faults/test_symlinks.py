"""No write ever goes through a symlink (issue 11, item 2).

A ``sessions/<sid>/history`` or ``.session.lock`` that was a symlink used to be followed:
turns and marks landed in its target. Every path the store and the workspace write is tried
here as a symlink to a directory (or file) outside the home; the command must fail with one
line naming the path, and the target must be exactly as it was.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from testkit import Cli


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """Somewhere outside the home that a symlink points at, with a file to overwrite."""
    t = tmp_path / "elsewhere"
    t.mkdir()
    (t / "precious.txt").write_text("keep me\n")
    return t


def refused(cli: Cli, *args: str) -> str:
    result = cli(*args)
    assert result.exit_code != 0, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "symlink" in err
    return err


def two_turns(cli: Cli) -> None:
    cli.json("session", "new", "--id", "s")
    cli.json("session", "add", "s", "--role", "user", "--text", "Plan the trip", "--id", "u1")
    cli.json("session", "add", "s", "--role", "assistant", "--text", "Sure", "--id", "a1")


def swap_for_link(path: Path, target: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            os.replace(child, target / child.name)
        path.rmdir()
    elif path.exists():
        path.unlink()
    path.symlink_to(target)


@pytest.mark.parametrize("name", ["history", ".session.lock", "meta.json"])
def test_a_symlinked_session_path_is_refused_and_its_target_untouched(cli, home, target, name):
    two_turns(cli)
    sdir = home / "sessions" / "s"
    link_to = target if name == "history" else target / "precious.txt"
    swap_for_link(sdir / name, link_to)
    before = snapshot(target)
    err = refused(cli, "session", "add", "s", "--role", "user", "--text", "More", "--id", "u2",
                  "--after", "a1")
    assert name in err
    assert snapshot(target) == before


def test_a_symlink_planted_at_the_next_node_file_name_is_refused(cli, home, target):
    two_turns(cli)
    hist = home / "sessions" / "s" / "history"
    (hist / "00000002-u-u2.json").symlink_to(target / "precious.txt")
    before = snapshot(target)
    err = refused(cli, "session", "add", "s", "--role", "user", "--text", "More", "--id", "u2")
    assert "00000002-u-u2.json" in err
    assert snapshot(target) == before


def test_a_mark_is_never_written_through_a_symlinked_history(cli, home, target):
    two_turns(cli)
    swap_for_link(home / "sessions" / "s" / "history", target)
    before = snapshot(target)
    result = cli("memory", "write", "s", "--force", "--json")
    assert result.exit_code != 0
    assert snapshot(target) == before


@pytest.mark.parametrize("name", ["topics", "sources", ".scriptorium"])
def test_a_symlinked_workspace_directory_is_refused(cli, home, target, name):
    two_turns(cli)
    cli.json("memory", "write", "s", "--force")
    cli.json("session", "add", "s", "--role", "user", "--text", "Book the ferry", "--id", "u2")
    swap_for_link(home / "memory" / name, target)
    before = snapshot(target)
    err = refused(cli, "memory", "write", "s", "--force")
    assert name in err
    assert snapshot(target) == before


@pytest.mark.parametrize("name", ["write.lock", "runtime.json", "workspace-id", "search.sqlite"])
def test_a_symlinked_workspace_runtime_file_is_refused(cli, home, target, name):
    two_turns(cli)
    cli.json("memory", "write", "s", "--force")
    cli.json("session", "add", "s", "--role", "user", "--text", "Book the ferry", "--id", "u2")
    runtime = home / "memory" / ".scriptorium"
    link_to = target / "precious.txt"
    if name == "search.sqlite":  # a real database SQLite would happily write into
        for extra in runtime.glob("search.sqlite*"):
            extra.unlink()
        link_to = target / "other.db"
        with sqlite3.connect(link_to) as db:
            db.execute("CREATE TABLE t (x)")
        db.close()
    swap_for_link(runtime / name, link_to)
    before = snapshot(target)
    result = cli("memory", "write", "s", "--force", "--json")
    search = cli("memory", "search", "ferry", "--json")
    assert snapshot(target) == before
    if name == "search.sqlite":  # derived data: the link is replaced by a fresh index
        assert search.exit_code == 0 and not (runtime / name).is_symlink()
    else:
        assert result.exit_code != 0 and "symlink" in result.stdout + result.stderr
        assert (runtime / name).is_symlink()  # refused, not silently replaced
