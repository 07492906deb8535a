"""The `session` CLI group: DESIGN §6 JSON shapes, forks, and one-line errors — on a home
directory and on a PostgreSQL home (``--home postgresql://…``)."""

from __future__ import annotations

import json

import pytest

from testkit import Cli, json_error


@pytest.fixture
def cli(home_kind, home, request):
    """The CLI on an empty home of either kind."""
    return Cli(home if home_kind == "directory" else request.getfixturevalue("pg_url"))


def fail(cli, *args):
    """Run a command that must fail; return (exit code, stderr)."""
    result = cli(*args, "--json")
    assert result.exit_code != 0, result.output
    json_error(result)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err
    return result.exit_code, err


def test_new_add_show_round_trip_with_the_contract_shapes(cli):
    assert cli.json("session", "new", "--id", "s1", "--title", "Trip") == {"session_id": "s1"}
    out = cli.json("session", "add", "s1", "--role", "user", "--text", "hello", "--id", "u1")
    assert out == {"node_id": "u1", "head_id": "u1"}
    out = cli.json("session", "add", "s1", "--role", "assistant", "--text", "hi", "--id", "a1")
    assert out == {"node_id": "a1", "head_id": "a1"}
    shown = cli.json("session", "show", "s1")
    assert shown["session_id"] == "s1" and shown["head_id"] == "a1"
    msgs = shown["messages"]
    assert [(m["id"], m["role"], m["content"], m["predecessor"]) for m in msgs] == [
        ("u1", "user", "hello", "ROOT"), ("a1", "assistant", "hi", "u1")]


def test_new_without_an_id_makes_one(cli):
    sid = cli.json("session", "new")["session_id"]
    assert len(sid) == 12
    assert [r["session_id"] for r in cli.json("session", "list")["sessions"]] == [sid]


def test_add_after_forks_and_moves_the_head(cli):
    cli.json("session", "new", "--id", "s1")
    for nid, role in [("u1", "user"), ("a1", "assistant"), ("u2", "user"), ("a2", "assistant")]:
        cli.json("session", "add", "s1", "--role", role, "--text", nid, "--id", nid)
    out = cli.json("session", "add", "s1", "--role", "user", "--text", "other", "--id", "u2b",
                   "--after", "a1")
    assert out == {"node_id": "u2b", "head_id": "u2b"}
    assert [m["id"] for m in cli.json("session", "show", "s1")["messages"]] == ["u1", "a1", "u2b"]
    old = cli.json("session", "show", "s1", "--head", "a2")
    assert [m["id"] for m in old["messages"]] == ["u1", "a1", "u2", "a2"]
    branches = cli.json("session", "branches", "s1")
    assert branches["session_id"] == "s1"
    assert [(b["tip"], b["head"], b["archived"]) for b in branches["branches"]] == [
        ("u2b", True, False), ("a2", False, False)]


def test_head_prints_and_moves(cli):
    cli.json("session", "new", "--id", "s1")
    cli.json("session", "add", "s1", "--role", "user", "--text", "x", "--id", "u1")
    cli.json("session", "add", "s1", "--role", "assistant", "--text", "y", "--id", "a1")
    assert cli.json("session", "head", "s1") == {"session_id": "s1", "head_id": "a1"}
    moved = cli.json("session", "head", "s1", "u1")
    assert moved["head_id"] == "u1" and moved["previous_head_id"] == "a1"
    assert cli.json("session", "head", "s1")["head_id"] == "u1"


def test_rewind_spawn_retry_edit_and_compact_from_the_cli(cli):
    cli.json("session", "new", "--id", "s1")
    for nid, role in [("u1", "user"), ("a1", "assistant"), ("u2", "user"), ("a2", "assistant")]:
        cli.json("session", "add", "s1", "--role", role, "--text", nid, "--id", nid)
    spawned = cli.json("session", "spawn", "s1", "--caller", "a1", "--text", "dig", "--id", "sp")
    assert spawned == {"node_id": "sp"}
    assert cli.json("session", "head", "s1")["head_id"] == "a2"
    assert cli.json("session", "retry", "s1", "a2", "--text", "again", "--id", "a2b")[
        "head_id"] == "a2b"
    assert cli.json("session", "edit", "s1", "u2", "--text", "re-ask", "--id", "u2e")[
        "node_id"] == "u2e"
    summ = cli.json("session", "compact", "s1", "--covers", "u1", "--covers", "a1",
                    "--text", "greeting")["node_id"]
    assert summ.startswith("summary_")
    cli.json("session", "head", "s1", "a2")
    out = cli.json("session", "rewind", "s1", "u2")
    assert out["session_id"] == "s1" and out["new_head_id"] == "a1"
    assert set(out["nodes_rewound"]) == {"u2", "a2"}
    tips = {b["tip"] for b in cli.json("session", "branches", "s1")["branches"]}
    assert tips == {"a1", "a2b", "u2e", "sp"}


def test_list_shows_sessions_newest_first(cli):
    cli.json("session", "new", "--id", "old", "--title", "Old")
    cli.json("session", "new", "--id", "new", "--title", "New")
    cli.json("session", "add", "new", "--role", "user", "--text", "x", "--id", "u1")
    rows = cli.json("session", "list")["sessions"]
    assert [r["session_id"] for r in rows] == ["new", "old"]
    assert set(rows[0]) >= {"session_id", "title", "updated_at", "head_id"}
    assert rows[0]["head_id"] == "u1" and rows[1]["head_id"] is None


def test_human_output_without_json(cli):
    cli.json("session", "new", "--id", "s1")
    cli.json("session", "add", "s1", "--role", "user", "--text", "hello there", "--id", "u1")
    result = cli("session", "show", "s1")
    assert result.exit_code == 0 and "hello there" in result.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)


@pytest.mark.parametrize("args", [
    ("session", "show", "nope"),
    ("session", "add", "nope", "--role", "user", "--text", "x"),
    ("session", "branches", "nope"),
    ("session", "head", "nope"),
    ("session", "rewind", "nope", "n1"),
    ("session", "spawn", "nope", "--caller", "n1", "--text", "x"),
])
def test_commands_on_a_missing_session_exit_not_found(cli, home, args):
    code, err = fail(cli, *args)
    assert code == 3 and "nope" in err
    assert not (home / "sessions" / "nope").exists()
    assert cli.json("session", "list")["sessions"] == []


def test_unknown_nodes_exit_not_found(cli):
    cli.json("session", "new", "--id", "s1")
    assert fail(cli, "session", "show", "s1", "--head", "ghost")[0] == 3
    assert fail(cli, "session", "head", "s1", "ghost")[0] == 3
    assert fail(cli, "session", "add", "s1", "--role", "user", "--text", "x",
                "--after", "ghost")[0] == 3
