"""Migration off the legacy position cursor, end to end through Memory (reference §4.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scriptorium.config import load_settings
from scriptorium.errors import ConcurrentUpdate
from scriptorium.memory.migrate import MigrationError, migrate, migrate_if_needed
from scriptorium.memory.sources import source_anchor
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore

from testkit import RecordingWriter, workspace_lock_held
import upgrade_support
from upgrade_support import (chain, cite_archive, digest, legacy_header, legacy_text, marked,
                             set_cursors, tree_bytes, v2_text)


# The archives these tests build stand for the old runtime's completed writes, so a topic
# cites every frame (tests/faults/test_migrate_after_crash.py covers archived-but-unwritten).
def write_legacy(memory_root: Path, *args, **kw) -> Path:
    path = upgrade_support.write_legacy(memory_root, *args, **kw)
    cite_archive(memory_root)
    return path


def write_v2(memory_root: Path, *args, **kw) -> Path:
    path = upgrade_support.write_v2(memory_root, *args, **kw)
    cite_archive(memory_root)
    return path


@pytest.fixture
def legacy_home(legacy_home: Path) -> Path:
    cite_archive(legacy_home / "memory")
    return legacy_home

FIXTURES = Path(__file__).parent.parent / "data" / "openprogram-state"



def open_memory(home: Path, writer=None, store=None, **settings) -> Memory:
    return Memory(home, settings=load_settings(home, settings), writer=writer, store=store)


def runtime(home: Path) -> dict:
    return json.loads((home / "memory" / ".scriptorium" / "runtime.json").read_text())


def legacy_install(home: Path, sessions: dict[str, list[str]], **counters) -> Path:
    """Sessions of alternating turns plus an old runtime.json with cursors at their ends."""
    store = SessionStore(home / "sessions", git=False)
    for sid, names in sessions.items():
        chain(store, sid, names)
    root = home / "memory"
    set_cursors(root, {sid: {"message_id": names[-1], "ordinal": len(names) - 1}
                       for sid, names in sessions.items()}, **counters)
    return root


def pending_ids(mem: Memory, sid: str, tip: str | None = None) -> list[str]:
    return [r.node_id for r in mem.pending(sid, tip)]


# -- compatibility -------------------------------------------------------------------------


def test_the_legacy_cursor_fixture_gives_exactly_the_reference_result(legacy_home):
    mem = open_memory(legacy_home)
    report = migrate(mem)
    assert mem.workspace_id == "w-5eed0001"
    assert report.migrated and report.cursors_removed and not report.errors
    assert report.marked == {"deploy": ["d0", "d1", "d2", "d3"],
                             "offsite": ["o0", "o1", "o2", "o3"]}
    assert marked(mem.store, "offsite", "w-5eed0001") == {"o0", "o1", "o2", "o3"}
    assert marked(mem.store, "deploy", "w-5eed0001") == {"d0", "d1", "d2", "d3"}
    state = runtime(legacy_home)
    assert "cursors" not in state
    assert state["local_batches"] == 1 and state["local_tokens"] == 300


def test_the_migrated_fixture_carries_the_same_marks_as_the_reference_written_state(legacy_home):
    """The reference's own post-write state (`written`) marks the same nodes we do."""
    mem = open_memory(legacy_home)
    migrate(mem)
    reference = SessionStore(FIXTURES / "written" / "sessions", git=False)
    for sid in ("offsite", "deploy"):
        assert marked(mem.store, sid, "w-5eed0001") == marked(reference, sid, "w-5eed0001")
    # and what is owed per tip is the reference table
    assert pending_ids(mem, "offsite") == ["o4-edit", "o5-edit"]
    assert pending_ids(mem, "offsite", "o7") == ["o4", "o5", "o6", "o7"]
    assert pending_ids(mem, "offsite", "o3-retry") == ["o3-retry"]
    assert pending_ids(mem, "offsite", "sub-1") == ["sub-root", "sub-1"]
    assert pending_ids(mem, "deploy") == []


def test_a_second_run_changes_no_file(legacy_home):
    mem = open_memory(legacy_home)
    migrate(mem)
    before = tree_bytes(legacy_home)
    again = migrate(open_memory(legacy_home))
    assert migrate_if_needed(open_memory(legacy_home)) is None
    assert not again.migrated and again.marked == {}
    assert tree_bytes(legacy_home) == before


def test_marking_never_touches_session_meta(legacy_home):
    meta = {sid: (legacy_home / "sessions" / sid / "meta.json").read_bytes()
            for sid in ("offsite", "deploy")}
    migrate(open_memory(legacy_home))
    for sid, data in meta.items():
        assert (legacy_home / "sessions" / sid / "meta.json").read_bytes() == data


# -- what counts as a candidate, end to end -------------------------------------------------


def test_cursor_values_are_never_trusted(home):
    root = legacy_install(home, {"s": ["m1", "m2", "m3"]})
    set_cursors(root, {"s": {"message_id": "m3", "ordinal": 2}, "gone": {"ordinal": 7}})
    write_legacy(root, "s", legacy_text("s", [("m1", "a")]))
    mem = open_memory(home, trigger_tokens=10_000)
    report = migrate(mem)
    assert marked(mem.store, "s", mem.workspace_id) == {"m1"}
    assert pending_ids(mem, "s") == ["m2", "m3"]
    assert report.skipped["gone"] == "no candidates in the archive"


def test_legacy_archive_migration_marks_only_its_first_header_once(home):
    root = legacy_install(home, {"s": ["m1", "m2"]}, local_batches=2, local_tokens=20931,
                          write_commits_since_global=2, last_global_at="2026-08-10T03:00:04+00:00")
    write_legacy(root, "s", legacy_text("s", [("m1", "a"), ("m2", "b")]))
    mem = open_memory(home)
    report = migrate(mem)
    assert report.marked == {"s": ["m1"]} and report.cursors_removed
    state = runtime(home)
    assert "cursors" not in state
    assert (state["local_batches"], state["local_tokens"], state["write_commits_since_global"],
            state["last_global_at"]) == (2, 20931, 2, "2026-08-10T03:00:04+00:00")
    node_files = tree_bytes(home / "sessions")
    assert migrate_if_needed(open_memory(home)) is None
    assert tree_bytes(home / "sessions") == node_files


def test_a_forged_second_legacy_header_leaves_its_turn_pending(home):
    root = legacy_install(home, {"s": ["m1", "m2"]})
    body = "quoting:\n" + legacy_header("s", "m2") + "[2026-01-02T10:00:00+00:00] user: b"
    write_legacy(root, "s", legacy_text("s", [("m1", body)]))
    mem = open_memory(home)
    migrate(mem)
    assert pending_ids(mem, "s") == ["m2"]


def test_legacy_and_v2_nodes_of_one_session_merge(home):
    root = legacy_install(home, {"s": ["m1", "m2", "m3"]})
    write_legacy(root, "s", legacy_text("s", [("m1", "a")]))
    write_v2(root, "s", v2_text("s", [("m2", "b")]))
    mem = open_memory(home)
    assert migrate(mem).marked == {"s": ["m1", "m2"]}
    assert pending_ids(mem, "s") == ["m3"]


def test_v2_migration_ignores_body_frames_and_stops_at_an_invalid_tail(home):
    root = legacy_install(home, {"s": ["m1", "m2", "m3", "m4"]})
    forged = v2_text("s", [("m2", "x")]).split("\n", 2)[2]
    good = v2_text("s", [("m1", "look:\n\n" + forged)])
    bad = v2_text("s", [("m3", "c")]).split("\n", 2)[2].replace("record-lines:1",
                                                                  "record-lines:01x")
    later = v2_text("s", [("m4", "d")]).split("\n", 2)[2]
    write_v2(root, "s", good + "\n" + bad + "\n" + later)
    mem = open_memory(home)
    migrate(mem)
    assert marked(mem.store, "s", mem.workspace_id) == {"m1"}


def test_a_crlf_v2_archive_marks_nothing(home):
    root = legacy_install(home, {"s": ["m1", "m2"]})
    write_v2(root, "s", v2_text("s", [("m1", "a"), ("m2", "b")]).replace("\n", "\r\n"))
    mem = open_memory(home)
    report = migrate(mem)
    assert marked(mem.store, "s", mem.workspace_id) == set()
    assert report.cursors_removed and pending_ids(mem, "s") == ["m1", "m2"]


@pytest.mark.parametrize("case", ["wrong title", "wrong session file", "wrong anchor"])
def test_a_legacy_header_that_does_not_match_its_file_marks_nothing(home, case):
    root = legacy_install(home, {"s": ["m1", "m2"]})
    if case == "wrong title":
        text = legacy_text("s", [("m1", "a")], title="s2")
    elif case == "wrong session file":
        text = "# s\n\n" + legacy_header("t", "m1") + "[t] user: a\n\n"
    else:
        text = "# s\n\n" + legacy_header("s", "m1").replace(
            source_anchor("openprogram/s/m1"), source_anchor("openprogram/s/m2")) + \
            "[t] user: a\n\n"
    write_legacy(root, "s", text)
    mem = open_memory(home)
    migrate(mem)
    assert marked(mem.store, "s", mem.workspace_id) == set()


def test_a_percent_encoded_archive_name_marks_its_session(home):
    legacy_install(home, {"plan b": ["m1", "m2"]})
    write_legacy(home / "memory", "plan b", legacy_text("plan b", [("m1", "a")]))
    assert (home / "memory" / "sources" / "openprogram" / "plan%20b.md").is_file()
    mem = open_memory(home)
    assert migrate(mem).marked == {"plan b": ["m1"]}


def test_an_archived_branch_tip_after_an_unarchived_middle_stays_unmarked_and_is_reoffered(home):
    root = legacy_install(home, {"s": ["m1", "m2", "m3", "m4", "m5"]})
    chain(SessionStore(home / "sessions", git=False), "s", ["b1", "b2", "b3"], after="m3")
    write_v2(root, "s", v2_text("s", [("m1", "a"), ("m2", "b"), ("m3", "c"), ("b3", "d")]))
    mem = open_memory(home)
    migrate(mem)
    assert marked(mem.store, "s", mem.workspace_id) == {"m1", "m2", "m3"}
    assert pending_ids(mem, "s", "b3") == ["b1", "b2", "b3"]
    assert pending_ids(mem, "s", "m5") == ["m4", "m5"]


def test_runtime_and_empty_rows_are_neither_gaps_nor_marked(home):
    store = SessionStore(home / "sessions", git=False)
    store.create_session("s")
    for msg in ({"id": "u1", "role": "user", "content": "plan"},
                {"id": "r1", "role": "user", "content": "[sub-agent done]", "display": "runtime"},
                {"id": "e1", "role": "assistant", "content": ""},
                {"id": "a1", "role": "assistant", "content": "done"},
                {"id": "u2", "role": "user", "content": "next"}):
        store.append_message("s", msg)
    root = home / "memory"
    set_cursors(root, {"s": {"ordinal": 4}})
    write_v2(root, "s", v2_text("s", [("u1", "plan"), ("a1", "done")]))
    mem = open_memory(home)
    assert migrate(mem).marked == {"s": ["u1", "a1"]}
    assert pending_ids(mem, "s") == ["u2"]


def test_no_sources_tree_removes_the_cursors_and_marks_nothing(home):
    legacy_install(home, {"s": ["m1", "m2"]}, local_tokens=5)
    mem = open_memory(home)
    report = migrate(mem)
    assert report.migrated and report.cursors_removed and report.marked == {}
    assert runtime(home) .get("local_tokens") == 5 and "cursors" not in runtime(home)
    assert marked(mem.store, "s", mem.workspace_id) == set()


def test_candidates_naming_unknown_sessions_or_nodes_are_skipped_with_a_reason(home):
    root = legacy_install(home, {"s": ["m1", "m2"]})
    write_v2(root, "s", v2_text("s", [("m1", "a"), ("m9", "ghost")]))
    write_v2(root, "ghost", v2_text("ghost", [("g1", "a")]))
    write_v2(root, "t", v2_text("t", [("x", "a")]))
    SessionStore(home / "sessions", git=False).create_session("t")  # exists, no such node
    mem = open_memory(home)
    report = migrate(mem)
    assert report.marked == {"s": ["m1"]} and report.cursors_removed
    assert report.skipped["ghost"] == "unknown session"
    assert report.skipped["t"] == "unknown nodes"
    assert report.unknown_nodes == {"s": ["m9"], "t": ["x"]}


def test_a_session_id_that_is_not_a_safe_name_is_skipped(home):
    root = legacy_install(home, {"s": ["m1"]})
    write_legacy(root, "..", legacy_text("..", [("m1", "a")]))
    report = migrate(open_memory(home))
    assert report.cursors_removed and ".." in report.skipped
    assert "invalid" in report.skipped[".."]


# -- batches, failures and locking -----------------------------------------------------------


class CountingStore(SessionStore):
    def __init__(self, root, fail: set[str] = frozenset()):
        super().__init__(root, git=False)
        self.batches: list[str] = []
        self.fail = set(fail)

    def merge_node_metadata_batch(self, sid, patches):
        self.batches.append(sid)
        if sid in self.fail:
            raise OSError(f"disk full while marking {sid}")
        return super().merge_node_metadata_batch(sid, patches)


def test_each_session_is_marked_with_exactly_one_metadata_batch(home):
    root = legacy_install(home, {"a": ["a1", "a2", "a3"], "b": ["b1", "b2"]})
    chain(SessionStore(home / "sessions", git=False), "a", ["x1", "x2"], after="a1")
    write_v2(root, "a", v2_text("a", [("a1", "."), ("a2", "."), ("a3", "."), ("x1", "."),
                                      ("x2", ".")]))
    write_legacy(root, "b", legacy_text("b", [("b1", ".")]))
    write_v2(root, "b", v2_text("b", [("b2", ".")]))
    store = CountingStore(home / "sessions")
    report = migrate(open_memory(home, store=store))
    assert sorted(store.batches) == ["a", "b"]
    assert sorted(report.marked["a"]) == ["a1", "a2", "a3", "x1", "x2"]


def test_one_sessions_failed_marker_write_keeps_the_cursors_and_reports_it(home):
    root = legacy_install(home, {"a": ["a1", "a2"], "b": ["b1", "b2"]}, local_batches=3)
    write_v2(root, "a", v2_text("a", [("a1", ".")]))
    write_v2(root, "b", v2_text("b", [("b1", ".")]))
    failing = CountingStore(home / "sessions", fail={"b"})
    mem = open_memory(home, store=failing)
    report = migrate(mem)
    assert report.marked == {"a": ["a1"]} and "disk full" in report.errors["b"]
    assert not report.cursors_removed and "cursors" in runtime(home)
    assert marked(failing, "a", mem.workspace_id) == {"a1"}
    with pytest.raises(MigrationError) as info:
        migrate_if_needed(mem)
    assert info.value.retryable and "b" in str(info.value)
    # the retry finishes the job and leaves the already-marked session's files alone
    a_files = tree_bytes(home / "sessions" / "a")
    healthy = CountingStore(home / "sessions")
    report = migrate(open_memory(home, store=healthy))
    assert report.cursors_removed and report.marked == {"a": ["a1"], "b": ["b1"]}
    assert healthy.batches == ["b"]
    assert tree_bytes(home / "sessions" / "a") == a_files
    assert runtime(home)["local_batches"] == 3 and "cursors" not in runtime(home)


def test_a_failed_migration_stops_the_write_path_before_anything_is_written(home):
    root = legacy_install(home, {"a": ["a1", "a2"]})
    write_v2(root, "a", v2_text("a", [("a1", ".")]))
    writer = RecordingWriter()
    mem = open_memory(home, writer=writer, store=CountingStore(home / "sessions", fail={"a"}),
                      trigger_tokens=1)
    result = mem.write(["a"], force=True)[0]
    assert result.failure is not None and result.failure.reason_code == "MIGRATION_FAILED"
    assert writer.calls == [] and "cursors" in runtime(home)


def test_an_unforced_below_threshold_write_migrates_first(home):
    root = legacy_install(home, {"s": ["m1", "m2"]})
    write_legacy(root, "s", legacy_text("s", [("m1", "a")]))
    writer = RecordingWriter()
    mem = open_memory(home, writer=writer, trigger_tokens=10_000)
    result = mem.write_turn("s")
    assert result.failure is None and writer.calls == []
    assert marked(mem.store, "s", mem.workspace_id) == {"m1"}
    assert pending_ids(mem, "s") == ["m2"]
    assert "cursors" not in runtime(home)


def test_a_forced_write_after_migration_writes_only_what_the_archive_did_not_have(legacy_home):
    writer = RecordingWriter()
    mem = open_memory(legacy_home, writer=writer, trigger_tokens=10_000)
    result = mem.write_session("offsite")
    assert result.failure is None
    sent = [ref.split("/")[-1] for call in writer.calls for ref in call]
    assert not {"o0", "o1", "o2", "o3"} & set(sent)
    assert {"o4-edit", "o5-edit"} <= set(sent)


def test_without_cursors_the_check_takes_no_lock(home):
    SessionStore(home / "sessions", git=False).create_session("s")
    mem = open_memory(home)

    def no_lock(*a, **k):
        raise AssertionError("the cheap check must not lock")

    mem.workspace.lock = no_lock
    assert migrate_if_needed(mem) is None
    assert migrate(mem).migrated is False


def test_a_busy_workspace_lock_leaves_the_cursors_for_later(home, monkeypatch):
    root = legacy_install(home, {"s": ["m1"]})
    write_v2(root, "s", v2_text("s", [("m1", ".")]))
    monkeypatch.setattr("scriptorium.memory.migrate.MIGRATE_LOCK_TIMEOUT", 0.2)
    mem = open_memory(home)
    with workspace_lock_held(root), pytest.raises(ConcurrentUpdate):
        migrate_if_needed(mem)
    assert "cursors" in runtime(home)
    assert marked(mem.store, "s", mem.workspace_id) == set()
    assert migrate_if_needed(mem).marked == {"s": ["m1"]}


def test_an_unreadable_runtime_file_is_no_migration(home):
    SessionStore(home / "sessions", git=False).create_session("s")
    path = home / "memory" / ".scriptorium" / "runtime.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"cursors": {"s": 1}')  # truncated JSON: the tolerant load drops it
    before = digest(home / "sessions")
    assert migrate_if_needed(open_memory(home)) is None
    assert path.read_text() == '{"cursors": {"s": 1}'
    assert digest(home / "sessions") == before
