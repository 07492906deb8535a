"""Re-running an import adds only what is new, never duplicates or rewrites a node, and is
cheap when nothing changed; bad lines and bad files are reported and the rest goes on."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cckit import SESSION, Transcript
from importkit import forget, memory_of, node_versions
from scriptorium.importers import import_sources
from scriptorium.memory.records import MARK_KEY
from testkit import RecordingWriter

SID = f"cc-{SESSION}"


def _cc(store, home, *paths):
    return import_sources(store, home, "claude-code", list(paths))


def test_a_grown_transcript_adds_only_the_new_lines_and_rewrites_nothing(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "First question")
    t.assistant("a1", "u1", "First answer.")
    path = t.write()
    assert _cc(store, home, path).files[0].nodes_added == 2
    before = node_versions(store, SID)
    t.user("u2", "a1", "Second question")
    t.assistant("a2", "u2", "Second answer.")
    t.write()
    report = _cc(store, home, path).files[0]
    assert (report.nodes_added, report.sessions_updated, report.sessions_created) == (2, 1, 0)
    after = node_versions(store, SID)
    assert {k: v for k, v in after.items() if k in before} == before  # untouched
    assert len(after) == 4
    assert store.head(SID) == "a2"


def test_an_unchanged_rerun_adds_nothing_and_reads_no_file(store, home, tmp_path, monkeypatch):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "Hi")
    t.assistant("a1", "u1", "Hello.")
    path = t.write()
    _cc(store, home, path)
    before = node_versions(store, SID)
    opened: list[str] = []
    real_open = open

    def spy(file, *a, **kw):
        opened.append(str(file))
        return real_open(file, *a, **kw)

    monkeypatch.setattr("builtins.open", spy)
    report = _cc(store, home, path).files[0]
    assert report.unchanged and report.nodes_added == 0
    assert str(path) not in opened
    assert node_versions(store, SID) == before


def test_a_truncated_last_line_waits_for_the_next_run(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "Hi")
    path = t.write()
    t.assistant("a1", "u1", "A reply being written right now.")
    whole = json.dumps(t.lines[0]) + "\n"
    t.lines = []
    with open(path, "a") as fh:
        fh.write(whole[:25])  # half a line: the writer has not finished it
    first = _cc(store, home, path).files[0]
    assert first.nodes_added == 1 and first.skipped["incomplete_last_line"] == 1
    assert first.errors == []
    with open(path, "a") as fh:
        fh.write(whole[25:])
    second = _cc(store, home, path).files[0]
    assert second.nodes_added == 1 and second.errors == []
    assert store.get_node(SID, "a1").output == "A reply being written right now."


def test_a_malformed_line_is_reported_with_its_line_and_the_other_files_go_on(
        store, home, tmp_path):
    bad = tmp_path / "p" / "bad.jsonl"
    t = Transcript(bad)
    t.user("u1", None, "Hi")
    t.write()
    with open(bad, "a") as fh:
        fh.write("{not json\n")
    t.assistant("a1", "u1", "Still imported.")
    t.write()
    pretty = tmp_path / "p" / "pretty.jsonl"
    pretty.write_text(json.dumps({"type": "user", "uuid": "x"}, indent=2))
    good = Transcript(tmp_path / "p" / "good.jsonl", session="6e55f00d-0000-4000-8000-0000000000aa")
    good.user("g1", None, "Fine")
    good.write()
    reports = {Path(r.path).name: r for r in _cc(store, home, tmp_path / "p").files}
    assert reports["bad.jsonl"].errors == [f"{bad.resolve()}:2: not JSON (Expecting property "
                                           f"name enclosed in double quotes: line 1 column 2 "
                                           f"(char 1))"]
    assert reports["bad.jsonl"].nodes_added == 2
    assert "pretty.jsonl:1: not JSON Lines" in reports["pretty.jsonl"].errors[0]
    assert reports["pretty.jsonl"].nodes_added == 0
    assert reports["good.jsonl"].nodes_added == 1 and not reports["good.jsonl"].errors
    assert not store.exists("cc-pretty")


def test_marks_survive_a_reimport_from_scratch(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "Remember that the budget is 50k.")
    t.assistant("a1", "u1", "Noted: 50k.")
    path = t.write()
    _cc(store, home, path)
    mem = memory_of(store, home, RecordingWriter())
    assert mem.write_session(SID).marked == ["u1", "a1"]
    forget(store, home, "files")  # forget every offset: read it all again
    report = _cc(store, home, path).files[0]
    assert report.nodes_added == 0 and report.skipped["already_imported"] == 2
    assert store.get_node(SID, "u1").metadata[MARK_KEY] == mem.workspace_id
    assert mem.pending(SID) == []
    mem.close()


def test_lost_graph_state_is_rebuilt_without_duplicating_nodes(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "One")
    t.assistant("a1", "u1", "Two.")
    path = t.write()
    _cc(store, home, path)
    # a crash after the nodes were stored but before any bookkeeping was saved
    forget(store, home, "files", "pos", "preds", "kids", "names", "extra")
    t.user("u2", "a1", "Three")
    t.write()
    report = _cc(store, home, path).files[0]
    assert report.nodes_added == 1
    assert store.get_node(SID, "u2").predecessor == "a1"
    assert len(store.get_nodes(SID)) == 3


def _export(path: Path, conversations: list[dict]) -> Path:
    path.write_text(json.dumps(conversations))
    return path


def _conv(cid: str, update: float, pairs: list[tuple[str, str | None, str, str]]) -> dict:
    mapping = {"root": {"id": "root", "message": None, "parent": None, "children": []}}
    for n, (nid, parent, role, text) in enumerate(pairs):
        parent = parent or "root"
        mapping[nid] = {"id": nid, "parent": parent, "children": [], "message": {
            "id": nid, "author": {"role": role}, "create_time": 1700000000 + n,
            "content": {"content_type": "text", "parts": [text]}, "recipient": "all"}}
        mapping[parent]["children"].append(nid)
    return {"id": cid, "title": cid, "update_time": update, "mapping": mapping,
            "current_node": pairs[-1][0]}


def test_chatgpt_a_new_export_adds_only_the_new_conversation_and_the_new_turns(
        store, home, tmp_path):
    c1 = _conv("conv-A", 1.0, [("m1", None, "user", "Hi"), ("m2", "m1", "assistant", "Hello.")])
    first = _export(tmp_path / "export1.json", [c1])
    r1 = import_sources(store, home, "chatgpt", [first]).files[0]
    assert (r1.sessions_created, r1.nodes_added) == (1, 2)
    c1b = _conv("conv-A", 2.0, [("m1", None, "user", "Hi"), ("m2", "m1", "assistant", "Hello."),
                                ("m3", "m2", "user", "More?"), ("m4", "m3", "assistant", "Yes.")])
    c2 = _conv("conv-B", 1.0, [("n1", None, "user", "New topic")])
    second = _export(tmp_path / "export2.json", [c1b, c2])
    r2 = import_sources(store, home, "chatgpt", [second]).files[0]
    assert (r2.sessions_created, r2.sessions_updated, r2.nodes_added) == (1, 1, 3)
    assert store.head("chatgpt-conv-a") == "m4"
    r3 = import_sources(store, home, "chatgpt", [second]).files[0]
    assert r3.unchanged and r3.nodes_added == 0
    os.utime(second, ns=(1, 1))  # touched but not changed: conversations are skipped unread
    r4 = import_sources(store, home, "chatgpt", [second]).files[0]
    assert r4.nodes_added == 0 and r4.skipped["unchanged_conversation"] == 2
