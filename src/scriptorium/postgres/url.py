"""Home URLs: which database and which home in it. Pure parsing; no driver is imported, so
``--home`` can be told apart from a directory path on a machine without the extra."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import InvalidInput

SCHEMES = ("postgresql", "postgres")
DEFAULT_HOME = "default"
HOME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
SCHEMA_PREFIX = "scriptorium_"


def is_postgres_url(value: object) -> bool:
    """True when ``value`` is a ``postgresql://`` (or ``postgres://``) URL, not a path."""
    return isinstance(value, str) and value.split("://", 1)[0].lower() in SCHEMES \
        and "://" in value


@dataclass(frozen=True)
class PgTarget:
    """A home in a database: the libpq connection URL (without our ``home`` parameter), the
    home's name and the schema that holds it."""

    conninfo: str
    home: str

    @property
    def schema(self) -> str:
        return SCHEMA_PREFIX + self.home

    @property
    def url(self) -> str:
        """The home URL again (``?home=`` included): what another process opens."""
        parts = urlsplit(self.conninfo)
        query = [*parse_qsl(parts.query), ("home", self.home)]
        return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))

    @property
    def display(self) -> str:
        """The URL as it may be printed: the password replaced by ``***``."""
        parts = urlsplit(self.conninfo)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":***"
            netloc = f"{userinfo}@{host}"
        query = [(k, "***" if k == "password" else v) for k, v in parse_qsl(parts.query)]
        query.append(("home", self.home))
        return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), ""))


def parse_home_url(url: str) -> PgTarget:
    """Split ``url`` into the database to connect to and the home inside it.

    The home is the ``home`` query parameter (default ``default``): lower-case letters,
    digits and ``_``, starting with a letter, at most 40 characters (it names a schema)."""
    if not is_postgres_url(url):
        raise InvalidInput(f"not a PostgreSQL home URL (postgresql://...): {url!r}")
    parts = urlsplit(url)
    if parts.fragment:
        raise InvalidInput("a PostgreSQL home URL takes no #fragment; name the home with "
                           "?home=NAME")
    query = parse_qsl(parts.query, keep_blank_values=True)
    homes = [v for k, v in query if k == "home"]
    if len(homes) > 1:
        raise InvalidInput("a PostgreSQL home URL names one home (?home= given twice)")
    home = homes[0] if homes else DEFAULT_HOME
    if not HOME_RE.fullmatch(home):
        raise InvalidInput(f"home name {home!r} in the URL: use 1-40 lower-case letters, "
                           "digits or _, starting with a letter")
    rest = urlencode([(k, v) for k, v in query if k != "home"])
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, ""))
    return PgTarget(conninfo=conninfo, home=home)
