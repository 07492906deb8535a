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


def test_memory_write_all_json_is_one_document_written_row_by_row(cli):
    """The rows are printed as each session is done (nothing is held until the end), and
    stdout is still exactly the one document ``json.dumps`` of the whole would give."""
    for sid in ("a", "b", "c"):
        cli.json("session", "new", "--id", sid, "--title", f"Deploys {sid}")
        cli.json("session", "add", sid, "--role", "user", "--text", f"Deploy {sid} on Tuesday.")
        cli.json("session", "add", sid, "--role", "assistant", "--text", "Noted.")
    result = cli("memory", "write", "--all", "--force", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert sorted(r["session_id"] for r in doc["sessions"]) == ["a", "b", "c"]
    assert all(len(r["marked"]) == 2 and r["failure"] is None for r in doc["sessions"])
    assert result.stdout == json.dumps(doc, ensure_ascii=False) + "\n"
    human = cli("memory", "write", "--all")
    assert human.exit_code == 0
    assert sorted(human.stdout.splitlines()) == sorted(
        [f"{sid}: 0 batch(es), 0 turn(s) written" for sid in "abc"] + ["  nothing pending"] * 3)


def test_an_error_midway_through_write_all_closes_the_json_document_with_it(cli,
                                                                           monkeypatch):
    from scriptorium.memory.writing import Memory

    for sid in ("a", "b"):
        cli.json("session", "new", "--id", sid)
        cli.json("session", "add", sid, "--role", "user", "--text", f"Deploy {sid} on Tuesday.")
        cli.json("session", "add", sid, "--role", "assistant", "--text", "Noted.")
    real = Memory.write_session
    calls: list[str] = []

    def second_fails(self, sid):
        calls.append(sid)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(self, sid)

    monkeypatch.setattr(Memory, "write_session", second_fails)
    result = cli("memory", "write", "--all", "--force", "--json")
    assert result.exit_code != 0
    doc = json.loads(result.stdout)  # one whole document: the row written, then the error
    assert [r["session_id"] for r in doc["sessions"]] == calls[:1]
    assert len(doc["sessions"][0]["marked"]) == 2
    assert doc["error"]["code"] == "DISK_FULL" and "space" in doc["error"]["message"]
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
