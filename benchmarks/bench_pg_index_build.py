"""The PostgreSQL home's search index build beside SQLite's, and beside a baseline revision's.

For each size, one synthetic workspace (topic_gen.py's generator: topics citing archived
turns) is indexed, each build in a fresh process on one throwaway durable server: the
directory home's SQLite FTS5 index, the PostgreSQL index with our code, and the PostgreSQL
index with ``--baseline-rev``'s code (default fda7463). Wall-clock, the building process's
CPU and the server's CPU for that build (its postmaster's reaped backends and its live
processes, from /proc), and the ratio to SQLite (SQLite's work is all in its process, so the
CPU ratio is client + server over SQLite's CPU: much less sensitive to the machine's load
than wall-clock); the machine load is printed with every row.

Run: python benchmarks/bench_pg_index_build.py [--sizes 2,9.8] [--baseline-rev fda7463]
     [--url postgresql://…]
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
if {url!r}:
    from scriptorium.memory.search.pg_index import PgSearchIndex
    from scriptorium.memory.search.pg_source import DirectorySource
    from scriptorium.postgres.connect import PgHome
    with PgHome.open({url!r}) as pg:
        docs = PgSearchIndex(pg, DirectorySource(ws)).rebuild(False)
else:
    from scriptorium.memory.search import rebuild
    docs = rebuild(ws, False)
print(json.dumps({{"s": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "docs": docs}}))
"""


def build(src: Path, root: Path, url: str = "", meter: CpuMeter | None = None
          ) -> dict[str, float]:
    """One build in a fresh process (the code in ``src``): seconds, CPU, documents, and with
    ``meter`` the server's CPU (read once the build's backends ended and were reaped)."""
    before = meter.server() if meter else None
    out = subprocess.run([sys.executable, "-c", BUILD.format(src=str(src), root=str(root),
                                                             url=url)],
                         capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if meter is not None and before is not None:
        time.sleep(1.0)  # the postmaster reaps the ended backends (their CPU joins its own)
        result["server"] = (meter.server() or before) - before
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2,9.8", help="MB of topics, comma separated")
    ap.add_argument("--baseline-rev", default="fda7463")
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
        print(f"# bench_pg_index_build: load {load()}, {os.cpu_count()} cores; PostgreSQL "
              f"index build (one transaction, fresh process each) beside SQLite's; CPU = "
              f"the building process + the server\n")
        print(f"| topics | SQLite | PostgreSQL, ours | PostgreSQL, {args.baseline_rev} | "
              f"ours / baseline (CPU) | load |")
        print("|---|---|---|---|---|---|")
        for mb in (float(x) for x in args.sizes.split(",")):
            with tempfile.TemporaryDirectory(prefix="bench-pg-build-") as tmp:
                root = copy_workspace(mb, Path(tmp) / "memory")
                lite = build(ours_src(), root)
                ours = build(ours_src(), root, home_url(args.url, "build"), meter)
                base = build(baseline_src(args.baseline_rev), root,
                             home_url(args.url, "buildbase"), meter)
                assert ours["docs"] == base["docs"] == lite["docs"], (ours, base, lite)

                def cpu(r: dict[str, float]) -> float:
                    return r["cpu"] + r.get("server", 0.0)

                def cell(r: dict[str, float]) -> str:
                    return (f"{r['s']:.2f} s ({r['s'] / lite['s']:.1f}× SQLite); CPU "
                            f"{r['cpu']:.2f} + {r.get('server', float('nan')):.2f} server = "
                            f"{cpu(r):.2f} s (**{cpu(r) / lite['cpu']:.1f}× SQLite**)")

                print(f"| {mb:g} MB, {int(lite['docs'])} claims | {lite['s']:.2f} s, "
                      f"{lite['cpu']:.2f} s CPU | {cell(ours)} | {cell(base)} | "
                      f"{cpu(ours) / cpu(base):.2f}× | {load()} |", flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
