"""Claude Code trees built by hand in the documented format: which multi-child points are
forks (a rewind, an edit, a regeneration) and which are not (parallel tool calls, progress
lines), compaction, sub-agents and the head."""

from __future__ import annotations

from pathlib import Path

from cckit import SESSION, Transcript
from scriptorium.importers import import_sources
from scriptorium.sessions import SessionStore

SID = f"cc-{SESSION}"


def _import(store: SessionStore, home: Path, *paths: Path):
    return import_sources(store, home, "claude-code", list(paths))


def _conversation(t: Transcript) -> None:
    t.progress("p0", None)
    t.user("u1", "p0", "Plan the parser")
    t.assistant("a1", "u1", "Start with the tokenizer.")
    t.user("u2", "a1", "And then?")
    t.assistant("a2", "u2", "Then the grammar.")


def test_a_rewind_to_an_earlier_prompt_is_a_fork_and_the_newest_leaf_is_the_head(
        store, home, tmp_path):
    t = Transcript(tmp_path / "p" / f"{SESSION}.jsonl")
    _conversation(t)
    t.user("u2b", "a1", "Actually, skip the grammar: what about errors?")  # Esc-Esc rewind
    t.assistant("a2b", "u2b", "Report them with line numbers.")
    report = _import(store, home, t.write()).files[0]
    assert report.forks == 1
    assert {store.get_node(SID, "u2").predecessor, store.get_node(SID, "u2b").predecessor} \
        == {"a1"}
    tips = {row["tip"] for row in store.list_branches(SID)}
    assert tips == {"a2", "a2b"}
    assert store.head(SID) == "a2b"
    assert [m["id"] for m in store.get_branch(SID)] == ["u1", "a1", "u2b", "a2b"]


def test_a_regenerated_answer_is_a_fork_under_the_prompt(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    _conversation(t)
    t.assistant("a2r", "u2", "Then the grammar, with error recovery.", mid="msg_retry")
    report = _import(store, home, t.write()).files[0]
    assert report.forks == 1
    assert store.get_node(SID, "a2r").predecessor == "u2"
    assert store.head(SID) == "a2r"


def test_an_edited_first_prompt_forks_at_the_root(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    _conversation(t)
    t.user("u1e", "p0", "Plan the lexer instead")  # edit of the first message
    t.assistant("a1e", "u1e", "Lexer first, then.")
    report = _import(store, home, t.write()).files[0]
    assert report.forks == 1
    assert store.get_node(SID, "u1e").predecessor == "ROOT"
    assert [m["id"] for m in store.get_branch(SID)] == ["u1e", "a1e"]


def test_parallel_tool_calls_and_progress_siblings_are_not_forks(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "Look at both files")
    t.assistant("a1", "u1", "Reading them.", mid="m1")
    t.tool_use("t1", "a1", "toolu_1", "m1", name="Read")
    t.tool_use("t2", "t1", "toolu_2", "m1", name="Read")  # next block of the same message
    t.progress("pr1", "t1")
    t.tool_result("r1", "t1", "toolu_1", "file one")  # sibling of t2 and pr1
    t.progress("pr2", "t2")
    t.tool_result("r2", "t2", "toolu_2", "file two")
    t.assistant("a2", "r2", "Both are parsers.", mid="m2")
    report = _import(store, home, t.write()).files[0]
    assert report.forks == 0
    assert report.skipped["type:progress"] == 2
    rows = {n.id: n for n in store.get_nodes(SID) if n.role == "code"}
    assert set(rows) == {"t1", "t2", "r1", "r2"}
    assert all(n.caller == "a1" and n.predecessor is None for n in rows.values())
    assert rows["r1"].metadata["tool_call_id"] == "toolu_1"
    assert rows["t1"].name == "Read" and rows["t1"].input == {"command": "ls"}
    assert [m["id"] for m in store.get_branch(SID)] == ["u1", "a1", "a2"]
    assert [row["tip"] for row in store.list_branches(SID)] == ["a2"]


def test_compaction_covers_the_line_before_it_and_the_conversation_continues(
        store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    _conversation(t)
    t.compaction("cb", "cs", logical_parent="a2")
    t.user("u3", "cs", "Now write the tests")
    t.assistant("a3", "u3", "Tests written.")
    report = _import(store, home, t.write()).files[0]
    assert report.forks == 0
    summary = store.get_node(SID, "cs")
    assert summary.is_summary and summary.metadata["covers_ids"] == ["u1", "a1", "u2", "a2"]
    assert summary.metadata["compaction"] is True
    assert store.get_node(SID, "u3").predecessor == "a2"
    assert [m["id"] for m in store.get_branch(SID)] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert store.head(SID) == "a3"


def test_a_sub_agent_file_becomes_a_spawned_branch_of_the_turn_that_started_it(
        store, home, tmp_path):
    projects = tmp_path / "projects"
    main = Transcript(projects / f"{SESSION}.jsonl")
    main.user("u1", None, "Research the parsers")
    main.assistant("a1", "u1", "Delegating to an agent.", mid="m1")
    main.tool_use("t1", "a1", "toolu_task", "m1", name="Task", prompt="Survey parsers")
    main.tool_result("r1", "t1", "toolu_task", "Found three.",
                     toolUseResult={"agentId": "abc123", "status": "completed"})
    main.assistant("a2", "r1", "The agent found three.", mid="m2")
    sub = Transcript(projects / SESSION / "subagents" / "agent-abc123.jsonl")
    sub.user("s1", None, "Survey parsers", isSidechain=True, agentId="abc123")
    sub.assistant("s2", "s1", "Three parsers exist.", isSidechain=True, agentId="abc123")
    main.write()
    sub.write()
    reports = _import(store, home, projects).files
    assert [Path(r.path).name for r in reports] == [f"{SESSION}.jsonl", "agent-abc123.jsonl"]
    root = store.get_node(SID, "s1")
    assert root.is_spawn_root and root.caller == "a1" and root.predecessor is None
    assert store.get_node(SID, "s2").predecessor == "s1"
    assert store.head(SID) == "a2"  # a sub-agent never takes the head
    tips = {row["tip"] for row in store.list_branches(SID)}
    assert tips == {"a2", "s2"}
    assert [m["id"] for m in store.get_branch(SID, "s2")] == ["s1", "s2"]


def test_inline_sidechain_runs_are_linked_by_their_task_prompt(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "Check the build")
    t.assistant("a1", "u1", "Starting an agent.", mid="m1")
    t.tool_use("t1", "a1", "toolu_9", "m1", name="Task", prompt="Run the build and report")
    t.user("s1", None, "Run the build and report", isSidechain=True)
    t.assistant("s2", "s1", "Build passes.", isSidechain=True)
    t.tool_result("r1", "t1", "toolu_9", "Build passes.")
    t.assistant("a2", "r1", "The build passes.", mid="m2")
    _import(store, home, t.write())
    root = store.get_node(SID, "s1")
    assert root.is_spawn_root and root.caller == "a1"
    assert store.head(SID) == "a2"


def test_unknown_line_types_are_counted_not_fatal(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.raw({"type": "brand-new-thing", "payload": 1})
    t.user("u1", None, "Hello")
    t._env("x1", "u1", "telemetry", value=3)
    t.assistant("a1", "x1", "Hi.")
    report = _import(store, home, t.write()).files[0]
    assert report.skipped["type:brand-new-thing"] == 1
    assert report.skipped["type:telemetry"] == 1
    assert store.get_node(SID, "a1").predecessor == "u1"  # found through the unknown line


def test_a_second_compaction_covers_only_the_turns_since_the_first(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    _conversation(t)
    t.compaction("cb1", "cs1", logical_parent="a2")
    t.user("u3", "cs1", "Next step")
    t.assistant("a3", "u3", "Done.")
    t.compaction("cb2", "cs2", logical_parent="a3")
    t.user("u4", "cs2", "And now?")
    _import(store, home, t.write())
    second = store.get_node(SID, "cs2")
    assert second.metadata["covers_ids"] == ["u3", "a3"]
    assert second.metadata["previous_summary"] == "cs1"
    assert [m["id"] for m in store.get_branch(SID)] == ["u1", "a1", "u2", "a2", "u3", "a3", "u4"]


def test_an_import_moves_the_head_once_and_tells_listeners_and_other_processes(
        store, home, tmp_path):
    heard = []
    store.subscribe(lambda sid, old, new: heard.append((sid, old, new)))
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    _conversation(t)
    _import(store, home, t.write())
    assert heard == [(SID, None, "a2")]
    # the head-move log other processes read (files, or rows on a PostgreSQL home)
    logged = [(m.session_id, m.old, m.new) for m in store.events.reader(0).poll()]
    assert logged == [(SID, None, "a2")]
