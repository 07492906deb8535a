"""``Memory`` is the front door: every operation is one typed method, and the CLI is a thin
view that calls it (no library logic of its own)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from scriptorium import Memory
from scriptorium.errors import InvalidInput
from scriptorium.memory.backfill import BackfillReport
from scriptorium.memory.migrate import MigrationReport
from scriptorium.memory.reorganize import ReorganizeReport
from scriptorium.memory.verify import VerifyReport
from scriptorium.memory.watcher import PassReport
from scriptorium.sessions.errors import SessionNotFound
from testkit import Cli

CLI = Path(__file__).resolve().parents[1] / "src" / "scriptorium" / "cli"


def conversation(mem: Memory) -> None:
    mem.store.create_session("trip", title="Lisbon offsite")
    mem.store.append_message("trip", {"role": "user", "content": "The budget is 50k euros.",
                                      "id": "u1"})
    mem.store.append_message("trip", {"role": "assistant", "content": "Noted: 50k.",
                                      "id": "a1"})


def test_every_operation_is_a_method_of_memory(homes):
    mem = homes.open()
    conversation(mem)
    [result] = mem.write(["trip"], force=True)
    assert result.marked == ["u1", "a1"] and result.failure is None
    status = mem.status(["trip"])
    assert status["sessions"][0]["branches"][0]["pending_turns"] == 0
    hits = mem.search("budget")
    assert hits and {h.path for h in hits} == {"topics/lisbon-offsite.md"}
    hit = hits[0]  # the value and its current-state line both cite the turns that set it
    assert "openprogram/trip/u1" in hit.sources
    shown = mem.show(hit.block_id)
    assert shown["kind"] == "block" and "50k" in shown["markdown"]
    followed = mem.follow("openprogram/trip/u1")
    assert followed["in_session_store"] and followed["turn"]["content"].startswith("The budget")
    assert isinstance(mem.verify(), VerifyReport) and mem.verify().ok
    assert isinstance(mem.migrate(), MigrationReport)
    assert isinstance(mem.backfill(), BackfillReport)
    assert isinstance(mem.reorganize(), ReorganizeReport)
    assert isinstance(mem.watch_once(now=0.0), PassReport)


def test_reading_a_home_without_memory_creates_nothing(tmp_path):
    mem = Memory.open(tmp_path, create=False)
    assert mem.search("anything") == []
    with pytest.raises(InvalidInput):
        mem.search("anything", top_k=0)  # bad arguments are refused even with no memory
    assert not (tmp_path / "memory").exists()


def test_writing_an_unknown_session_is_refused_before_anything_is_written(homes):
    mem = homes.open()
    conversation(mem)
    with pytest.raises(SessionNotFound):
        mem.write(["trip", "ghost"], force=True)
    assert mem.status(["trip"])["sessions"][0]["branches"][0]["pending_turns"] == 2


def test_a_failed_write_reports_its_reason_on_stderr_not_stdout(home):
    cli = Cli(home)
    (home / "config.toml").write_text(
        "[writer]\nkind = 'llm'\n[writer.llm]\nbase_url = 'http://127.0.0.1:9/v1'\n"
        "model = 'm'\napi_key_env = 'SCRIPTORIUM_TEST_NO_SUCH_KEY'\n")
    cli("session", "new", "--id", "s")
    cli("session", "add", "s", "--role", "user", "--text", "hello there")
    text = cli("memory", "write", "s", "--force")
    assert text.exit_code == 1
    assert "MODEL_AUTHENTICATION" in text.stderr and "MODEL_AUTHENTICATION" not in text.stdout
    assert text.stderr.startswith("error: s: write failed:") and text.stderr.count("\n") == 1
    as_json = cli("memory", "write", "s", "--force", "--json")
    assert as_json.exit_code == 1 and as_json.stderr.count("\n") == 1
    row = json.loads(as_json.stdout)["sessions"][0]
    assert row["failure"]["reason_code"] == "MODEL_AUTHENTICATION"


def test_memory_commands_hold_no_library_logic():
    """Command modules reach the library only through App.memory()/App.store(): they import
    nothing from scriptorium.memory or scriptorium.sessions themselves."""
    for path in [*CLI.glob("*_cmds.py"), *CLI.glob("*_cmd.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                module = node.module or ""
                assert not module.startswith(("memory", "sessions")), (path.name, module)
