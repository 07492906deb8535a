"""Which host this process is, in a home many hosts share.

A PostgreSQL home keeps some state per host: a source file's import offsets are keyed by the
host that read it (a path names a file on one machine), and a worker's name says where it
runs. The host is ``$SCRIPTORIUM_HOST`` when set (a container whose OS host name changes at
every start sets it, so its import ledger rows stay its own), else the OS host name.
"""

from __future__ import annotations

import os
import socket

HOST_ENV = "SCRIPTORIUM_HOST"


def host_name() -> str:
    """``$SCRIPTORIUM_HOST`` (stripped) when set and not empty, else the OS host name."""
    return os.environ.get(HOST_ENV, "").strip() or socket.gethostname()
