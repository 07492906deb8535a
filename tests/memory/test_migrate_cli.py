"""`scriptorium memory migrate` from the shell: report, exit codes, one-line errors, and a
progress bar only on a terminal."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from scriptorium.sessions import SessionStore

from upgrade_support import cite_archive, marked, run, run_json, tree_bytes


@pytest.fixture
def legacy_home(legacy_home: Path) -> Path:
    """The reference's legacy installation, its archived turns cited (completed writes)."""
    cite_archive(legacy_home / "memory")
    return legacy_home


# -- migrate -----------------------------------------------------------------------------------


def test_migrate_json_reports_sessions_marks_and_the_cursor_removal(legacy_home):
    code, data = run_json(legacy_home, "memory", "migrate")
    assert code == 0
    assert data["migrated"] is True and data["cursors_removed"] is True
    assert data["marked"] == {"deploy": ["d0", "d1", "d2", "d3"],
                              "offsite": ["o0", "o1", "o2", "o3"]}
    assert data["skipped"] == {} and data["errors"] == {}
    assert marked(SessionStore(legacy_home / "sessions"), "offsite", "w-5eed0001") == \
        {"o0", "o1", "o2", "o3"}


def test_migrate_twice_reports_nothing_to_do_and_changes_nothing(legacy_home):
    run_json(legacy_home, "memory", "migrate")
    before = tree_bytes(legacy_home)
    code, data = run_json(legacy_home, "memory", "migrate")
    assert code == 0 and data["migrated"] is False and data["marked"] == {}
    assert tree_bytes(legacy_home) == before
    human = run(legacy_home, "memory", "migrate")
    assert human.exit_code == 0 and "nothing to migrate" in human.stdout


def test_migrate_on_a_home_without_memory_creates_nothing(home):
    code, data = run_json(home, "memory", "migrate")
    assert code == 0 and data["migrated"] is False
    assert not (home / "memory").exists()


def test_a_failed_marker_write_exits_non_zero_with_a_one_line_error(legacy_home, monkeypatch):
    real = SessionStore.merge_node_metadata_batch

    def flaky(self, sid, patches):
        if sid == "offsite":
            raise OSError("disk full")
        return real(self, sid, patches)

    monkeypatch.setattr(SessionStore, "merge_node_metadata_batch", flaky)
    result = run(legacy_home, "memory", "migrate", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["cursors_removed"] is False and "disk full" in data["errors"]["offsite"]
    assert data["marked"] == {"deploy": ["d0", "d1", "d2", "d3"]}
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert "offsite" in result.stderr


# -- the progress bar --------------------------------------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _progress_output(monkeypatch, as_json: bool, drive) -> str:
    from scriptorium.cli.app import App
    from scriptorium.cli.upgrade_cmds import progress_display

    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    app = App(None)
    app.as_json = as_json
    with progress_display(app, "migrating") as progress:
        if progress is not None:
            drive(progress)
        seen = progress
    return term.getvalue(), seen


def test_a_terminal_gets_a_progress_bar_that_counts(monkeypatch, legacy_home):
    from scriptorium.memory.migrate import migrate
    from scriptorium.memory.writing import Memory

    text, progress = _progress_output(
        monkeypatch, False, lambda p: migrate(Memory(legacy_home), progress=p))
    assert progress is not None
    assert "migrating" in text and "2/2" in text


def test_json_output_never_draws_a_bar_even_on_a_terminal(monkeypatch):
    text, progress = _progress_output(monkeypatch, True, lambda p: None)
    assert progress is None and text == ""


def test_a_pipe_gets_no_bar(legacy_home):
    result = run(legacy_home, "memory", "migrate")
    assert result.exit_code == 0 and "\x1b[" not in result.output
    assert result.stdout.splitlines()[-1] == "cursors removed"
