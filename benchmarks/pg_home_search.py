"""The directory home beside the PostgreSQL home on whole homes, through ``Memory``: the same
sessions written by the embedded writer (one forced write each, one process), then warm
search, then the first query after a write; the PostgreSQL home with our code and with a
baseline revision's code (bench_pg_search.py's ``--baseline-rev``).

Each home is written and searched in a fresh process running that revision's ``src/``. The
write: turns/s and CPU per turn, the writing process (and its git children) plus the
server (its postmaster's reaped backends and live processes, from /proc). Per warm query:
the median wall-clock time, the CPU time of the searching process and of the server's client
backends (not autovacuum, which the writes just before wake), and the database round trips,
counted on the wire by a relay to the same server (tests/postgres/wirecount.py: simple
queries and Syncs, the requests a client waits on). Before the warm queries a PostgreSQL
home's index is vacuumed and analyzed, as autovacuum leaves it within a minute of the writes
(else each run times a different moment of that race). After the warm queries, each of
``AFTER`` writes adds a session (a write of its own) and times the first query after it and
the same query again.
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
AFTER = 5  # writes followed by a first query

CHILD = r"""
import json, os, resource, statistics, sys, time
sys.path.insert(0, {src!r})
sys.path[1:1] = [{tests!r}, {tests!r} + "/postgres", {bench!r}]
from bench_pg_memory import fill, open_memory
home, queries, repeats = {home!r}, {queries!r}, {repeats!r}
ids = fill(home, {sessions!r}, {turns!r})
pg = home.startswith("postgresql://")
out = {{}}


def cpu():
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


with open_memory(home) as mem:
    server = None
    if pg:  # the whole server: this benchmark's own, nothing else runs on it
        from worker_procs import CpuMeter
        server = CpuMeter(mem.workspace.pg)
        server0 = server.server()
    cpu0, t0 = cpu(), time.perf_counter()
    results = mem.write(ids, force=True)
    out["write_s"] = time.perf_counter() - t0
    out["write_cpu"] = cpu() - cpu0
    out["write_server"] = server.server() - server0 if server else 0.0
    out["turns"] = sum(len(s.marked) for r in results for s in r.steps)
    assert out["turns"] and not any(r.failure for r in results), results
    if pg:  # the steady state autovacuum reaches within a minute, not a race with it
        with mem.workspace.pg.dedicated() as conn:
            conn.execute("VACUUM ANALYZE search_terms, search_docs, search_files")
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
    first, again = [], []
    for i in range({after!r}):  # a write of its own, then the first query after it
        sid = f"late{{i}}"
        mem.store.create_session(sid, title=f"late {{i}}")
        for t, role in enumerate(("user", "assistant")):
            mem.store.append_message(sid, {{"id": f"{{sid}}-{{t}}", "role": role,
                                           "content": f"The late{{i}}x release budget is due."}})
        assert not mem.write([sid], force=True)[0].failure
        q, kw = queries[i % len(queries)]
        for into in (first, again):
            t0 = time.perf_counter()
            mem.search(q, **kw)
            into.append((time.perf_counter() - t0) * 1000)
        assert mem.search(f"late{{i}}x")
    out["first"], out["again"] = statistics.median(first), statistics.median(again)
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
                        repeats=repeats, sessions=sessions, turns=turns, after=AFTER)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(REPO))
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def homes_table(url: str, baseline_rev: str, sessions: int, turns: int,
                repeats: int) -> None:
    """Print the write and the search through Memory on the three homes (see the module
    docstring), then the PostgreSQL home's ratios to the directory home's."""
    from pgserver import home_url

    with tempfile.TemporaryDirectory(prefix="bench-pg-homes-") as tmp:
        rows = [("directory home, ours", run(ours_src(), str(Path(tmp) / "dir"), sessions,
                                             turns, repeats))]
        print(f"\n(directory home done, load {load()})", flush=True)
        rows.append(("PostgreSQL home, ours", run(ours_src(), home_url(url, "homes"),
                                                  sessions, turns, repeats)))
        if baseline_rev:
            rows.append((f"PostgreSQL home, {baseline_rev}", run(
                baseline_src(baseline_rev), home_url(url, "homesbase"), sessions, turns,
                repeats)))
    print(f"\nThe directory home beside the PostgreSQL home through Memory, one process: "
          f"{sessions} sessions × {turns} turns written by the embedded writer (one forced "
          f"write each), then {len(QUERIES)} queries (plain, top 10, with sources, since, "
          f"speaker, branch-aware) × {repeats} warm, then {AFTER} writes each followed by "
          f"a query; load {load()}\n")
    print("| home | write: turns/s | write CPU per turn: process + server | warm query p50 "
          "| CPU per query: client + server | first query after a write (÷ the same again) "
          "| round trips per query (plain, ..., branch-aware) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows:
        trips = r.get("trips")
        shown = " / ".join(str(trips[q]) for q, _ in QUERIES) if trips else "none"
        print(f"| {name} | {r['turns'] / r['write_s']:.0f} | {per_turn(r, 'write_cpu'):.2f}"
              f" + {per_turn(r, 'write_server'):.2f} = {write_cpu(r):.2f} ms | "
              f"{r['p50']:.2f} ms | {r['cpu']:.2f} + {r['server']:.2f} = {query_cpu(r):.2f} ms"
              f" | {r['first']:.2f} ms ({r['first'] / r['again']:.2f}×) | {shown} |")
    lite, ours = rows[0][1], rows[1][1]
    print(f"\n**PostgreSQL home ÷ directory home** (same run): write turns/s "
          f"{(ours['turns'] / ours['write_s']) / (lite['turns'] / lite['write_s']):.2f}×, "
          f"write CPU per turn {write_cpu(ours) / write_cpu(lite):.2f}×; warm query p50 "
          f"{ours['p50'] / lite['p50']:.2f}×, CPU per query "
          f"{query_cpu(ours) / query_cpu(lite):.2f}×; first query after a write "
          f"{ours['first'] / lite['first']:.2f}×; load {load()}")
    if len(rows) > 2:
        base = rows[2][1]
        print(f"\nPostgreSQL home, ours ÷ {baseline_rev}: write CPU per turn "
              f"{write_cpu(ours) / write_cpu(base):.2f}×, warm p50 "
              f"{ours['p50'] / base['p50']:.2f}×, CPU per query "
              f"{query_cpu(ours) / query_cpu(base):.2f}×, round trips "
              f"{statistics.mean(ours['trips'].values()):.1f} against "
              f"{statistics.mean(base['trips'].values()):.1f} per query; load {load()}")


def per_turn(r: dict[str, Any], key: str) -> float:
    return float(r[key]) * 1000 / r["turns"]


def write_cpu(r: dict[str, Any]) -> float:
    return per_turn(r, "write_cpu") + per_turn(r, "write_server")


def query_cpu(r: dict[str, Any]) -> float:
    return float(r["cpu"]) + float(r["server"])
