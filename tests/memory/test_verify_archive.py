"""A damaged evidence archive is found by ``memory verify`` and ``--repair`` makes the session
writable again: the file is cut back to its valid prefix (the damaged bytes kept in the
workspace's runtime dir), evidence that topics cite or marks claim is archived again from the
session store, and the next write succeeds with every turn marked and cited.

Real sessions, real files, the real CLI for verify.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scriptorium.config import load_settings
from scriptorium.memory.citations import cited_sources
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.verify import verify
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory
from testkit import Cli

TURNS = [("u1", "user", "Book the Lisbon offsite."), ("a1", "assistant", "Booked for May."),
         ("u2", "user", "Twelve people travel."), ("a2", "assistant", "Noted: twelve.")]


def memory(home: Path) -> Memory:
    return Memory(home, settings=load_settings(home, {"trigger_tokens": 12}),
                  writer=EmbeddedWriter())


def written(home: Path) -> tuple[Memory, Path]:
    mem = memory(home)
    mem.store.create_session("s", title="Trip")
    for node, role, text in TURNS:
        mem.store.append_message("s", {"id": node, "role": role, "content": text})
    assert mem.write_session("s").failure is None
    frame = mem.workspace.sources.lookup("openprogram/s/u1")
    return mem, mem.workspace.root / frame.path


GARBAGE = b"<a id=\"source-0000\nnot a frame \xff\xfe\n"


def damage(path: Path, how: str) -> bytes:
    """Damage the archive file; return the bytes a repair must keep aside ('' for none)."""
    data = path.read_bytes()
    if how == "garbage appended":
        path.write_bytes(data + GARBAGE)
        return GARBAGE
    if how == "truncated mid-frame":
        path.write_bytes(data[:-25])
        return b""
    path.unlink()
    return b""


def every_turn_marked_and_cited(mem: Memory) -> None:
    nodes = {n.id: n for n in mem.store.get_nodes("s")}
    records = mem.branch_records("s")
    assert all(nodes[r.node_id].metadata.get(MARK_KEY) == mem.workspace_id for r in records)
    assert {r.source_id for r in records} <= cited_sources(mem.workspace)


@pytest.mark.parametrize("how", ["garbage appended", "truncated mid-frame", "deleted"])
def test_a_damaged_archive_is_reported_and_repair_makes_the_session_writable(home, how):
    mem, path = written(home)
    kept_aside = damage(path, how)
    mem.store.append_message("s", {"id": "u3", "role": "user", "content": "Add Porto too."})
    blocked = memory(home).write_session("s")
    assert blocked.failure is not None
    assert blocked.failure.reason_code in ("SOURCE_ARCHIVE_INVALID", "MISSING_SOURCE")

    cli = Cli(home)
    check = cli("memory", "verify", "--json")
    assert check.exit_code == 1
    kinds = {p["kind"] for p in __import__("json").loads(check.stdout)["problems"]}
    assert kinds & {"archive_invalid", "source_missing"}

    repaired = cli.json("memory", "verify", "--repair")
    assert repaired["ok"] is True, repaired["problems"]
    if kept_aside:
        backups = [p for p in (mem.workspace.runtime_dir / "damaged-sources").rglob("*")
                   if p.is_file()]
        assert len(backups) == 1 and backups[0].read_bytes().endswith(kept_aside)

    after = memory(home)
    result = after.write_session("s")
    assert result.failure is None, result.failure
    every_turn_marked_and_cited(after)
    final = verify(after)
    assert final.ok and not final.kinds("marked_not_cited"), final.problems


def test_verify_without_repair_reports_a_damaged_archive_and_changes_nothing(home):
    mem, path = written(home)
    damage(path, "garbage appended")
    before = path.read_bytes()
    report = verify(memory(home))
    (problem,) = report.kinds("archive_invalid")
    assert problem.extra["path"] == "sources/openprogram/_v2/s.md"
    # the last frame ends at the end of the file: bytes glued to it leave it without its end
    assert problem.extra["valid_frames"] == 3
    assert path.read_bytes() == before
    assert not (mem.workspace.runtime_dir / "damaged-sources").exists()
