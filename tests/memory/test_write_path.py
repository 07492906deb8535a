"""The written mark end to end: every branch written once, only what was written is marked
(on both kinds of home, except where a directory home's own files are the subject)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from scriptorium.config import load_settings
from scriptorium.errors import ConcurrentUpdate
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore
from pgmemkit import Homes
from testkit import IdleWriter, RaisingWriter, RecordingWriter, RejectedWriter




def open_memory(home: Path | Homes, writer=None, **settings) -> Memory:
    """Memory on either kind of home (``Homes``), or on a home directory (for the tests that
    look at its files)."""
    if isinstance(home, Homes):
        return home.open(writer, **settings)
    return Memory(home, settings=load_settings(home, settings), writer=writer)


def topic_texts(mem: Memory) -> dict[str, str]:
    """Every topic as ``memory show`` returns it."""
    return {rel: mem.show(rel)["text"] for rel in mem.workspace.topic_paths()}


def chain(store: SessionStore, sid: str, names: list[str], after: str | None = None,
          words: int = 4) -> None:
    """Append alternating user/assistant turns named ``names`` after ``after`` (or the head)."""
    prev = after
    for i, name in enumerate(names):
        msg = {"id": name, "role": "user" if i % 2 == 0 else "assistant",
               "content": " ".join(f"{name}w{k}" for k in range(words))}
        if prev is not None:
            msg["predecessor"] = prev
        store.append_message(sid, msg)
        prev = name


def marked(store: SessionStore, sid: str, ws: str) -> set[str]:
    return {n.id for n in store.get_nodes(sid) if n.metadata.get(MARK_KEY) == ws}


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


# -- the scenarios of the written-marker note ------------------------------------------------


def test_a_branch_forked_at_m3_is_offered_in_full(homes):
    mem = open_memory(homes, trigger_tokens=10_000)
    mem.store.create_session("s")
    chain(mem.store, "s", [f"m{i}" for i in range(10)])
    assert not mem.write_session("s").failure
    assert marked(mem.store, "s", mem.workspace_id) == {f"m{i}" for i in range(10)}
    chain(mem.store, "s", [f"b{i}" for i in range(5)], after="m3")
    chain(mem.store, "s", [f"c{i}" for i in range(11)], after="m3")
    assert [r.node_id for r in mem.pending("s", "b4")] == [f"b{i}" for i in range(5)]
    assert [r.node_id for r in mem.pending("s", "c10")] == [f"c{i}" for i in range(11)]


def test_after_a_forced_write_every_live_branch_is_marked_and_shared_turns_went_once(homes):
    writer = RecordingWriter()
    mem = open_memory(homes, writer, trigger_tokens=1)
    mem.store.create_session("s", title="Planning")
    chain(mem.store, "s", [f"m{i}" for i in range(6)])
    mem.store.retry("s", "m5", "a different answer", node_id="r5")
    mem.store.edit("s", "m2", "an edited question", node_id="e2")
    chain(mem.store, "s", ["e3", "e4"], after="e2")
    mem.store.spawn("s", "m3", "a sub agent task", node_id="sub0")
    chain(mem.store, "s", ["sub1"], after="sub0")
    result = mem.write_session("s")
    assert result.failure is None
    assert len(writer.seen) == len(set(writer.seen)), "a shared turn reached the writer twice"
    for row in mem.store.list_branches("s"):
        assert mem.pending("s", row["tip"]) == []
        for rec in mem.branch_records("s", row["tip"]):
            assert rec.mark == mem.workspace_id
    eligible = {f"openprogram/s/{n}" for n in
                ["m0", "m1", "m2", "m3", "m4", "m5", "r5", "e2", "e3", "e4", "sub0", "sub1"]}
    assert set(writer.seen) == eligible


def test_only_the_oldest_batch_is_marked(homes):
    writer = RecordingWriter()
    mem = open_memory(homes, writer, trigger_tokens=8)
    mem.store.create_session("s")
    chain(mem.store, "s", ["m0", "m1", "m2", "m3"], words=4)  # 4 tokens each
    result = mem.write_turn("s")
    assert result.marked == ["m0", "m1"] and len(writer.calls) == 1
    assert marked(mem.store, "s", mem.workspace_id) == {"m0", "m1"}


def test_a_forced_write_takes_the_head_first_and_under_the_threshold_policy_a_short_branch_waits(homes):
    writer = RecordingWriter()
    mem = open_memory(homes, writer, trigger_tokens=10, side_branches="threshold")
    mem.store.create_session("s")
    chain(mem.store, "s", ["m0", "m1"], words=2)
    chain(mem.store, "s", ["long0", "long1"], after="m1", words=10)  # 20 tokens
    chain(mem.store, "s", ["short0"], after="m1", words=1)  # 1 token: a retry
    mem.store.set_head("s", "m1")
    chain(mem.store, "s", ["h2"], after="m1", words=1)
    result = mem.write_session("s")
    assert result.failure is None
    assert result.steps[0].tip == "h2"
    assert writer.calls[0] == ["openprogram/s/m0", "openprogram/s/m1", "openprogram/s/h2"]
    assert {"long0", "long1"} <= marked(mem.store, "s", mem.workspace_id)
    assert [r.node_id for r in mem.pending("s", "short0")] == ["short0"]


def test_the_per_turn_path_waits_below_the_threshold_and_writes_after_the_idle_allowance(homes):
    writer = RecordingWriter()
    now = [0.0]
    mem = homes.open(writer, clock=lambda: now[0], trigger_tokens=1000)
    mem.store.create_session("s")
    chain(mem.store, "s", ["m0", "m1"])
    newest = max(n.created_at for n in mem.store.get_nodes("s"))
    now[0] = newest + 60
    result = mem.write_turn("s")
    assert result.steps == [] and result.failure is None and writer.calls == []
    now[0] = newest + 3601
    assert mem.write_turn("s").marked == ["m0", "m1"]


def test_runtime_turns_and_tool_rows_are_stepped_over(written_home):
    mem = open_memory(written_home)
    assert mem.workspace_id == "w-5eed0001"
    assert [r.node_id for r in mem.pending("offsite")] == ["o4-edit", "o5-edit"]


def test_the_reference_fixture_owes_what_the_reference_computes(written_home):
    mem = open_memory(written_home)
    expected = {"o7-empty": ["o4-edit", "o5-edit"], "sub-1": ["sub-root", "sub-1"],
                "o3-retry": ["o3-retry"], "o7": ["o4", "o5", "o6", "o7"]}
    got = {row["tip"]: [r.node_id for r in mem.pending("offsite", row["tip"])]
           for row in mem.store.list_branches("offsite")}
    assert got == expected
    assert mem.pending("deploy") == []


def test_a_session_copied_into_another_home_is_written_from_the_start(written_home, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(written_home / "sessions", other / "sessions")
    mem = open_memory(other)
    assert mem.workspace_id != "w-5eed0001"
    assert [r.node_id for r in mem.pending("deploy")] == ["d0", "d1", "d2", "d3"]


def test_a_restored_backup_keeps_its_marks(written_home, tmp_path):
    restored = tmp_path / "restored"
    shutil.copytree(written_home, restored)
    mem = open_memory(restored)
    assert mem.workspace_id == "w-5eed0001" and mem.pending("deploy") == []


# -- what gets marked, and when -------------------------------------------------------------


@pytest.mark.parametrize("writer, code, retryable", [
    (RaisingWriter(RuntimeError("model crashed")), "WRITER_FAILURE_UNKNOWN", False),
    (RaisingWriter(ValueError("bad precondition")), "WRITER_PRECONDITION_FAILED", False),
    (RejectedWriter(), "INVALID_TOPIC_FORMAT", False),
    (IdleWriter(), "WRITER_NO_PROGRESS", False),
])
def test_a_failed_rejected_or_unchanged_batch_marks_nothing(homes, writer, code, retryable):
    mem = open_memory(homes, writer, trigger_tokens=1)
    mem.store.create_session("s")
    chain(mem.store, "s", ["m0", "m1"])
    result = mem.write_session("s")
    assert result.failure is not None
    assert (result.failure.reason_code, result.failure.retryable) == (code, retryable)
    assert marked(mem.store, "s", mem.workspace_id) == set()
    assert mem.workspace.topic_paths() == []
    # The evidence was archived first (replayable, harmless); only the mark is withheld.
    assert mem.workspace.sources.lookup("openprogram/s/m0") is not None
    again = homes.open()  # another process sees the same pending work and the same block
    (branch,) = again.status(["s"])["sessions"][0]["branches"]
    assert branch["pending_ids"] == ["m0", "m1"]
    assert branch["blocked"]["reason_code"] == code


def test_marks_never_move_updated_at(home):
    mem = open_memory(home, trigger_tokens=1)
    mem.store.create_session("s")
    chain(mem.store, "s", ["m0", "m1"])
    before = mem.store.get_meta("s")
    meta_bytes = (home / "sessions" / "s" / "meta.json").read_bytes()
    assert mem.write_session("s").marked == ["m0", "m1"]
    assert mem.store.get_meta("s")["updated_at"] == before["updated_at"]
    assert (home / "sessions" / "s" / "meta.json").read_bytes() == meta_bytes


def test_a_busy_workspace_is_a_retryable_concurrent_update_on_the_per_turn_call(home):
    from scriptorium.fsutil import FileLock

    mem = open_memory(home, trigger_tokens=1)
    mem.store.create_session("s")
    chain(mem.store, "s", ["m0"])
    assert mem.workspace_id  # the identity exists before another writer takes the lock
    holder = FileLock(home / "memory" / ".scriptorium" / "write.lock")
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    from test_foundation import _hold_lock

    proc = ctx.Process(target=_hold_lock, args=(str(holder.path), ready, release))
    proc.start()
    try:
        assert ready.wait(20)
        result = mem.write_turn("s")
    finally:
        release.set()
        proc.join(10)
    assert result.failure.reason_code == ConcurrentUpdate.code and result.failure.retryable
    assert marked(mem.store, "s", mem.workspace_id) == set()


def test_a_redo_after_a_crash_between_install_and_mark_marks_without_writing_twice(homes):
    mem = open_memory(homes, trigger_tokens=10_000)  # both turns in one batch
    mem.store.create_session("s", title="Deploys")
    chain(mem.store, "s", ["m0", "m1"])
    real_merge = mem.store.merge_node_metadata_batch

    def crash(*_a, **_k):
        raise OSError("killed before the mark")

    mem.store.merge_node_metadata_batch = crash
    assert mem.write_session("s").failure is not None
    before = topic_texts(mem)
    assert before and marked(mem.store, "s", mem.workspace_id) == set()
    mem.store.merge_node_metadata_batch = real_merge
    result = homes.open(trigger_tokens=10_000).write_session("s")  # the redo, as a new process
    assert result.failure is None and result.marked == ["m0", "m1"]
    assert topic_texts(mem) == before  # nothing written twice


def test_the_embedded_writer_output_passes_strict_validation(homes):
    from scriptorium.memory.topics import parse_topic

    mem = open_memory(homes, trigger_tokens=1)
    mem.store.create_session("s", title="Offsite")
    chain(mem.store, "s", ["m0", "m1", "m2", "m3"])
    assert mem.write_session("s").failure is None
    for rel, text in topic_texts(mem).items():
        doc = parse_topic(text, rel, strict=True)
        assert doc.blocks and all(b.citations for b in doc.blocks)


def test_writing_an_already_written_batch_again_adds_nothing(homes):
    mem = open_memory(homes, trigger_tokens=1)
    mem.store.create_session("s", title="Offsite")
    chain(mem.store, "s", ["m0", "m1"])
    mem.write_session("s")
    revision = mem.workspace.revision()
    batch = mem.branch_records("s")
    step = mem.write_batch("s", batch)
    assert step.failure is None and step.changed_files == []
    assert mem.workspace.revision() == revision
    assert homes.open().status()["revision"] == revision


def test_memory_status_reports_pending_per_branch_and_changes_no_file(written_home, tmp_path):
    from click.testing import CliRunner

    from scriptorium.cli import main

    open_memory(written_home)  # make sure the layout exists before we digest it
    digest = tree_digest(written_home)
    out = CliRunner().invoke(main, ["--home", str(written_home), "memory", "status", "offsite",
                                    "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["workspace_id"] == "w-5eed0001" and data["revision"]
    (session,) = data["sessions"]
    rows = {b["tip"]: b for b in session["branches"]}
    assert rows["o7-empty"]["head"] is True
    assert rows["o7-empty"]["pending_ids"] == ["o4-edit", "o5-edit"]
    assert rows["o7"]["pending_turns"] == 4 and rows["o7"]["pending_tokens"] > 0
    assert tree_digest(written_home) == digest


def test_a_write_updates_the_search_index_inside_the_install(home):
    from scriptorium.memory.search import search
    from scriptorium.memory.search.index import SearchIndex

    mem = open_memory(home, trigger_tokens=1)
    mem.store.create_session("s", title="Deploys")
    mem.store.append_message("s", {"id": "m0", "role": "user",
                                   "content": "Deploys happen on Tuesdays after 14:00 UTC."})
    search(mem.workspace, "anything")  # the index exists before the write
    assert mem.write_session("s").marked == ["m0"]
    index = SearchIndex.of(mem.workspace)
    assert not index.is_stale(), "the install hook should have indexed the new topic"
    (hit,) = search(mem.workspace, "Tuesdays deploys", top_k=1)
    assert hit.sources == ["openprogram/s/m0"]


def test_an_untitled_conversation_keeps_one_topic_across_its_batches(homes):
    mem = open_memory(homes, trigger_tokens=8)
    mem.store.create_session("s")  # no title
    turns = ["Production runs PostgreSQL behind pgbouncer on port 6432.",
             "Recorded the database setup.",
             "Backups run nightly at two in the morning.",
             "Noted the backup schedule.",
             "The staging cluster mirrors production weekly.",
             "Staging refresh noted."]
    for i, text in enumerate(turns):
        mem.store.append_message("s", {"id": f"m{i}", "role": "user" if i % 2 == 0
                                       else "assistant", "content": text})
    result = mem.write_session("s")
    assert result.failure is None and len(result.steps) >= 3
    files = mem.workspace.topic_paths()
    assert files == ["topics/production-postgresql.md"], files
