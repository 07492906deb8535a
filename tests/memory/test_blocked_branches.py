"""A branch that a non-retryable failure blocks is visible: ``memory status`` and ``memory
verify`` name it with the reason code and what the user can do, until a write on it succeeds
(on both kinds of home; the damaged archive file is the directory home's).

Real sessions and a real workspace; the failures are real ones (a damaged evidence archive,
a writer whose edit the transaction rejects).
"""

from __future__ import annotations

from pathlib import Path

from scriptorium.config import load_settings
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory
from testkit import Cli


class DanglingLinkWriter(EmbeddedWriter):
    """A writer with a bug: it adds a link to a block that does not exist."""

    def write(self, request):
        audit = super().write(request)
        for path in request.topics_dir.rglob("*.md"):
            text = path.read_text()
            path.write_text(text.replace("[^e1]", " see [x](#^deadbeef)[^e1]", 1))
        return audit


def open_memory(home: Path, writer=None) -> Memory:
    return Memory(home, settings=load_settings(home), writer=writer or EmbeddedWriter())


def branch(status: dict, tip: str) -> dict:
    (session,) = status["sessions"]
    return next(b for b in session["branches"] if b["tip"] == tip)


def archive_file(mem: Memory, source_id: str) -> Path:
    frame = mem.workspace.sources.lookup(source_id)
    assert frame is not None
    return mem.workspace.root / frame.path


def test_a_damaged_archive_blocks_the_branch_visibly_until_a_write_succeeds(home):
    mem = open_memory(home)
    mem.store.create_session("s", title="Trip")
    mem.store.append_message("s", {"id": "u1", "role": "user", "content": "Book Lisbon."})
    assert mem.write_session("s").failure is None
    path = archive_file(mem, "openprogram/s/u1")
    good = path.read_bytes()
    path.write_bytes(good + b"garbage that is not a frame\n")
    mem.store.append_message("s", {"id": "u2", "role": "user", "content": "And Porto."})
    failed = mem.write_session("s")
    assert failed.failure.reason_code == "SOURCE_ARCHIVE_INVALID"

    cli = Cli(home)
    blocked = branch(cli.json("memory", "status"), "u2")["blocked"]
    assert blocked["reason_code"] == "SOURCE_ARCHIVE_INVALID"
    assert "memory verify --repair" in blocked["hint"]
    human = cli("memory", "status").output
    assert "BLOCKED SOURCE_ARCHIVE_INVALID" in human and "what to do:" in human
    result = cli("memory", "verify", "--json")
    assert result.exit_code == 1
    problems = [p for p in __import__("json").loads(result.stdout)["problems"]
                if p["kind"] == "blocked"]
    assert [(p["session_id"], p["node_id"], p["reason_code"]) for p in problems] == \
        [("s", "u2", "SOURCE_ARCHIVE_INVALID")]

    path.write_bytes(good)  # the user repairs the file by hand
    assert open_memory(home).write_session("s").failure is None
    assert branch(cli.json("memory", "status"), "u2")["blocked"] is None
    assert cli.json("memory", "verify")["ok"] is True


def test_a_blocked_branch_stays_visible_after_more_turns_arrive_and_siblings_are_not(homes):
    mem = homes.open(EmbeddedWriter())
    mem.store.create_session("s", title="Trip")
    mem.store.append_message("s", {"id": "u0", "role": "user", "content": "Plan a trip."})
    assert mem.write_session("s").failure is None
    mem = homes.open(DanglingLinkWriter())
    mem.store.append_message("s", {"id": "u1", "role": "user", "content": "Book Lisbon."})
    failed = mem.write_session("s")
    assert failed.failure.reason_code == "INVALID_TOPIC_FORMAT"
    assert not failed.failure.retryable
    mem.store.append_message("s", {"id": "a1", "role": "assistant", "content": "Booked."})
    mem.store.append_message("s", {"id": "u1b", "role": "user", "content": "Or Porto?",
                                   "predecessor": "u0"})  # a sibling branch
    status = homes.cli().json("memory", "status")
    blocked = branch(status, "a1")["blocked"]
    assert blocked["reason_code"] == "INVALID_TOPIC_FORMAT"
    assert "--writer embedded" in blocked["hint"]
    assert branch(status, "u1b")["blocked"] is None

    mem = homes.open(EmbeddedWriter())  # the fix: a writer that works
    mem.store.set_head("s", "a1")
    assert mem.write_session("s").failure is None
    assert branch(homes.cli().json("memory", "status"), "a1")["blocked"] is None
