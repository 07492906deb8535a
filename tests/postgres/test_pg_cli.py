"""Pointing the CLI at a PostgreSQL home: ``--home postgresql://…`` or ``$SCRIPTORIUM_HOME``,
settings without a config.toml, and one-line errors for a home that is not there, a URL that
is wrong and a server that does not answer. (The `session` commands themselves run on both
homes in tests/sessions/test_cli.py.)"""

from __future__ import annotations

import socket

import pytest

from testkit import Cli, json_error

from scriptorium.cli.app import App
from scriptorium.config import load_settings


def test_scriptorium_home_may_name_a_postgresql_home(pg_url, monkeypatch):
    from click.testing import CliRunner

    from scriptorium.cli import main

    monkeypatch.setenv("SCRIPTORIUM_HOME", pg_url)
    runner = CliRunner()
    assert runner.invoke(main, ["session", "new", "--id", "s1"]).exit_code == 0
    added = runner.invoke(main, ["session", "add", "s1", "--role", "user", "--text", "hi"])
    assert added.exit_code == 0, added.output
    assert Cli(pg_url).json("session", "list")["sessions"][0]["session_id"] == "s1"


def test_a_read_only_command_on_a_home_never_created_is_not_found(pg_server_url):
    from pgserver import home_url

    url = home_url(pg_server_url)
    result = Cli(url)("memory", "status", "--json")
    assert result.exit_code == 3 and json_error(result)["code"] == "NOT_FOUND"
    assert "no scriptorium home" in result.stderr
    with pytest.raises(Exception, match="no scriptorium home"):
        App(url).require_home()
    Cli(url).json("session", "list")  # a session command opens (creates) the home
    App(url).require_home()


def test_a_bad_home_name_in_the_url_is_one_line_exit_two(pg_server_url):
    result = Cli(pg_server_url + "?home=Not-OK")("session", "list", "--json")
    assert result.exit_code == 2 and "home name" in json_error(result)["message"]


def test_a_server_that_does_not_answer_is_one_line_exit_five_without_the_password():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    url = f"postgresql://me:s3cret@127.0.0.1:{port}/db?home=x"
    result = Cli(url)("session", "list", "--json")
    assert result.exit_code == 5, result.output
    assert json_error(result)["code"] == "DATABASE_UNREACHABLE"
    assert "s3cret" not in result.output + result.stderr


def test_a_postgresql_home_takes_its_settings_from_the_environment(pg_url):
    settings = load_settings(pg_url, environ={"SCRIPTORIUM_TRIGGER_TOKENS": "123"})
    assert settings.trigger_tokens == 123


def test_without_the_postgres_extra_a_url_home_names_the_install_command(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the extra were not installed
    result = Cli("postgresql://me@127.0.0.1:1/db")("session", "list", "--json")
    assert result.exit_code == 2, result.output
    err = json_error(result)
    assert err["code"] == "POSTGRES_UNAVAILABLE" and "scriptorium[postgres]" in err["message"]
