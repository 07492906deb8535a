"""Worker processes for the PostgreSQL benchmarks (bench_pg_workers.py): run N of them with
or without a killer, the code they run (ours or a baseline revision's ``src/``), and the CPU
seconds they and the PostgreSQL server spend, with the machine load to print beside them."""

from __future__ import annotations

import contextlib
import os
import random
import resource
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def env(src: Path = ROOT / "src") -> dict[str, str]:
    """The environment of a child process running the code in ``src`` (ours, or a
    baseline revision's)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(src),
                                                          os.environ.get("PYTHONPATH", "")])}


class RawHome:
    """Plain connections into a home's schema, with no migration: what the benchmark reads
    while a baseline revision's workers (which refuse a schema newer than theirs) run."""

    def __init__(self, url: str) -> None:
        from scriptorium.postgres.url import parse_home_url

        self.target = parse_home_url(url)

    @contextlib.contextmanager
    def connection(self) -> Any:
        import psycopg

        with psycopg.connect(self.target.conninfo) as conn:
            conn.execute(f'SET search_path TO "{self.target.schema}"')
            yield conn


def baseline_src(rev: str, into: Path) -> Path:
    """The ``src/`` of revision ``rev`` of this repository, exported under ``into``."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into / "src"


# -- CPU seconds: the workers (this script's children) and the PostgreSQL server -------------

def _proc_stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


class CpuMeter:
    """CPU seconds spent by this script's child processes (the workers, counted once they
    are reaped, killed ones included) and by the PostgreSQL server: its postmaster, which
    collects the CPU of every backend that ended, plus every live backend. The server part
    is None when /proc does not show the server (another machine)."""

    def __init__(self, pg: Any) -> None:
        with pg.connection() as conn:  # its backend's parent, read while the backend lives
            fields = _proc_stat(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        self.postmaster = int(fields[1]) if fields else None
        self.tick = os.sysconf("SC_CLK_TCK")

    def server(self) -> float | None:
        if self.postmaster is None:
            return None
        own = _proc_stat(self.postmaster)
        if own is None:
            return None
        total = sum(int(x) for x in own[11:15])  # utime, stime, cutime, cstime
        for name in os.listdir("/proc"):
            fields = _proc_stat(int(name)) if name.isdigit() else None
            if fields and fields[1] == str(self.postmaster):
                total += int(fields[11]) + int(fields[12])
        return total / self.tick

    def read(self) -> tuple[float, float | None]:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime, self.server()


# -- running worker processes, with or without a killer ------------------------------------

def run_workers(spawn: Callable[[int, Any], subprocess.Popen], count: int,
                kill_every: float | None, owing: Callable[[], int]) -> dict[str, Any]:
    """Start ``count`` workers and wait for all to exit (they drain, then stop). With
    ``kill_every``: every that many seconds, while work is owed, SIGKILL a random live worker
    and start a replacement. Returns the wall time, kills, and every worker's stdout (each
    goes to a file: a pipe nobody reads would stop a worker once full)."""
    files: list[Any] = []

    def start(i: int) -> subprocess.Popen:
        files.append(tempfile.TemporaryFile("w+"))
        return spawn(i, files[-1])

    began = time.perf_counter()
    procs = [start(i) for i in range(count)]
    kills = 0
    next_kill = time.monotonic() + (kill_every or 0)
    while any(p.poll() is None for p in procs):
        time.sleep(0.05)
        if kill_every and time.monotonic() >= next_kill:
            next_kill = time.monotonic() + kill_every
            live = [p for p in procs if p.poll() is None]
            if live and owing() > 0:
                random.choice(live).send_signal(signal.SIGKILL)
                kills += 1
                procs.append(start(len(procs)))
    if kill_every and owing() > 0:  # the last kill landed after every other worker ended
        start(len(procs)).wait()
    wall = time.perf_counter() - began
    outputs = []
    for fh in files:
        fh.seek(0)
        outputs.append(fh.read())
        fh.close()
    return {"wall": wall, "kills": kills, "outputs": outputs}
