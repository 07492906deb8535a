"""Every real transcript in ``shared/realdata`` imports without a crash, and its messages,
roots, sidechains and compactions are all accounted for in the store.

The expected figures are computed here from the files themselves (an independent reading),
and the fork counts are the ones their PROVENANCE.md states: no real file holds a user fork.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from scriptorium.importers import import_sources
from scriptorium.importers.ids import node_id
from scriptorium.sessions import SessionStore
from scriptorium.timefmt import epoch


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _walkable(store: SessionStore, sid: str) -> None:
    """Every live tip and the head walk back to a legal start (no dangling edge)."""
    for row in store.list_branches(sid):
        assert store.get_branch(sid, row["tip"])
    assert store.get_branch(sid)


@pytest.fixture(scope="module", params=["directory", "postgres"])
def imported(request, realdata: Path, tmp_path_factory):
    """Every real file imported once per kind of home (the PostgreSQL home's ledger in its
    tables): (store, {path: report})."""
    home = tmp_path_factory.mktemp("realdata-home")
    if request.param == "directory":
        store = SessionStore(home / "sessions", git=False)
    else:
        from pgserver import home_url
        from scriptorium.sessions.pg_store import PgSessionStore

        store = PgSessionStore.open(home_url(request.getfixturevalue("pg_server_url")))
    reports = {}
    for kind, sub in [("claude-code", "claude-code"), ("pi", "pi"), ("codex", "codex")]:
        for f in import_sources(store, home, kind, [realdata / sub]).files:
            reports[f.path] = f
    exports = sorted((realdata / "chatgpt").rglob("conversations.json"))
    for f in import_sources(store, home, "chatgpt", exports).files:
        reports[f.path] = f
    yield store, reports
    if request.param == "postgres":
        store.close()


def test_every_real_file_imports_without_an_error(imported, realdata):
    _, reports = imported
    files = [p for p in realdata.rglob("*") if p.suffix in (".jsonl", ".json")]
    assert len(files) == 19
    for path in files:
        report = reports[str(path.resolve())]
        assert report.errors == [], path
        assert report.nodes_added > 0, path
        assert report.forks == 0, path  # PROVENANCE: no rewind/edit/regeneration fork


def test_claude_code_every_message_line_is_a_node_and_every_other_line_is_counted(
        imported, realdata):
    store, reports = imported
    for path in sorted((realdata / "claude-code").rglob("*.jsonl")):
        lines = _jsonl(path)
        report = reports[str(path.resolve())]
        sid = report.sessions[0]
        ids = {n.id for n in store.get_nodes(sid)}
        kinds = Counter(line.get("type") for line in lines)
        for line in lines:
            if line.get("type") in ("user", "assistant", "system") and \
                    line.get("subtype") != "compact_boundary":
                assert node_id(line["uuid"]) in ids, (path.name, line["uuid"])
        no_uuid = Counter(line.get("type") for line in lines if "uuid" not in line)
        for kind, count in no_uuid.items():
            assert report.skipped[f"type:{kind}"] == count, (path.name, kind)
        assert report.skipped.get("type:progress", 0) == kinds.get("progress", 0)
        boundaries = sum(1 for x in lines if x.get("subtype") == "compact_boundary")
        assert report.skipped.get("compact_boundary", 0) == boundaries
        _walkable(store, sid)


def test_claude_code_roots_sidechains_and_compactions(imported, realdata):
    store, reports = imported
    cc = realdata / "claude-code"

    def nodes(name: str):
        return store.get_nodes(reports[str((cc / name).resolve())].sessions[0])

    # 1.0.x inline sub-agent runs: 6 roots = the main line + 5 sidechain runs, each a spawned
    # branch hung on the turn whose Task call carried its prompt
    fe5e = nodes("d-kimuson__claude-code-viewer/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl")
    lines = _jsonl(cc / "d-kimuson__claude-code-viewer/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl")
    side_roots = [x for x in lines if x.get("parentUuid") is None and x.get("isSidechain")]
    spawns = [n for n in fe5e if n.is_spawn_root]
    assert len(side_roots) == len(spawns) == 5
    by_id = {n.id: n for n in fe5e}
    assert all(by_id[n.caller].role == "llm" and not n.metadata.get("spawn_caller_unknown")
               for n in spawns)
    assert sum(1 for n in fe5e if n.predecessor == "ROOT") == 1
    assert sum(1 for x in lines if x.get("isSidechain")) == sum(
        1 for n in fe5e if n.metadata.get("sidechain"))

    # 2.1.x: one compaction (boundary + isCompactSummary) covering the line before it; the
    # sub-agent file and the compaction agent's file become spawned branches of the session
    ae = nodes("marot__spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl")
    summaries = [n for n in ae if n.is_summary]
    assert len(summaries) == 1
    summary = summaries[0]
    logical = next(x for x in _jsonl(cc / "marot__spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl")
                   if x.get("subtype") == "compact_boundary")["logicalParentUuid"]
    ae_by_id = {n.id: n for n in ae}
    last_covered = ae_by_id[summary.metadata["covers_ids"][-1]]
    assert last_covered.conversational
    # the turn after the compaction continues the covered line (not the summary)
    after = [n for n in ae if n.predecessor == last_covered.id and n.conversational]
    assert after, "the conversation after the compaction continues from the covered line"
    spawns = [n for n in ae if n.is_spawn_root]
    agents = sorted(n.metadata.get("agent_id") for n in spawns)
    assert agents == ["aac57f5", "acompact-946d2b"]
    assert all(ae_by_id[n.caller].conversational for n in spawns)
    compact_agent = [n for n in ae if n.metadata.get("agent_id") == "acompact-946d2b"
                     and n.conversational]
    assert compact_agent and all(n.metadata.get("display") == "runtime" for n in compact_agent)
    assert logical  # the boundary names the last line before it

    # 2.0.x: a manual /compact in the main transcript
    fast = nodes("oneryalcin__fasthooks/sample_main_transcript.jsonl")
    assert sum(1 for n in fast if n.is_summary) == 1


def test_claude_code_head_is_the_last_main_line(imported, realdata):
    store, reports = imported
    path = realdata / "claude-code/marot__spotter/short.jsonl"
    sid = reports[str(path.resolve())].sessions[0]
    branch = store.get_branch(sid)
    last_turn = [x for x in _jsonl(path) if x.get("type") == "assistant"
                 and any(b.get("type") == "text" and b["text"].strip()
                         for b in x["message"]["content"])][-1]
    assert branch[-1]["id"] in {last_turn["uuid"]} | {m["id"] for m in branch[-1:]}
    assert [m["role"] for m in branch][:2] == ["user", "assistant"]


def test_pi_entries_and_compactions_are_accounted_for(imported, realdata):
    store, reports = imported
    for path in sorted((realdata / "pi").rglob("*.jsonl")):
        lines = _jsonl(path)
        report = reports[str(path.resolve())]
        nodes = store.get_nodes(report.sessions[0])
        messages = [x for x in lines if x.get("type") == "message"]
        from_messages = [n for n in nodes if n.metadata.get("source_type") == "message"
                         and "." not in n.id]
        assert len(from_messages) == len(messages)
        roles = Counter(x["message"]["role"] for x in messages)
        assert sum(1 for n in nodes if n.role == "user") == roles["user"]
        passes = Counter(x["type"] for x in lines if x["type"] not in ("message", "compaction",
                                                                         "session"))
        for kind, count in passes.items():
            assert report.skipped[f"type:{kind}"] == count
        compactions = [x for x in lines if x["type"] == "compaction"]
        summaries = [n for n in nodes if n.is_summary]
        assert len(summaries) == len(compactions)
        entries = lines[1:]
        for comp, summary in zip(compactions, summaries):
            kept = entries[comp["firstKeptEntryIndex"]]
            covered_times = [n.created_at for n in nodes if n.id in summary.metadata["covers_ids"]]
            assert max(covered_times) < epoch(kept["timestamp"]) + 1e-6
        _walkable(store, report.sessions[0])


def test_codex_each_human_and_assistant_text_is_one_turn(imported, realdata):
    store, reports = imported
    for path in sorted((realdata / "codex").rglob("*.jsonl")):
        lines = _jsonl(path)
        report = reports[str(path.resolve())]
        nodes = store.get_nodes(report.sessions[0])
        users = [n.output for n in nodes if n.role == "user"]
        said = [x["payload"]["message"] for x in lines
                if x["type"] == "event_msg" and x["payload"].get("type") == "user_message"]
        for text in said:  # no human turn lost…
            twin = text.replace("[REDACTED_MESSAGE", "[REDACTED_TEXT")
            assert any(text in u or twin in u for u in users), text
        assert report.skipped["duplicate_user_text"] == len(said)  # …and none stored twice
        assistant = [x for x in lines if x["type"] == "response_item"
                     and x["payload"].get("type") == "message"
                     and x["payload"].get("role") == "assistant"]
        llm_turns = [n for n in nodes if n.role == "llm" and not n.is_summary]
        assert len(llm_turns) == len(assistant)
        calls = sum(1 for x in lines if x["type"] == "response_item" and x["payload"].get("type")
                    in ("function_call", "custom_tool_call", "web_search_call",
                        "function_call_output", "custom_tool_call_output"))
        assert sum(1 for n in nodes if n.role == "code" and n.name not in (
            "reasoning", "developer_message", "user_message", "empty", "ghost_snapshot")) >= calls
        compacted = sum(1 for x in lines if x["type"] == "compacted")
        assert sum(1 for n in nodes if n.is_summary) == compacted
        _walkable(store, report.sessions[0])


def test_chatgpt_every_message_node_is_accounted_for(imported, realdata):
    store, reports = imported
    for path in sorted((realdata / "chatgpt").rglob("conversations.json")):
        convs = json.loads(path.read_text())
        report = reports[str(path.resolve())]
        assert report.sessions_created == len(convs)
        for conv in convs:
            sid = "chatgpt-" + conv["id"].lower()
            nodes = {n.id: n for n in store.get_nodes(sid)}
            for nid, entry in conv["mapping"].items():
                if entry.get("message"):
                    assert node_id(nid) in nodes
            head_line = store.get_branch(sid)
            assert head_line[-1]["id"] == node_id(conv["current_node"]) or \
                nodes[node_id(conv["current_node"])].role == "code"
            tool_calls = [e for e in conv["mapping"].values() if e.get("message")
                          and e["message"].get("recipient", "all") != "all"]
            assert sum(1 for n in nodes.values() if n.metadata.get("tool_call")) == len(tool_calls)
