"""The PostgreSQL home's foundation: home URLs, the versioned schema, and connecting, against
a real server (tests/pgserver.py)."""

from __future__ import annotations

import threading

import pytest

from scriptorium.errors import InvalidInput, ReasonCode, exit_code_for
from scriptorium.postgres import is_postgres_url, parse_home_url
from scriptorium.postgres.connect import DatabaseUnreachable, PgHome
from scriptorium.postgres.migrations import MIGRATIONS, SchemaTooNew


def test_a_postgresql_url_is_told_apart_from_a_directory_path():
    assert is_postgres_url("postgresql://u@h/db")
    assert is_postgres_url("postgres://h/db?home=x")
    assert not is_postgres_url("/home/me/.scriptorium")
    assert not is_postgres_url("postgresql")
    assert not is_postgres_url(None)


def test_the_home_parameter_names_the_home_and_is_not_sent_to_the_server():
    target = parse_home_url("postgresql://me:secret@db.example:5433/mem?home=acme&sslmode=disable")
    assert target.home == "acme"
    assert target.schema == "scriptorium_acme"
    assert "home=" not in target.conninfo and "sslmode=disable" in target.conninfo
    assert "secret" not in target.display and "home=acme" in target.display
    assert parse_home_url("postgresql://h/db").home == "default"


@pytest.mark.parametrize("url", [
    "postgresql://h/db?home=Acme",            # upper case would be a different schema
    "postgresql://h/db?home=1abc",
    "postgresql://h/db?home=a;drop",
    "postgresql://h/db?home=" + "a" * 41,
    "postgresql://h/db?home=a&home=b",
    "postgresql://h/db#frag",
])
def test_a_bad_home_name_is_refused_with_one_line(url):
    with pytest.raises(InvalidInput) as err:
        parse_home_url(url)
    assert "\n" not in str(err.value)


def test_opening_a_new_home_creates_its_schema_at_the_current_version(pg_url):
    with PgHome.open(pg_url) as home:
        assert home.versions == {c: len(steps) for c, steps in MIGRATIONS.items()}
        with home.connection() as conn:
            schema = conn.execute("SELECT current_schema()").fetchone()[0]
            assert schema == home.target.schema
            assert conn.execute("SELECT count(*) FROM home_info").fetchone()[0] == 1


def test_reopening_a_home_runs_no_step_twice(pg_url):
    with PgHome.open(pg_url):
        pass
    with PgHome.open(pg_url) as home:
        with home.connection() as conn:
            assert conn.execute("SELECT count(*) FROM home_info").fetchone()[0] == 1


def test_two_homes_in_one_database_do_not_see_each_other(pg_server_url):
    from pgserver import home_url

    with PgHome.open(home_url(pg_server_url)) as a, PgHome.open(home_url(pg_server_url)) as b:
        with a.connection() as conn:
            conn.execute("INSERT INTO home_info VALUES ('only-in-a', 'x')")
        with b.connection() as conn:
            keys = [r[0] for r in conn.execute("SELECT key FROM home_info")]
        assert "only-in-a" not in keys


def test_concurrent_first_opens_create_the_schema_once(pg_url):
    errors: list[BaseException] = []

    def open_once() -> None:
        try:
            PgHome.open(pg_url).close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_once) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with PgHome.open(pg_url) as home, home.connection() as conn:
        assert conn.execute("SELECT count(*) FROM home_info").fetchone()[0] == 1


def test_a_database_upgraded_by_a_newer_scriptorium_is_refused(pg_url):
    with PgHome.open(pg_url) as home, home.connection() as conn:
        conn.execute("UPDATE schema_version SET version = version + 1 WHERE component = 'home'")
    with pytest.raises(SchemaTooNew) as err:
        PgHome.open(pg_url)
    assert err.value.code == ReasonCode.SCHEMA_TOO_NEW and "upgrade scriptorium" in str(err.value)


def test_an_unreachable_server_is_a_one_line_retryable_error():
    from pgserver import _free_port

    with pytest.raises(DatabaseUnreachable) as err:
        PgHome.open(f"postgresql://postgres:pw@127.0.0.1:{_free_port()}/postgres?home=x")
    assert err.value.retryable and exit_code_for(err.value) == 5
    assert "\n" not in str(err.value) and "pw" not in str(err.value)
