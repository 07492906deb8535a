"""The head-move log: every head move, from any process, told to readers once, durably,
within a bounded size; a torn or lost line costs a reader one poll, never a move it trusts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scriptorium.errors import InvalidInput
from scriptorium.sessions import SessionStore
from scriptorium.sessions import events as events_mod
from scriptorium.sessions.events import HeadMoveLog


def _moves(store: SessionStore, after: int = 0) -> list[tuple[str, str | None, str | None]]:
    return [(m.session_id, m.old, m.new) for m in store.events.reader(after).poll()]


def test_every_kind_of_head_move_is_logged_as_subscribers_hear_it(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions", git=False)
    heard: list[tuple[str, str | None, str | None]] = []
    store.subscribe(lambda sid, old, new: heard.append((sid, old, new)))
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "Plan the offsite."})
    store.append_message("s", {"id": "a1", "role": "assistant", "content": "Lisbon, May."})
    store.retry("s", "a1", "Porto, May.", node_id="a1r")                 # retry
    store.edit("s", "u1", "Plan the offsite in June.", node_id="u1e")    # edit
    store.spawn("s", "u1e", "Find venues.", node_id="sub")               # sub-agent
    store.set_head("s", "a1")                                             # explicit move
    store.append_message("s", {"id": "u2", "role": "user", "content": "Budget 50k."})
    store.rewind("s", "a1")                                               # rewind
    store.compact("s", ["u1", "a1"], "Offsite in Lisbon in May.")         # compaction
    assert heard, "the store announces moves in process"
    assert _moves(store) == heard
    assert len({m.seq for m in store.events.reader().poll()}) == len(heard)


def test_moves_made_by_another_process_are_told_and_a_reader_resumes_where_it_stopped(
        tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = SessionStore(root, git=False)
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "First."})
    reader = store.events.reader()
    assert [m.new for m in reader.poll()] == ["u1"]
    assert reader.poll() == []  # nothing twice
    code = ("import sys; from scriptorium.sessions import SessionStore; "
            "s = SessionStore(sys.argv[1], git=False); "
            "s.append_message('s', {'id': 'a1', 'role': 'assistant', 'content': 'Reply.'}); "
            "s.append_message('s', {'id': 'u2', 'role': 'user', 'content': 'More.'})")
    subprocess.run([sys.executable, "-c", code, str(root)], check=True, timeout=120)
    got = reader.poll()
    assert [(m.old, m.new) for m in got] == [("u1", "a1"), ("a1", "u2")]
    resumed = HeadMoveLog(root).reader(after=got[0].seq)  # a reader that stopped after one
    assert [m.new for m in resumed.poll()] == ["u2"] and resumed.complete


def test_a_torn_last_line_is_skipped_and_fenced_off_by_the_next_append(tmp_path: Path) -> None:
    log = HeadMoveLog(tmp_path)
    log.append([("s", None, "a")], at=1.0)
    (_, segment), = log.segments()
    with segment.open("ab") as fh:
        fh.write(b'{"seq":2,"session_id":"s","ol')  # a writer killed mid-line
    reader = log.reader()
    assert [m.new for m in reader.poll()] == ["a"]
    log.append([("s", "a", "b")], at=2.0)
    assert [(m.seq, m.new) for m in reader.poll()] == [(2, "b")]
    assert reader.complete


def test_the_log_stays_bounded_and_a_reader_left_behind_knows_it_missed_moves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_mod, "SEGMENT_EVENTS", 5)
    monkeypatch.setattr(events_mod, "KEEP_SEGMENTS", 2)
    log = HeadMoveLog(tmp_path)
    behind = log.reader()
    assert behind.poll() == []
    for i in range(40):
        log.append([("s", str(i), str(i + 1))], at=float(i))
    assert len(log.segments()) == 2
    assert log.last_seq() == 40
    got = behind.poll()
    assert not behind.complete  # moves 1..30 were rotated away: the caller polls once
    assert [m.seq for m in got] == list(range(31, 41))
    fresh = log.reader(after=35)
    assert [m.seq for m in fresh.poll()] == [36, 37, 38, 39, 40] and fresh.complete


def test_a_log_that_cannot_be_written_never_fails_the_turn(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = SessionStore(root, git=False)
    store.create_session("s")
    (root / ".scriptorium").mkdir()
    (root / ".scriptorium" / "events").write_text("not a directory")
    store.append_message("s", {"id": "u1", "role": "user", "content": "Still stored."})
    assert store.head("s") == "u1"


def test_the_log_directory_is_not_a_session_and_its_name_is_refused(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions", git=False)
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "Hello."})
    assert [r["session_id"] for r in store.list_sessions()] == ["s"]
    with pytest.raises(InvalidInput, match="reserved"):
        store.create_session(".scriptorium")


def test_a_symlinked_log_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / ".scriptorium").mkdir()
    (tmp_path / ".scriptorium" / "events").symlink_to(target)
    with pytest.raises(InvalidInput, match="symlink"):
        HeadMoveLog(tmp_path).append([("s", None, "a")], at=1.0)
    assert list(target.iterdir()) == []
