"""The PostgreSQL home: the same sessions and memory as a directory home, in one database.

A home URL (``postgresql://user@host:5432/db?home=NAME``) names a database and a home inside
it; each home is one PostgreSQL schema (``scriptorium_NAME``), so one database holds many
homes (tenants) and nothing in one can see another. Layers, lowest first: :mod:`.url`
(parsing, no driver needed), :mod:`.migrations` (the versioned schema), :mod:`.connect`
(the driver, the pool, creating and upgrading the schema).
"""

from .url import PgTarget, is_postgres_url, parse_home_url

__all__ = ["PgTarget", "is_postgres_url", "parse_home_url"]
