"""Migration marks only what a topic cites: a turn archived by a write that was SIGKILLed before
its transaction installed is evidence without memory, and marking it would hide it for good.

A real writer process is killed at a named step between archive and install; then the
workspace gets legacy position cursors back (an old runtime still pointed at it, or an old
runtime.json restored) and its marks are gone, as in a position-cursor installation. Migration
must mark the turns topics cite and leave the archived-but-unwritten ones pending; the next
write then takes them in, and every turn ends marked and cited.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))

from faultkit import run_worker  # noqa: E402
from scriptorium.config import load_settings  # noqa: E402
from scriptorium.memory.citations import cited_sources  # noqa: E402
from scriptorium.memory.migrate import migrate  # noqa: E402
from scriptorium.memory.records import MARK_KEY  # noqa: E402
from scriptorium.memory.verify import verify  # noqa: E402
from scriptorium.memory.writers.embedded import EmbeddedWriter  # noqa: E402
from scriptorium.memory.writing import Memory  # noqa: E402
from upgrade_support import set_cursors  # noqa: E402


def memory(home: Path) -> Memory:
    return Memory(home, settings=load_settings(home, {"trigger_tokens": 40}),
                  writer=EmbeddedWriter())


def marked(mem: Memory) -> set[str]:
    return {n.id for n in mem.store.get_nodes("s")
            if n.metadata.get(MARK_KEY) == mem.workspace_id}


# Archived, writer not yet run; and an install prepared, then rolled back by the next open.
@pytest.mark.parametrize("step", ["after-archive", "prepared"])
def test_migration_does_not_mark_a_turn_whose_write_was_killed_before_install(home, step):
    mem = memory(home)
    mem.store.create_session("s", title="Trip")
    mem.store.append_message("s", {"id": "u1", "role": "user", "content": "Book Lisbon."})
    mem.store.append_message("s", {"id": "a1", "role": "assistant", "content": "Booked."})
    assert mem.write_session("s").failure is None
    mem.store.append_message("s", {"id": "u2", "role": "user", "content": "And Porto too."})
    mem.store.append_message("s", {"id": "a2", "role": "assistant", "content": "Porto: ok."})

    run = run_worker(["write", str(home), "--mode", "session"], fault=step)
    assert run.killed
    mem = memory(home)  # opening finishes or rolls back what the kill left
    assert mem.workspace.sources.lookup("openprogram/s/u2") is not None  # archived …
    assert "openprogram/s/u2" not in cited_sources(mem.workspace)       # … never written

    mem.store.merge_node_metadata_batch("s", {n: {MARK_KEY: None} for n in marked(mem)})
    set_cursors(mem.workspace.root, {"s": {"message_id": "a2", "ordinal": 4}})
    report = migrate(memory(home))
    assert report.migrated and report.cursors_removed
    assert report.marked == {"s": ["u1", "a1"]}
    mem = memory(home)
    assert [r.node_id for r in mem.pending("s")] == ["u2", "a2"]

    assert mem.write_session("s").failure is None
    assert marked(mem) == {"u1", "a1", "u2", "a2"}
    assert {f"openprogram/s/{n}" for n in ("u1", "a1", "u2", "a2")} <= \
        cited_sources(mem.workspace)
    assert verify(mem).ok


def test_migration_of_an_archive_no_topic_cites_marks_nothing(home):
    """The archive alone proves nothing was written: every turn is offered again."""
    mem = memory(home)
    mem.store.create_session("s", title="Trip")
    mem.store.append_message("s", {"id": "u1", "role": "user", "content": "Book Lisbon."})
    from scriptorium.memory.writing import to_source_record

    with mem.workspace.lock():
        mem.workspace.sources.archive([to_source_record(r) for r in mem.branch_records("s")])
    set_cursors(mem.workspace.root, {"s": {"message_id": "u1", "ordinal": 1}})
    report = migrate(memory(home))
    assert report.marked == {}
    assert "s" in report.skipped
    assert json.dumps(report.to_dict())  # reportable as it is
