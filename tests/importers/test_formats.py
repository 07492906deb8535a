"""pi, Codex and ChatGPT trees built by hand in their documented formats: in-file forks,
rewrites with new ids, backtracks, regenerations and edits, sub-agents."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from scriptorium.importers import import_sources


def _write(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _pi_msg(eid, parent, role, text, ts, **extra):
    content = [{"type": "text", "text": text}]
    msg = {"role": role, "content": content, "timestamp": ts}
    msg.update(extra)
    line = {"type": "message", "timestamp": f"2026-01-01T00:00:{ts % 60:02d}.000Z", "message": msg}
    if eid is not None:
        line.update(id=eid, parentId=parent)
    return line


PI_HEADER_V3 = {"type": "session", "version": 3, "id": "AbC-pi-1", "timestamp": "2026-01-01T00:00:00Z",
                "cwd": "/w"}


def test_pi_in_file_branch_is_a_fork_and_the_last_entry_is_the_head(store, home, tmp_path):
    path = _write(tmp_path / "s.jsonl", [
        PI_HEADER_V3,
        _pi_msg("aa000001", None, "user", "Plan", 1),
        _pi_msg("aa000002", "aa000001", "assistant", "Step one.", 2),
        _pi_msg("aa000003", "aa000002", "user", "Go on", 3),
        _pi_msg("aa000004", "aa000003", "assistant", "Step two.", 4),
        {"type": "branch_summary", "id": "aa000005", "parentId": "aa000002", "fromId": "aa000002",
         "summary": "Abandoned: step two.", "timestamp": "2026-01-01T00:00:05Z"},
        _pi_msg("aa000006", "aa000005", "user", "Different direction", 6),
        _pi_msg("aa000007", "aa000006", "assistant", "Step two, differently.", 7),
        {"type": "label", "id": "aa000008", "parentId": "aa000007", "targetId": "aa000002",
         "label": "checkpoint", "timestamp": "2026-01-01T00:00:08Z"},
    ])
    report = import_sources(store, home, "pi", [path]).files[0]
    sid = "pi-abc-pi-1"  # lowercased: never two ids that differ only by case
    assert report.sessions == [sid] and report.forks == 1
    assert store.get_node(sid, "aa000006").predecessor == "aa000002"
    assert store.get_node(sid, "aa000005").role == "code"  # the summary of the other branch
    assert store.head(sid) == "aa000007"
    assert [m["id"] for m in store.get_branch(sid)] == ["aa000001", "aa000002", "aa000006",
                                                         "aa000007"]


def test_pi_a_v1_file_rewritten_in_place_with_new_ids_adds_nothing_twice(store, home, tmp_path):
    v1 = [{"type": "session", "id": "pi-sess", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/w"},
          _pi_msg(None, None, "user", "Hello", 1),
          _pi_msg(None, None, "assistant", "Hi there.", 2)]
    path = _write(tmp_path / "s.jsonl", v1)
    first = import_sources(store, home, "pi", [path]).files[0]
    assert first.nodes_added == 2
    # pi opens it: migrates to v3, fresh random ids, the whole file rewritten; then appends
    v3 = [dict(v1[0], version=3),
          dict(v1[1], id="r1r1r1r1", parentId=None),
          dict(v1[2], id="r2r2r2r2", parentId="r1r1r1r1"),
          _pi_msg("r3r3r3r3", "r2r2r2r2", "user", "New question", 3)]
    _write(path, v3)
    second = import_sources(store, home, "pi", [path]).files[0]
    assert second.rewritten and second.nodes_added == 1
    assert second.skipped["already_imported"] == 2
    nodes = store.get_nodes("pi-pi-sess")
    assert len(nodes) == 3
    new = store.get_node("pi-pi-sess", "r3r3r3r3")
    assert new.predecessor == nodes[1].id  # attached to the node the first run made


def test_pi_compaction_covers_the_turns_before_the_first_kept_entry(store, home, tmp_path):
    path = _write(tmp_path / "s.jsonl", [
        PI_HEADER_V3,
        _pi_msg("c1", None, "user", "One", 1),
        _pi_msg("c2", "c1", "assistant", "Two.", 2),
        _pi_msg("c3", "c2", "user", "Three", 3),
        _pi_msg("c4", "c3", "assistant", "Four.", 4),
        {"type": "compaction", "id": "c5", "parentId": "c4", "summary": "One to four.",
         "firstKeptEntryId": "c3", "tokensBefore": 100, "timestamp": "2026-01-01T00:00:05Z"},
        _pi_msg("c6", "c5", "user", "Five", 6),
    ])
    import_sources(store, home, "pi", [path])
    summary = store.get_node("pi-abc-pi-1", "c5")
    assert summary.metadata["covers_ids"] == ["c1", "c2"]
    assert store.get_node("pi-abc-pi-1", "c6").predecessor == "c4"


def _codex(kind, ptype=None, ts=0, **payload):
    if ptype is not None:
        payload["type"] = ptype
    return {"timestamp": f"2026-01-01T00:00:{ts:02d}.000Z", "type": kind, "payload": payload}


def _user(text, ts):
    return [_codex("response_item", "message", ts, role="user",
                   content=[{"type": "input_text", "text": text}]),
            _codex("event_msg", "user_message", ts, message=text)]


def _answer(text, ts):
    return [_codex("event_msg", "agent_message", ts, message=text),
            _codex("response_item", "message", ts, role="assistant",
                   content=[{"type": "output_text", "text": text}])]


def test_codex_twin_user_lines_become_one_turn_and_a_backtrack_forks(store, home, tmp_path):
    thread = "019C0000-AAAA-7000-8000-000000000001"
    lines = [_codex("session_meta", ts=0, id=thread, cwd="/w", source="cli"),
             _codex("response_item", "message", 0, role="user",
                    content=[{"type": "input_text", "text": "<environment_context>cwd</environment_context>"}]),
             *_user("First ask", 1), *_answer("First answer.", 2),
             _codex("response_item", "function_call", 3, name="shell", arguments='{"cmd":"ls"}',
                    call_id="c1"),
             _codex("response_item", "function_call_output", 4, call_id="c1", output="a b"),
             *_user("Second ask", 5), *_answer("Second answer.", 6),
             _codex("event_msg", "thread_rolled_back", 7, num_turns=1),
             *_user("Second ask, rephrased", 8), *_answer("Better answer.", 9)]
    path = _write(tmp_path / f"rollout-2026-01-01T00-00-00-{thread}.jsonl", lines)
    report = import_sources(store, home, "codex", [path]).files[0]
    sid = "codex-" + thread.lower()
    assert report.skipped["duplicate_user_text"] == 3
    assert report.skipped["duplicate_llm_text"] == 3
    assert report.forks == 1
    turns = [n for n in store.get_nodes(sid) if n.conversational]
    assert [n.output for n in turns] == ["First ask", "First answer.", "Second ask",
                                         "Second answer.", "Second ask, rephrased",
                                         "Better answer."]
    assert turns[4].predecessor == turns[1].id == turns[2].predecessor  # forked at the answer
    assert [m["content"] for m in store.get_branch(sid)] == [
        "First ask", "First answer.", "Second ask, rephrased", "Better answer."]
    tool = [n for n in store.get_nodes(sid) if n.name == "shell"][0]
    assert tool.role == "code" and tool.caller == turns[1].id and tool.input == {"cmd": "ls"}


def test_codex_sub_agent_rollout_is_a_spawned_branch_of_its_parent(store, home, tmp_path):
    parent = "019c0000-aaaa-7000-8000-0000000000p1"
    child = "019c0000-aaaa-7000-8000-0000000000c1"
    _write(tmp_path / f"rollout-2026-01-01T00-00-00-{parent}.jsonl", [
        _codex("session_meta", ts=0, id=parent, cwd="/w", source="cli"),
        *_user("Spawn a helper", 1), *_answer("Spawning.", 2),
        _codex("response_item", "function_call", 3, name="spawn_agent", arguments="{}",
               call_id="s1")])
    _write(tmp_path / f"rollout-2026-01-01T00-00-05-{child}.jsonl", [
        _codex("session_meta", ts=5, id=child, cwd="/w",
               source={"subagent": {"thread_spawn": {"parent_thread_id": parent, "depth": 1}}}),
        *_user("Helper task", 6), *_answer("Helper done.", 7)])
    import_sources(store, home, "codex", [tmp_path])
    sid = f"codex-{parent}"
    nodes = store.get_nodes(sid)
    root = next(n for n in nodes if n.is_spawn_root)
    assert root.output == "Helper task"
    assert store.get_node(sid, root.caller).output == "Spawning."
    assert store.get_node(sid, store.head(sid)).output == "Spawning."


def _chat_node(nid, parent, role, text, t, recipient="all"):
    return {"id": nid, "parent": parent, "children": [], "message": {
        "id": nid, "author": {"role": role, "name": None}, "create_time": t,
        "content": {"content_type": "text", "parts": [text]}, "recipient": recipient}}


def _chat(regen=True, edit=True):
    nodes = [{"id": "root", "parent": None, "children": [], "message": None},
             _chat_node("u1", "root", "user", "Name a color", 1),
             _chat_node("a1", "u1", "assistant", "Blue.", 2),
             _chat_node("u2", "a1", "user", "Another", 3),
             _chat_node("a2", "u2", "assistant", "Red.", 4)]
    if regen:
        nodes.append(_chat_node("a2r", "u2", "assistant", "Green.", 5))
    if edit:
        nodes.append(_chat_node("u2e", "a1", "user", "Another, but warm", 6))
        nodes.append(_chat_node("a2e", "u2e", "assistant", "Orange.", 7))
    mapping = {n["id"]: n for n in nodes}
    for n in nodes:
        if n["parent"]:
            mapping[n["parent"]]["children"].append(n["id"])
    return {"id": "Conv-1", "title": "Colors", "update_time": 7.0, "mapping": mapping,
            "current_node": "a2e" if edit else "a2"}


def test_chatgpt_regenerations_and_edits_are_forks_and_current_node_is_the_head(
        store, home, tmp_path):
    export = tmp_path / "export.zip"
    with zipfile.ZipFile(export, "w") as zf:
        zf.writestr("conversations.json", json.dumps([_chat()]))
        zf.writestr("../evil.txt", "never extracted")
    report = import_sources(store, home, "chatgpt", [export]).files[0]
    assert report.forks == 2 and report.errors == []
    sid = "chatgpt-conv-1"
    assert store.head(sid) == "a2e"
    assert {row["tip"] for row in store.list_branches(sid)} == {"a2", "a2r", "a2e"}
    assert [m["id"] for m in store.get_branch(sid)] == ["u1", "a1", "u2e", "a2e"]
    assert not (tmp_path / "evil.txt").exists() and not (home.parent / "evil.txt").exists()


def test_a_chatgpt_export_of_an_unexpected_shape_loses_only_the_odd_fields(store, home,
                                                                         tmp_path):
    """Lists where ids belong, lists where objects belong, half a surrogate pair: each used to
    end the import with a traceback (found by benchmarks/faults_fuzz.py)."""
    conv = _chat(regen=False, edit=False)
    m = conv["mapping"]
    m["u2"]["parent"] = ["a1"]                    # a list where an id belongs: a root now
    m["a1"]["children"] = [["u2"], "u2"]
    m["a2"]["message"]["author"] = ["assistant"]  # a list where an object belongs
    m["a2"]["message"]["metadata"] = "hidden?"
    m["u1"]["message"]["content"]["parts"] = ["Name a colour \ud83d"]
    m["odd"] = ["not", "a", "node"]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conv]))            # ensure_ascii: the surrogate is escaped
    report = import_sources(store, home, "chatgpt", [path]).to_dict()["files"][0]
    assert "errors" not in report and report["replaced_characters"] == 1
    nodes = {n.id: n for n in store.get_nodes("chatgpt-conv-1")}
    assert nodes["u1"].output == "Name a colour \ufffd" and nodes["u2"].output == "Another"
    assert {"u1", "a1", "u2", "a2"} <= set(nodes)
