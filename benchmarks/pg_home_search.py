"""Warm search through ``Memory`` on whole homes: the directory home, the PostgreSQL home
with our code, and the PostgreSQL home with a baseline revision's code (bench_pg_search.py's
``--baseline-rev``), the same sessions written by the embedded writer into each.

Each home is written and searched in a fresh process running that revision's ``src/``. Per
warm query: the median wall-clock time, the CPU time of the searching process and of the
server's client backends (from /proc: not autovacuum, which the writes just before wake), and
the database round trips, counted on the wire by a relay to the same server
(tests/postgres/wirecount.py: simple queries and Syncs, the requests a client waits on).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from workspaces import REPO, baseline_src, load, ours_src

# (query, search options): plain, filtered, with archived turns, and branch-aware
QUERIES = [("release budget", {}), ("deploy schedule owner", {}),
           ("database migration backup", {"top_k": 10}),
           ("vendor contract", {"include_sources": True}),
           ("hiring laptop travel", {"since": "2020-01"}),
           ("invoice meeting", {"speaker": "user"}),
           ("roadmap review", {"session": "s001"})]

CHILD = r"""
import json, os, statistics, sys, time
sys.path.insert(0, {src!r})
sys.path[1:1] = [{tests!r}, {tests!r} + "/postgres", {bench!r}]
from bench_pg_memory import fill, open_memory
home, queries, repeats = {home!r}, {queries!r}, {repeats!r}
ids = fill(home, {sessions!r}, {turns!r})
with open_memory(home) as mem:
    mem.write(ids, force=True)
pg = home.startswith("postgresql://")
out = {{}}
with open_memory(home) as mem:
    meter = None
    for q, kw in queries:  # warm: prepared statements, caches, the index caught up
        mem.search(q, **kw)
    if pg:  # the client backends (this process's connections), not autovacuum and the like
        from bench_pg_search import ServerCpu
        meter = ServerCpu(mem.workspace.pg)
    times, cpu0 = [], time.process_time()
    for _ in range(repeats):
        for q, kw in queries:
            t0 = time.perf_counter()
            mem.search(q, **kw)
            times.append((time.perf_counter() - t0) * 1000)
    n = len(times)
    out["cpu"] = (time.process_time() - cpu0) * 1000 / n
    out["server"] = meter.ms() / n if meter else 0.0
    out["p50"] = statistics.median(times)
if pg:
    from wirecount import WireCounter
    with WireCounter(home) as wire:
        with open_memory(wire.url) as mem:
            for q, kw in queries:
                mem.search(q, **kw)
            trips = {{}}
            for q, kw in queries:
                wire.reset()
                mem.search(q, **kw)
                trips[q] = wire.round_trips
    out["trips"] = trips
print(json.dumps(out))
"""


def run(src: Path, home: str, sessions: int, turns: int, repeats: int) -> dict[str, Any]:
    code = CHILD.format(src=str(src), tests=str(REPO / "tests"),
                        bench=str(REPO / "benchmarks"), home=home, queries=QUERIES,
                        repeats=repeats, sessions=sessions, turns=turns)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(REPO))
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def homes_table(url: str, baseline_rev: str, sessions: int, turns: int,
                repeats: int) -> None:
    """Print warm search through Memory on the three homes (see the module docstring)."""
    from pgserver import home_url

    with tempfile.TemporaryDirectory(prefix="bench-pg-homes-") as tmp:
        rows = [("directory home, ours", run(ours_src(), str(Path(tmp) / "dir"), sessions,
                                             turns, repeats)),
                ("PostgreSQL home, ours", run(ours_src(), home_url(url, "homes"), sessions,
                                              turns, repeats)),
                (f"PostgreSQL home, {baseline_rev}", run(baseline_src(baseline_rev),
                                                          home_url(url, "homesbase"),
                                                          sessions, turns, repeats))]
    floor = rows[0][1]["cpu"]
    print(f"\nWarm search through Memory, {sessions} sessions × {turns} turns written by the "
          f"embedded writer, {len(QUERIES)} queries (plain, top 10, with sources, since, "
          f"speaker, branch-aware) × {repeats}; load {load()}\n")
    print("| home | warm query p50 | CPU per query: client + server | CPU ÷ directory home "
          "| round trips per query (plain, ..., branch-aware) |")
    print("|---|---|---|---|---|")
    for name, r in rows:
        trips = r.get("trips")
        shown = " / ".join(str(trips[q]) for q, _ in QUERIES) if trips else "none"
        total = r["cpu"] + r["server"]
        print(f"| {name} | {r['p50']:.2f} ms | {r['cpu']:.2f} + {r['server']:.2f} = "
              f"{total:.2f} ms | {total / floor:.2f}× | {shown} |")
    ours, base = rows[1][1], rows[2][1]
    print(f"\nPostgreSQL home, ours ÷ {baseline_rev}: p50 "
          f"{ours['p50'] / base['p50']:.2f}×, CPU "
          f"{(ours['cpu'] + ours['server']) / (base['cpu'] + base['server']):.2f}×, round "
          f"trips {statistics.mean(ours['trips'].values()):.1f} against "
          f"{statistics.mean(base['trips'].values()):.1f} per query; load {load()}")
