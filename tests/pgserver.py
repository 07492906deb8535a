"""A real PostgreSQL server for the tests: the one `.ci/run` started (``SCRIPTORIUM_TEST_PG``),
else one started here from the Debian package in a temporary data directory, as an
unprivileged user when we are root, stopped when the tests end.

Each test gets its own home (its own schema) in that server, so tests never see each other.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

ENV = "SCRIPTORIUM_TEST_PG"


def _bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                      key=lambda p: int(Path(p).parent.parent.name))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgServer:
    """A throwaway server: ``start()`` returns its base URL; ``stop()`` ends it and removes
    its data directory. Tests run it without fsync (speed, nothing to keep); benchmarks ask
    for ``durable=True`` (fsync and synchronous commit on, as a real server runs), so their
    figures compare like with like."""

    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable
        self.bindir = _bindir()
        self.dir: Path | None = None
        self.port = 0
        self.user = "nobody" if os.geteuid() == 0 else None
        self.opts = ""

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

    def start(self) -> str:
        if self.bindir is None:
            raise RuntimeError("PostgreSQL server binaries (pg_ctl) not found")
        self.dir = Path(tempfile.mkdtemp(prefix="scriptorium-pg-"))
        self.dir.chmod(0o755)
        data = self.dir / "data"
        data.mkdir(mode=0o700)
        if self.user:
            shutil.chown(self.dir, self.user)
            shutil.chown(data, self.user)
        done = self._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust",
                         "-E", "UTF8", "--no-sync", "--locale=C")
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-400:]}")
        self.port = _free_port()
        opts = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                f"-c unix_socket_directories={self.dir} -c max_connections=200")
        if not self.durable:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self.opts = opts
        self._start()
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _start(self) -> None:
        assert self.dir is not None
        done = self._run("pg_ctl", "-D", str(self.dir / "data"), "-o", self.opts, "-l",
                         str(self.dir / "log"), "-w", "-t", "60", "start")
        if done.returncode:
            log = (self.dir / "log").read_text(errors="replace")[-400:]
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log}")

    def crash_restart(self) -> None:
        """Stop the server as a crash would (``immediate``: no shutdown checkpoint, so the
        next start runs crash recovery) and start it again on the same port."""
        assert self.dir is not None
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")
        self._start()

    def stop(self) -> None:
        if self.dir is None:
            return
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


def home_url(base: str, prefix: str = "t") -> str:
    """A fresh home (its own schema) in the server at ``base``."""
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}home={prefix}_{uuid.uuid4().hex[:16]}"


def main(argv: list[str]) -> int:
    """``python tests/pgserver.py start`` prints ``URL DIR`` of a fresh server (used by
    `.ci/run`); ``python tests/pgserver.py stop DIR`` stops it and removes DIR."""
    server = PgServer()
    if argv[:1] == ["start"]:
        print(server.start(), server.dir)
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        server.dir = Path(argv[1])
        server.stop()
        return 0
    print("usage: pgserver.py start | stop DIR")
    return 2


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
