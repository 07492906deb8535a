"""Memory writes on a PostgreSQL home beside a directory home, and writers of different
sessions installing at once on PostgreSQL.

    python benchmarks/bench_pg_memory.py [--sessions 24] [--turns 20] [--procs 1,2,4]
                                         [--url postgresql://…]

Each run writes the same workload (``--sessions`` sessions of ``--turns`` user/assistant
turns, one forced write per session with the embedded writer) into a fresh home:

* the directory home, one process (the baseline);
* the PostgreSQL home with 1, 2, 4 processes, each writing its own slice of the sessions
  at the same time (write steps of different sessions share the home's lock; each install
  is checked per topic file, see scriptorium.memory.pg_workspace).

It prints turns/s, the ratio to one PostgreSQL process and to the directory home, and checks
every run: zero omissions (every turn marked and cited) and zero duplicates (no turn cited
by more paragraphs than in the single-process run). Without ``--url`` (or
``$SCRIPTORIUM_TEST_PG``) it starts a throwaway server (tests/pgserver.py).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from scriptorium.config import load_settings  # noqa: E402
from scriptorium.memory.catalog import TopicCatalog  # noqa: E402
from scriptorium.memory.records import MARK_KEY  # noqa: E402
from scriptorium.memory.writing import Memory  # noqa: E402

WORDS = ("release build deploy review staging budget offsite vendor contract schedule "
         "database migration backup invoice meeting roadmap hiring laptop travel report").split()


def open_memory(home: str) -> Memory:
    if home.startswith("postgresql://"):
        return Memory.open(home, settings=load_settings(home))
    return Memory(Path(home), settings=load_settings(Path(home)))


def fill(home: str, sessions: int, turns: int) -> list[str]:
    with open_memory(home) as mem:
        ids = []
        for s in range(sessions):
            sid = f"s{s:03d}"
            mem.store.create_session(sid, title=f"{WORDS[s % len(WORDS)]} plans {s}")
            for t in range(turns):
                w = WORDS[(s * 7 + t) % len(WORDS)]
                mem.store.append_message(sid, {
                    "id": f"{sid}-{t}", "role": "user" if t % 2 == 0 else "assistant",
                    "content": f"The {w} for team {s} is due on day {t}; owner {w}-{s}-{t}."})
            ids.append(sid)
    return ids


def write_slice(home: str, ids: list[str], start: "multiprocessing.synchronize.Event",
                out: "multiprocessing.Queue[tuple[int, int]]") -> None:
    with open_memory(home) as mem:
        start.wait()
        results = mem.write(ids, force=True)
        out.put((sum(len(s.marked) for r in results for s in r.steps),
                 sum(1 for r in results if r.failure)))


def run(home: str, ids: list[str], procs: int) -> tuple[float, int, int]:
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=write_slice, args=(home, ids[i::procs], start, out))
               for i in range(procs)]
    for w in workers:
        w.start()
    time.sleep(3.0)  # every process has imported and connected before the clock starts
    t0 = time.perf_counter()
    start.set()
    done = [out.get(timeout=1800) for _ in workers]
    elapsed = time.perf_counter() - t0
    for w in workers:
        w.join(60)
    return elapsed, sum(d[0] for d in done), sum(d[1] for d in done)


def audit(home: str, ids: list[str]) -> tuple[int, Counter]:
    """Turns not marked, and how many paragraphs cite each source."""
    with open_memory(home) as mem:
        wid = mem.workspace_id
        unmarked = sum(1 for sid in ids for n in mem.store.get_nodes(sid)
                       if n.role in ("user", "llm") and n.metadata.get(MARK_KEY) != wid)
        if hasattr(mem.workspace, "pg"):
            with mem.workspace.lock():
                pass  # pull every install into the mirror
        cites = Counter(ref for _, b in TopicCatalog.of(mem.workspace).refresh().blocks()
                        for ref in b.refs)
    return unmarked, cites


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--procs", default="1,2,4")
    parser.add_argument("--url", default=os.environ.get("SCRIPTORIUM_TEST_PG"))
    args = parser.parse_args()
    from pgserver import PgServer, home_url

    server = None
    if not args.url:
        server = PgServer()
        args.url = server.start()
    total = args.sessions * args.turns
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.sessions} sessions x "
          f"{args.turns} turns = {total} turns, embedded writer, one forced write each")
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ids = fill(tmp, args.sessions, args.turns)
            elapsed, marked, failed = run(tmp, ids, 1)
            unmarked, base_cites = audit(tmp, ids)
            rows.append(("directory", 1, elapsed, marked, failed, unmarked, 0))
        for procs in [int(p) for p in args.procs.split(",")]:
            url = home_url(args.url, prefix="bench")
            ids = fill(url, args.sessions, args.turns)
            elapsed, marked, failed = run(url, ids, procs)
            unmarked, cites = audit(url, ids)
            dup = sum(max(0, n - base_cites.get(ref, 0)) for ref, n in cites.items())
            rows.append(("postgresql", procs, elapsed, marked, failed, unmarked, dup))
    finally:
        if server is not None:
            server.stop()
    one_pg = next(r[2] for r in rows if r[0] == "postgresql" and r[1] == 1)
    directory = rows[0][2]
    print("| home | processes | seconds | turns/s | vs 1 PG process | vs directory | "
          "failed sessions | unmarked turns | extra citations |")
    print("|---|---|---|---|---|---|---|---|---|")
    for home, procs, elapsed, marked, failed, unmarked, dup in rows:
        print(f"| {home} | {procs} | {elapsed:.2f} | {marked / elapsed:.1f} | "
              f"{one_pg / elapsed:.2f}x | {directory / elapsed:.2f}x | {failed} | {unmarked} "
              f"| {dup} |")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
