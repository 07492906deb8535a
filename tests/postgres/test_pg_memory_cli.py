"""The `memory` commands on a PostgreSQL home, through the CLI as a user runs them: write,
status, show, verify, backfill, migrate, reorganize answer as on a directory home; search
and context are refused in one line until the home has a full-text index."""

from __future__ import annotations

from testkit import Cli


def test_memory_commands_work_on_a_postgresql_home(pg_url):
    cli = Cli(pg_url)
    cli.json("session", "new", "--id", "s", "--title", "Deploys")
    cli.json("session", "add", "s", "--role", "user", "--text",
             "Deploys happen on Tuesdays after 14:00 UTC.", "--id", "m0")
    cli.json("session", "add", "s", "--role", "assistant", "--text", "Noted: Tuesdays.",
             "--id", "m1")
    written = cli.json("memory", "write", "s", "--force")
    assert written["sessions"][0]["marked"] == ["m0", "m1"]
    status = cli.json("memory", "status", "s")
    assert status["workspace_id"].startswith("w-")
    assert status["sessions"][0]["branches"][0]["pending_turns"] == 0
    assert cli.json("memory", "verify")["ok"] is True
    assert cli.json("memory", "write", "s", "--force")["sessions"][0]["marked"] == []
    shown = cli.json("memory", "show", "deploys.md")
    assert "Tuesdays" in shown["text"]
    assert cli.json("memory", "migrate")["migrated"] is False
    assert cli.json("memory", "backfill")["candidates"] == 0
    cli.json("memory", "reorganize")
    assert cli.json("memory", "status")["revision"] == status["revision"]


def test_search_on_a_postgresql_home_finds_what_was_written(pg_url):
    cli = Cli(pg_url)
    cli.json("session", "new", "--id", "s")
    cli.json("session", "add", "s", "--role", "user", "--text",
             "Deploys happen on Tuesdays after 14:00 UTC.")
    cli.json("memory", "write", "s", "--force")
    hits = cli.json("memory", "search", "tuesdays")
    hits = hits["hits"] if isinstance(hits, dict) else hits
    assert hits and "tuesdays" in hits[0]["text"].lower()
    assert hits[0]["path"].startswith("topics/")
