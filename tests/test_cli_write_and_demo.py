"""`memory write` and `scriptorium demo` from the command line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from scriptorium.cli import main


def make_session(cli):
    cli.json("session", "new", "--id", "s", "--title", "Deploys")
    cli.json("session", "add", "s", "--role", "user", "--text", "Deploys happen on Tuesdays.")
    cli.json("session", "add", "s", "--role", "assistant", "--text", "Noted: Tuesdays only.")


def test_memory_write_force_writes_and_reports_the_marked_turns(cli):
    make_session(cli)
    data = cli.json("memory", "write", "s", "--force")
    (row,) = data["sessions"]
    assert row["session_id"] == "s" and row["failure"] is None and row["batches"] == 1
    assert len(row["marked"]) == 2
    status = cli.json("memory", "status", "s")
    assert status["sessions"][0]["branches"][0]["pending_turns"] == 0


def test_memory_write_below_the_threshold_writes_nothing_without_force(cli):
    make_session(cli)
    data = cli.json("memory", "write", "--all")
    assert data["sessions"][0]["marked"] == [] and data["sessions"][0]["failure"] is None


def test_memory_write_needs_sessions_or_all(cli):
    result = cli("memory", "write")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "--all" in result.stderr


def test_memory_write_of_an_unknown_session_is_a_one_line_error(cli):
    result = cli("memory", "write", "nope", "--force")
    assert result.exit_code == 3 and "nope" in result.stderr and result.stderr.count("\n") == 1


def test_a_failed_write_exits_non_zero_and_says_why(cli, home):
    make_session(cli)
    (home / "config.toml").write_text("[writer]\nkind = 'llm'\n[writer.llm]\n"
                                      "base_url = 'http://127.0.0.1:9/v1'\nmodel = 'm'\n"
                                      "api_key_env = 'SCRIPTORIUM_TEST_NO_SUCH_KEY'\n")
    result = cli("memory", "write", "s", "--force", "--json")
    assert result.exit_code == 1
    row = json.loads(result.stdout)["sessions"][0]
    assert row["failure"]["reason_code"] and row["marked"] == []


def test_the_demo_writes_every_branch_once_and_explains_it(tmp_path):
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path / "d"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {b["tip"]: b for b in data["branches"]}
    assert rows["a4"]["head"] and rows["a4"]["contributed"][:2] == ["u1", "a1"]
    contributed = [n for b in data["branches"] for n in b["contributed"]]
    assert len(contributed) == len(set(contributed)), "a shared turn was written twice"
    assert rows["sub-1"]["contributed"] == ["sub-root", "sub-1"]
    assert rows["a3"]["contributed"] == ["u3", "a3"]  # the abandoned original, after the edit
    assert rows["a2-retry"]["pending"] == ["a2-retry"]  # a one-turn retry waits
    assert data["topics"] == ["topics/lisbon-offsite.md"]
    assert all(b["landed"] for b in data["branches"] if b["contributed"])
    assert data["search"]["hits"], "the search finds the written memory"


def test_the_demo_prints_a_readable_report(tmp_path):
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path / "d")])
    assert result.exit_code == 0
    assert "written by this branch" in result.output and "landed in topics/" in result.output


def test_the_demo_refuses_a_directory_that_is_not_empty(tmp_path):
    (tmp_path / "x").write_text("")
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "not empty" in result.stderr
