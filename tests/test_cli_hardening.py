"""The CLI as a new user meets it: bad input is one line and a non-zero exit, damage is
reported per session, and nothing is stored twice (issue 11, items 11, 12 and 13)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testkit import Cli


def one_line_error(result, code: int | None = None) -> str:
    assert result.exit_code != 0, result.output
    if code is not None:
        assert result.exit_code == code, (result.exit_code, result.stderr)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in result.output
    return err


def real_cli(home: Path, *args: str, stdin: bytes | None = None):
    """The CLI in a fresh process (for faults that must not depend on in-process state)."""
    return subprocess.run([sys.executable, "-c", "from scriptorium.cli import main; main()",
                           "--home", str(home), *args], capture_output=True, input=stdin,
                          timeout=120)


def chat(cli: Cli, sid: str = "s") -> None:
    cli.json("session", "new", "--id", sid)
    cli.json("session", "add", sid, "--role", "user", "--text", "Book the ferry", "--id", "u1")
    cli.json("session", "add", sid, "--role", "assistant", "--text", "Ferry booked", "--id", "a1")


# -- item 11: a failed per-turn commit is a warning; the retry is a no-op that says so ---------


def test_a_broken_session_git_commit_reports_the_stored_turn_and_the_retry_adds_nothing(home):
    real_cli(home, "session", "new", "--id", "s")
    real_cli(home, "session", "add", "s", "--role", "user", "--text", "hi", "--id", "u1")
    real_cli(home, "session", "add", "s", "--role", "assistant", "--text", "yo", "--id", "a1")
    real_cli(home, "session", "add", "s", "--role", "user", "--text", "Plan day two",
             "--id", "u2")
    index = home / "sessions" / "s" / ".git" / "index"
    index.unlink()
    index.mkdir()  # git cannot write its index: every commit fails
    args = ("session", "add", "s", "--role", "assistant", "--text", "Day two: the castle",
            "--id", "a2", "--json")
    first = real_cli(home, *args)
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert (out["node_id"], out["head_id"]) == ("a2", "a2")
    assert any("history was not committed" in w for w in out["warnings"])
    assert b"warning: " in first.stderr
    again = real_cli(home, *args)
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)
    assert out["created"] is False and "nothing added" in out["note"]
    names = sorted(p.name for p in (home / "sessions" / "s" / "history").iterdir())
    assert [n.split("-", 2)[2] for n in names] == ["u1.json", "a1.json", "u2.json", "a2.json"]
    index.rmdir()  # repaired: the identical retry now commits the turn it stored before
    healed = real_cli(home, *args)
    assert "warnings" not in json.loads(healed.stdout)
    log = subprocess.run(["git", "log", "--format=%s"], cwd=home / "sessions" / "s",
                         capture_output=True, text=True, check=True).stdout
    assert log.splitlines()[0] == "turn: Plan day two"


def test_add_with_an_existing_id_and_different_text_is_refused(cli):
    chat(cli)
    err = one_line_error(cli("session", "add", "s", "--role", "assistant", "--text", "Other",
                             "--id", "a1"), 2)
    assert "a1 already exists" in err
    same = cli.json("session", "add", "s", "--role", "assistant", "--text", "Ferry booked",
                    "--id", "a1")
    assert same["created"] is False
    assert len(cli.json("session", "show", "s")["messages"]) == 2


# -- item 12: one line instead of a traceback ----------------------------------------------------


def test_a_300_character_session_id_is_refused_in_one_line(cli, home):
    long_id = "x" * 300
    assert "bytes long" in one_line_error(cli("session", "new", "--id", long_id), 2)
    one_line_error(cli("session", "add", long_id, "--role", "user", "--text", "hi"), 2)
    one_line_error(cli("session", "show", long_id), 2)
    one_line_error(cli("memory", "status", long_id), 2)


def test_a_topic_file_with_a_non_utf8_name_does_not_break_search(cli, home):
    chat(cli)
    cli.json("memory", "write", "s", "--force")
    topics = os.fsencode(home / "memory" / "topics")
    with open(os.path.join(topics, b"bad-\xff.md"), "wb") as fh:
        fh.write(b"# Ferry\n\nAnother ferry paragraph. ^abcdef12\n")
    hits = cli.json("memory", "search", "ferry")["hits"]
    assert hits and all("\udcff" not in h["path"] for h in hits)


def test_a_search_index_location_that_cannot_be_written_is_one_line(cli, home):
    chat(cli)
    cli.json("memory", "write", "s", "--force")
    runtime = home / "memory" / ".scriptorium"
    for f in runtime.glob("search.sqlite*"):
        f.unlink()
    (runtime / "search.sqlite").mkdir()  # SQLite can neither open nor replace it
    (runtime / "search.sqlite" / "keep").write_text("x")
    result = cli("memory", "search", "ferry")
    assert result.exit_code == 5 and "Traceback" not in result.output
    # what the library logged on the way (the rebuild it tried) is a warning line; the error
    # is the one last line
    *warned, err = result.stderr.strip().splitlines()
    assert all(line.startswith("warning: search index") for line in warned), result.stderr
    assert err.startswith("error: search index") and "search.sqlite" in err


def test_a_write_lock_that_is_a_directory_is_reported_not_a_traceback(cli, home):
    chat(cli)
    cli.json("memory", "write", "s", "--force")
    cli.json("session", "add", "s", "--role", "user", "--text", "And the hotel?", "--id", "u2")
    lock = home / "memory" / ".scriptorium" / "write.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()
    result = cli("memory", "write", "s", "--force", "--json")
    assert result.exit_code == 1 and "Traceback" not in result.output
    failure = json.loads(result.stdout)["sessions"][0]["failure"]
    assert "write.lock is not a regular file" in failure["message"]


def test_a_session_lock_that_is_a_directory_is_one_line(cli, home):
    chat(cli)
    lock = home / "sessions" / "s" / ".session.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()
    err = one_line_error(cli("session", "add", "s", "--role", "user", "--text", "more"), 4)
    assert ".session.lock" in err


def test_a_history_that_is_a_plain_file_is_reported_per_session(cli, home):
    chat(cli, "good")
    chat(cli, "broken")
    hist = home / "sessions" / "broken" / "history"
    shutil.rmtree(hist)
    hist.write_text("not a directory\n")
    status = cli("memory", "status", "--json")
    assert "Traceback" not in status.output
    rows = {r["session_id"]: r for r in json.loads(status.stdout)["sessions"]}
    assert "not a directory" in rows["broken"]["error"] and rows["good"]["branches"]
    write = cli("memory", "write", "--all", "--force", "--json")
    assert write.exit_code == 1 and "Traceback" not in write.output
    rows = {r["session_id"]: r for r in json.loads(write.stdout)["sessions"]}
    assert rows["good"]["marked"] == ["u1", "a1"]
    assert "not a directory" in rows["broken"]["failure"]["message"]
    verify = cli("memory", "verify", "--json")
    assert verify.exit_code == 1 and "Traceback" not in verify.output
    kinds = {(p["kind"], p["session_id"]) for p in json.loads(verify.stdout)["problems"]}
    assert ("session_unreadable", "broken") in kinds
    watch = cli("memory", "watch", "--once", "--idle-seconds", "0", "--json")
    assert "Traceback" not in watch.output
    terminal = json.loads(watch.stdout)["terminal"]
    assert [t["session_id"] for t in terminal] == ["broken"]


# -- item 13: bad input a new user tries is a clear error ---------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_an_empty_or_blank_text_is_refused_by_every_command_that_takes_text(cli, text):
    chat(cli)
    for args in (("session", "add", "s", "--role", "user"),
                 ("session", "retry", "s", "a1"),
                 ("session", "edit", "s", "u1"),
                 ("session", "spawn", "s", "--caller", "a1"),
                 ("session", "compact", "s", "--covers", "u1", "--covers", "a1")):
        assert "empty or only whitespace" in one_line_error(cli(*args, "--text", text), 2)
    assert len(cli.json("session", "show", "s")["messages"]) == 2


def test_text_is_refused_when_given_twice_or_not_at_all_or_from_a_bad_file(cli, tmp_path):
    chat(cli)
    add = ("session", "add", "s", "--role", "user")
    note = tmp_path / "note.txt"
    note.write_text("from a file")
    assert "exactly one" in one_line_error(cli(*add), 2)
    assert "exactly one" in one_line_error(cli(*add, "--text", "x", "--text-file", str(note)), 2)
    assert "cannot read" in one_line_error(cli(*add, "--text-file", str(tmp_path / "no")), 2)
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    assert "not valid UTF-8" in one_line_error(
        cli(*add, "--text-file", str(tmp_path / "latin1.txt")), 2)


def test_large_messages_come_from_a_file_or_standard_input(home, tmp_path):
    real_cli(home, "session", "new", "--id", "s")
    big = ("A long pasted log line with ünïcode.\n" * 6000).encode("utf-8")  # ~230 kB
    note = tmp_path / "big.txt"
    note.write_bytes(big)
    first = real_cli(home, "session", "add", "s", "--role", "user", "--text-file", str(note),
                     "--json")
    assert first.returncode == 0, first.stderr
    second = real_cli(home, "session", "add", "s", "--role", "assistant", "--text", "-",
                      "--json", stdin=big)
    assert second.returncode == 0, second.stderr
    shown = json.loads(real_cli(home, "session", "show", "s", "--json").stdout)
    assert [m["content"].encode("utf-8") for m in shown["messages"]] == [big, big]


def test_a_spawn_naming_an_unknown_caller_session_is_refused(cli):
    chat(cli)
    err = one_line_error(cli("session", "spawn", "s", "--caller", "x1", "--text", "go",
                             "--caller-session", "nowhere"), 3)
    assert "nowhere" in err


def test_following_a_source_that_is_not_archived_is_not_found_and_says_to_write_it(cli):
    chat(cli)
    for unknown in ("openprogram/s/unknown-node", "openprogram/nosession/n1", "other/t/m"):
        assert "neither in the evidence archive" in one_line_error(
            cli("memory", "follow", unknown), 3)
    # stored in the session, not yet written: exit 3, one line saying what to do; --json
    # still carries the stored turn in the error's details
    pending = cli("memory", "follow", "openprogram/s/u1", "--json")
    err = one_line_error(pending, 3)
    assert "not in the evidence archive yet" in err and "memory write s" in err
    error = json.loads(pending.stdout)["error"]
    assert error["code"] == "SOURCE_NOT_WRITTEN" and error["retryable"] is False
    assert error["details"]["in_session_store"] is True and error["details"]["archived"] is False
    assert error["details"]["turn"]["id"] == "u1" and error["details"]["turn"]["role"] == "user"
    assert "not in the evidence archive yet" in one_line_error(
        cli("memory", "follow", "openprogram/s/u1"), 3)
    cli.json("memory", "write", "s", "--force")
    assert cli.json("memory", "follow", "openprogram/s/u1")["archived"] is True


def test_an_unknown_key_in_config_toml_is_refused_naming_it(cli, home):
    chat(cli)
    (home / "config.toml").write_text("[memory]\ntrigger_token = 5\n")
    err = one_line_error(cli("memory", "write", "s"), 2)
    assert "trigger_token" in err and "trigger_tokens" in err
    (home / "config.toml").write_text("[writer.llm]\nmodle = 'x'\n")
    assert "modle" in one_line_error(cli("memory", "status"), 2)
    (home / "config.toml").write_text("title = 'x'\n")
    assert "'title'" in one_line_error(cli("memory", "status"), 2)


def test_an_unknown_section_in_config_toml_is_a_warning(cli, home):
    chat(cli)
    (home / "config.toml").write_text("[memory]\ntrigger_tokens = 5\n\n[someone_else]\nx = 1\n")
    result = cli("memory", "status", "--json")
    assert result.exit_code == 0
    assert "someone_else" in result.stderr and "ignored" in result.stderr


def test_memory_status_of_a_home_that_does_not_exist_is_refused_and_creates_nothing(tmp_path):
    missing = tmp_path / "no-such-home"
    for args in (("memory", "status"), ("memory", "show", "x.md"),
                 ("memory", "follow", "openprogram/s/n")):
        one_line_error(Cli(missing)(*args), 3)
    assert not missing.exists()
