"""The PostgreSQL home's search index build beside SQLite's, and beside a baseline revision's.

For each size, one synthetic workspace (topic_gen.py's generator: topics citing archived
turns) is indexed, each build in a fresh process on one throwaway durable server: the
directory home's SQLite FTS5 index, the PostgreSQL index with our code, and the PostgreSQL
index with ``--baseline-rev``'s code (default bd0982f). Wall-clock, the building process's
CPU and the server's CPU for that build (its postmaster's reaped backends and its live
processes, from /proc, up to a CHECKPOINT after the build: the writes the server owes for it
count too), and the ratio to SQLite (SQLite's work is all in its process, so the CPU ratio is
client + server over SQLite's CPU: much less sensitive to the machine's load than
wall-clock); the machine load is printed with every row. On the throwaway server autovacuum
is off, so one build's deferred vacuum never lands in the next build's figures (a build
runs its own ANALYZE).

``--phases`` adds, for our build at the largest size, where the server's CPU goes, statement
by statement (the backend's CPU and its parallel workers', from /proc; COPY: the rest of the
backend's CPU, while the client parses and sends the documents).

Run: python benchmarks/bench_pg_index_build.py [--sizes 0.5,2,9.8] [--baseline-rev bd0982f]
     [--phases] [--url postgresql://…]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

from pgserver import ENV, PgServer, home_url  # noqa: E402
from worker_procs import CpuMeter  # noqa: E402
from workspaces import baseline_src, copy_workspace, load, ours_src  # noqa: E402

BUILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {src!r})
from scriptorium.memory.workspace import Workspace
ws = Workspace.open(Path({root!r}))
c0, t0 = time.process_time(), time.perf_counter()
phases = None
if {url!r}:
    from scriptorium.memory.search.pg_index import PgSearchIndex
    from scriptorium.memory.search.pg_source import DirectorySource
    from scriptorium.postgres.connect import PgHome
    with PgHome.open({url!r}) as pg:
        index = PgSearchIndex(pg, DirectorySource(ws))
        if {phases!r}:
            sys.path.insert(0, {bench!r})
            from bench_pg_index_build import traced_rebuild
            docs, phases = traced_rebuild(pg, index)
        else:
            docs = index.rebuild(False)
else:
    from scriptorium.memory.search import rebuild
    docs = rebuild(ws, False)
print(json.dumps({{"s": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "docs": docs, "phases": phases}}))
"""

CREATE = """
import sys
sys.path.insert(0, {src!r})
from scriptorium.postgres.connect import PgHome
PgHome.open({url!r}).close()
"""


def traced_rebuild(pg: Any, index: Any) -> tuple[int, list[tuple[str, float]]]:
    """``index.rebuild(False)`` in one connection whose backend's CPU (and its parallel
    workers', once the postmaster reaped them) is read around each statement; returns the
    documents and (statement, CPU s) in order, the backend CPU no statement took last (the
    COPY of documents and files)."""
    from worker_procs import _proc_stat

    tick = os.sysconf("SC_CLK_TCK")
    postmaster = 0

    def cpu(pid: int) -> float:
        fields = _proc_stat(pid) or ["0"] * 15
        reaped = _proc_stat(postmaster) or ["0"] * 15
        return (int(fields[11]) + int(fields[12]) + int(reaped[13]) + int(reaped[14])) / tick

    phases: list[tuple[str, float]] = []
    with pg.connection() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        postmaster = int((_proc_stat(pid) or ["0", "0"])[1])
        real = type(conn).execute
        start = cpu(pid)

        def timed(self: Any, sql: Any, params: Any = None, **kw: Any) -> Any:
            before = cpu(pid)
            try:
                return real(self, sql, params, **kw)
            finally:
                time.sleep(0.05)  # parallel workers exit, and are reaped
                phases.append((" ".join(str(sql).split()[:4]), cpu(pid) - before))

        type(conn).execute = timed  # type: ignore[method-assign]
        try:
            docs = index.rebuild(False, conn=conn)
        finally:
            type(conn).execute = real  # type: ignore[method-assign]
        before = cpu(pid)
        conn.commit()
        phases.append(("COMMIT", cpu(pid) - before))
        phases.append(("COPY (documents, files)",
                       cpu(pid) - start - sum(c for _, c in phases)))
    with pg.dedicated() as own:  # what rebuild() runs once the build committed
        pid = own.execute("SELECT pg_backend_pid()").fetchone()[0]
        before = cpu(pid)
        own.execute("VACUUM search_terms")
        phases.append(("VACUUM search_terms (after the commit)", cpu(pid) - before))
    return docs, phases


def build(src: Path, root: Path, url: str = "", meter: CpuMeter | None = None,
          checkpoint: Callable[[], None] | None = None, phases: bool = False
          ) -> dict[str, Any]:
    """One build in a fresh process (the code in ``src``; for PostgreSQL into a home that code
    created before): seconds, CPU, documents, and with ``meter`` the server's CPU (read
    after ``checkpoint`` and once the build's backends ended and were reaped)."""
    if url:  # the home's schema is made first (by the same code), not counted as the build
        subprocess.run([sys.executable, "-c", CREATE.format(src=str(src), url=url)],
                       capture_output=True, text=True, check=True)
    before = meter.server() if meter else None
    out = subprocess.run([sys.executable, "-c", BUILD.format(
        src=str(src), root=str(root), url=url, phases=phases, bench=str(ROOT / "benchmarks"))],
        capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if meter is not None and before is not None:
        if checkpoint is not None:
            checkpoint()
        time.sleep(1.0)  # the postmaster reaps the ended backends (their CPU joins its own)
        result["server"] = (meter.server() or before) - before
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0.5,2,9.8", help="MB of topics, comma separated")
    ap.add_argument("--baseline-rev", default="bd0982f")
    ap.add_argument("--phases", action="store_true",
                    help="print where the server's CPU goes in our build at the largest size")
    ap.add_argument("--url", default=os.environ.get(ENV), help="a server's base URL")
    args = ap.parse_args()
    server = None
    if not args.url:
        server = PgServer(durable=True)
        args.url = server.start()
    try:
        from scriptorium.postgres.connect import PgHome

        with PgHome.open(home_url(args.url, "meter")) as pg:
            meter = CpuMeter(pg)
            if server is not None:  # ours: no autovacuum landing in the next build's figures
                with pg.dedicated() as conn:
                    conn.execute("ALTER SYSTEM SET autovacuum = off")
                    conn.execute("SELECT pg_reload_conf()")

            def checkpoint() -> None:
                with pg.dedicated() as conn:
                    conn.execute("CHECKPOINT")

            print(f"# bench_pg_index_build: load {load()}, {os.cpu_count()} cores; PostgreSQL "
                  f"index build (one transaction, fresh process each) beside SQLite's; CPU = "
                  f"the building process + the server (up to a CHECKPOINT after the build)\n")
            print(f"| topics | SQLite | PostgreSQL, ours | PostgreSQL, {args.baseline_rev} | "
                  f"ours / baseline (CPU) | load |")
            print("|---|---|---|---|---|---|")
            sizes = [float(x) for x in args.sizes.split(",")]
            traced: list[tuple[str, float]] = []
            for mb in sizes:
                with tempfile.TemporaryDirectory(prefix="bench-pg-build-") as tmp:
                    root = copy_workspace(mb, Path(tmp) / "memory")
                    lite = build(ours_src(), root)
                    ours = build(ours_src(), root, home_url(args.url, "build"), meter,
                                 checkpoint)
                    base = build(baseline_src(args.baseline_rev), root,
                                 home_url(args.url, "buildbase"), meter, checkpoint)
                    assert ours["docs"] == base["docs"] == lite["docs"], (ours, base, lite)
                    if args.phases and mb == max(sizes):
                        traced = build(ours_src(), root, home_url(args.url, "phases"),
                                       phases=True)["phases"]
                print(f"| {mb:g} MB, {int(lite['docs'])} claims | {lite['s']:.2f} s, "
                      f"{lite['cpu']:.2f} s CPU | {cell(ours, lite)} | {cell(base, lite)} | "
                      f"{cpu(ours) / cpu(base):.2f}× | {load()} |", flush=True)
            if traced:
                print(f"\nWhere the server's CPU goes in our build at {max(sizes):g} MB "
                      f"(the backend and its parallel workers, statement by statement; "
                      f"load {load()}):\n")
                print("| statement | backend CPU | share |")
                print("|---|---|---|")
                total = sum(c for _, c in traced)
                for name, seconds in traced:
                    if seconds >= 0.005:
                        print(f"| `{name} …` | {seconds:.2f} s | {seconds / total:.0%} |")
                print(f"| all | {total:.2f} s | |")
    finally:
        if server is not None:
            server.stop()


def cpu(r: dict[str, Any]) -> float:
    return float(r["cpu"]) + float(r.get("server", 0.0))


def cell(r: dict[str, Any], lite: dict[str, Any]) -> str:
    return (f"{r['s']:.2f} s ({r['s'] / lite['s']:.1f}× SQLite); CPU "
            f"{r['cpu']:.2f} + {r.get('server', float('nan')):.2f} server = "
            f"{cpu(r):.2f} s (**{cpu(r) / lite['cpu']:.1f}× SQLite**)")


if __name__ == "__main__":
    main()
