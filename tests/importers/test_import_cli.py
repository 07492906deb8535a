"""``scriptorium import …``: one JSON document per run with a row per source file, the
documented keys, ``--write`` writing changed sessions, and exit 4 when a file is malformed."""

from __future__ import annotations

import json

from cckit import SESSION, Transcript

KEYS = {"path", "sessions_created", "sessions_updated", "nodes_added", "forks", "skipped"}


def test_import_claude_code_json_report_and_rerun(cli, tmp_path):
    t = Transcript(tmp_path / "projects" / "p" / f"{SESSION}.jsonl")
    t.user("u1", None, "We chose Postgres for the ledger.")
    t.assistant("a1", "u1", "Postgres it is.")
    t.write()
    out = cli.json("import", "claude-code", str(tmp_path / "projects"), "--write")
    row = out["files"][0]
    assert KEYS <= set(row) and row["nodes_added"] == 2 and row["sessions_created"] == 1
    assert out["changed_sessions"] == [f"cc-{SESSION}"]
    assert out["writes"][0]["marked"] == ["u1", "a1"] and out["writes"][0]["failure"] is None
    again = cli.json("import", "claude-code", str(tmp_path / "projects"), "--write")
    assert again["files"][0]["unchanged"] and again["writes"] == []
    shown = cli.json("session", "show", f"cc-{SESSION}")
    assert [m["id"] for m in shown["messages"]] == ["u1", "a1"]


def test_import_reports_a_malformed_file_and_exits_4(cli, tmp_path):
    bad = tmp_path / "rollout-x.jsonl"
    bad.write_text("{\n  \"type\": \"session_meta\"\n}\n")
    result = cli("import", "codex", str(bad), "--json")
    assert result.exit_code == 4
    doc = json.loads(result.stdout)
    assert "not JSON Lines" in doc["files"][0]["errors"][0]
    assert result.stderr.startswith("error: 1 problem(s) while importing")


def test_import_chatgpt_needs_a_file(cli, tmp_path):
    result = cli("import", "chatgpt", str(tmp_path / "missing.json"))
    assert result.exit_code == 2 and "no such file" in result.stderr
