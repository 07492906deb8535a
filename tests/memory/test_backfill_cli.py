"""`scriptorium memory backfill` from the shell: report, exit codes and one-line errors."""

from __future__ import annotations

import json

import pytest

from scriptorium.memory.workspace import Workspace
from testkit import workspace_lock_held

from upgrade_support import run, run_json, tree_bytes


# -- backfill ----------------------------------------------------------------------------------


def test_backfill_json_reports_counts_and_the_revision(legacy_home):
    sessions = tree_bytes(legacy_home / "sessions")
    code, data = run_json(legacy_home, "memory", "backfill", "--budget", "40")
    assert code == 0
    assert {k: data[k] for k in ("status", "candidates", "processed", "remaining")} == \
        {"status": "ok", "candidates": 8, "processed": 8, "remaining": 0}
    assert data["revision"] == Workspace.open(legacy_home / "memory").revision()
    assert tree_bytes(legacy_home / "sessions") == sessions
    code, again = run_json(legacy_home, "memory", "backfill")
    assert code == 0 and again["candidates"] == 0 and again["revision"] == data["revision"]


@pytest.mark.parametrize("budget", ["0", "-3"])
def test_a_bad_budget_is_a_one_line_error(legacy_home, budget):
    result = run(legacy_home, "memory", "backfill", "--budget", budget)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "budget" in result.stderr
    assert not (legacy_home / "memory" / "topics").exists()


def test_a_failing_batch_exits_non_zero_and_reports_what_remains(legacy_home, monkeypatch):
    class Broken:
        name = "broken"
        repair_attempts = 0

        def write(self, request):
            raise RuntimeError("model unreachable")

    monkeypatch.setattr("scriptorium.memory.writing.make_writer", lambda kind, s=None: Broken())
    result = run(legacy_home, "memory", "backfill", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert (data["status"], data["processed"], data["remaining"]) == ("failed", 0, 8)
    assert result.stderr.count("\n") == 1 and "model unreachable" in result.stderr


def test_backfill_with_work_left_exits_non_zero(legacy_home, monkeypatch):
    class Idle:
        name = "idle"
        repair_attempts = 0

        def write(self, request):
            return None

    monkeypatch.setattr("scriptorium.memory.writing.make_writer", lambda kind, s=None: Idle())
    code, data = run_json(legacy_home, "memory", "backfill")
    assert code == 1 and data["status"] == "incomplete" and data["remaining"] == 8


def test_backfill_on_a_busy_workspace_is_a_retryable_one_line_error(legacy_home, monkeypatch):
    monkeypatch.setattr("scriptorium.memory.backfill.BACKFILL_LOCK_TIMEOUT", 0.1)
    root = legacy_home / "memory"
    Workspace.open(root)
    with workspace_lock_held(root):
        result = run(legacy_home, "memory", "backfill")
    assert result.exit_code == 5 and result.stderr.count("\n") == 1


def test_a_terminal_sees_backfill_progress_counting_sources(legacy_home, monkeypatch):
    import io
    import sys

    from scriptorium.cli.app import App
    from scriptorium.cli.upgrade_cmds import progress_display
    from scriptorium.memory.backfill import backfill
    from scriptorium.memory.writers.embedded import EmbeddedWriter

    class FakeTerminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    app = App(str(legacy_home))
    with progress_display(app, "backfilling") as progress:
        report = backfill(Workspace.open(legacy_home / "memory"), EmbeddedWriter(),
                          budget_tokens=40, progress=progress)
    assert report.status == "ok"
    assert "backfilling" in term.getvalue() and "8/8" in term.getvalue()
