"""Connecting to a PostgreSQL home: the driver (the optional ``postgres`` extra), a pool of
connections whose ``search_path`` is the home's schema, and the schema brought up to date on
first open.

A dedicated connection (:meth:`PgHome.dedicated`) is for what must outlive one pooled use:
LISTEN, and session-level advisory locks that PostgreSQL releases when their holder dies.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from ..errors import ConcurrentUpdate, InvalidInput, ReasonCode
from .migrations import migrate
from .url import PgTarget, parse_home_url

CONNECT_TIMEOUT_SECONDS = 10
INSTALL_HINT = "pip install 'scriptorium[postgres]'"


class PostgresUnavailable(InvalidInput):
    """A PostgreSQL home was asked for but the driver is not installed."""

    code = ReasonCode.POSTGRES_UNAVAILABLE


class DatabaseUnreachable(ConcurrentUpdate):
    """The database did not answer; retrying later may work."""

    code = ReasonCode.DATABASE_UNREACHABLE


def _driver() -> Any:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401  (checked here so the error names the extra)
    except ImportError as exc:
        raise PostgresUnavailable(f"a PostgreSQL home needs psycopg 3 and its pool "
                                  f"({exc.name} is missing): {INSTALL_HINT}") from None
    return psycopg


def home_exists(url: str) -> bool:
    """Does the home ``url`` names exist (its schema created by an earlier open)? Asked
    without creating anything, so read-only commands can refuse a home that is not there."""
    psycopg = _driver()
    target = parse_home_url(url)
    try:
        with psycopg.connect(target.conninfo, connect_timeout=CONNECT_TIMEOUT_SECONDS) as conn:
            row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                               (target.schema,)).fetchone()
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseUnreachable(f"PostgreSQL at {target.display} did not answer: "
                                  f"{first}") from None
    return row is not None


class PgHome:
    """One home in one database: a connection pool pinned to the home's schema.

    Cheap to share between threads (the pool is thread-safe); close it when done."""

    def __init__(self, target: PgTarget, *, max_size: int = 4) -> None:
        psycopg = _driver()
        from psycopg_pool import ConnectionPool

        self.target = target
        self._psycopg = psycopg
        self._kwargs: dict[str, Any] = {
            "options": f"-c search_path={target.schema}",
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        }
        try:
            with psycopg.connect(target.conninfo, **self._kwargs) as conn:
                self.versions = migrate(conn, target.schema)
        except psycopg.OperationalError as exc:
            raise self._unreachable(exc) from None
        self.pool = ConnectionPool(target.conninfo, min_size=1, max_size=max_size,
                                   kwargs=self._kwargs, open=False)
        self.pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)

    @classmethod
    def open(cls, url: str, **kw: Any) -> "PgHome":
        """Connect to the home ``url`` names, creating or upgrading its schema."""
        return cls(parse_home_url(url), **kw)

    def _unreachable(self, exc: BaseException) -> DatabaseUnreachable:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return DatabaseUnreachable(f"PostgreSQL at {self.target.display} did not answer: "
                                   f"{first}")

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection; its work commits when the block ends without an error."""
        try:
            with self.pool.connection() as conn:
                yield conn
        except self._psycopg.OperationalError as exc:
            raise self._unreachable(exc) from None

    def dedicated(self, *, autocommit: bool = True) -> Any:
        """A connection of its own (not pooled), for LISTEN or locks held until it closes."""
        try:
            return self._psycopg.connect(self.target.conninfo, autocommit=autocommit,
                                         **self._kwargs)
        except self._psycopg.OperationalError as exc:
            raise self._unreachable(exc) from None

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> "PgHome":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
