"""Shared test helpers: temporary homes, reference-system fixtures and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from pgmemkit import new_homes
from storekit import HOME_KINDS, open_session_store
from testkit import CI_MAX_EXAMPLES, Cli, copy_state, hypothesis_profile

# Hypothesis profiles. "ci" (chosen when CI=true, or HYPOTHESIS_PROFILE=ci) is bounded and
# reproducible: few examples (testkit.examples caps the tests that ask for more), no
# deadline (the machine is loaded; speed is never a test), the same examples every run.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", max_examples=CI_MAX_EXAMPLES, deadline=None, derandomize=True,
                          print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(hypothesis_profile())


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty scriptorium home."""
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture
def written_home(tmp_path: Path) -> Path:
    return copy_state("written", tmp_path / "written")


@pytest.fixture
def legacy_home(tmp_path: Path) -> Path:
    return copy_state("legacy-cursor", tmp_path / "legacy")


@pytest.fixture
def cli(home: Path) -> Cli:
    return Cli(home)


# -- PostgreSQL: one real server for the whole run, one fresh home (schema) per test -----------

@pytest.fixture(scope="session")
def pg_server_url():
    """The base URL of a real PostgreSQL server (see tests/pgserver.py). Without one (no
    binaries, no psycopg) the PostgreSQL tests skip, except in CI, where they fail."""
    import os

    from pgserver import ENV, PgServer

    try:
        import psycopg  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("psycopg is not installed (CI must test the PostgreSQL home)")
        pytest.skip("psycopg is not installed")
    if os.environ.get(ENV):
        yield os.environ[ENV]
        return
    server = PgServer()
    try:
        url = server.start()
    except RuntimeError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no PostgreSQL server for the tests: {exc}")
        pytest.skip(f"no PostgreSQL server: {exc}")
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server_url: str) -> str:
    """A URL naming a fresh, empty PostgreSQL home in the test server."""
    from pgserver import home_url

    return home_url(pg_server_url)


# -- either home: the session-store behaviour tests run on both --------------------------------

@pytest.fixture(params=HOME_KINDS)
def home_kind(request) -> str:
    return request.param


@pytest.fixture
def store_location(home_kind: str, tmp_path: Path, request) -> str:
    """Where an empty home of ``home_kind`` lives: a sessions directory, or a fresh home URL."""
    if home_kind == "directory":
        return str(tmp_path / "home" / "sessions")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def any_store(home_kind: str, store_location: str):
    """An empty session store of either kind (the directory one without git commits)."""
    store = open_session_store(home_kind, store_location)
    yield store
    if home_kind == "postgres":
        store.close()


@pytest.fixture
def homes(home_kind: str, tmp_path: Path, request):
    """Memory on an empty home of ``home_kind``: ``homes.open(writer, **settings)`` is one
    process's view of it (the memory behaviour tests that inspect no files run on both)."""
    h = new_homes(home_kind, tmp_path, request)
    yield h
    h.close()


@pytest.fixture(scope="module", params=HOME_KINDS)
def shared_homes(request, tmp_path_factory):
    """``homes`` for a module whose tests only read what one setup wrote: one empty home of
    each kind per module."""
    h = new_homes(request.param, tmp_path_factory.mktemp("shared"), request)
    yield h
    h.close()
