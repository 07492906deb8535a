"""Session store on a PostgreSQL home vs the directory home, side by side in one run.

For a session of 100, 1,000 and 10,000 nodes (one chain, ~400 characters a node), on the
same machine, the same data:

- append: one turn appended to the session (median of --rounds), the store warm;
- get_branch warm: the whole branch read again by the store that holds it;
- get_branch after a foreign append: another store (another process's view) appended one
  turn; this store's next read (directory: refresh by stat + one new file; PostgreSQL: the
  rev check + the one new row);
- get_branch cold: a new store's first read (directory: parse every node file; PostgreSQL:
  fetch and parse every row, on a connection already open: the cost of connecting is not
  the session's);
- branch_tail warm: the turns after the newest mark, 10 turns from the tip (memory's
  question "what is after my last mark?");
- mark: merge_node_metadata_batch of 10 nodes (the memory mark);
- bulk: the whole session written through ``store.bulk`` (an importer, a home copy).

Ratio = PostgreSQL / directory (above 1: PostgreSQL slower). The PostgreSQL server runs on
this machine, started here with fsync and synchronous commit on (durable, as the directory
store's fsyncs are), reached over the loopback; the directory store runs without its
per-turn git commit (the PostgreSQL home has none), so both measure the store itself.

Run: python benchmarks/bench_pg_sessions.py [--rounds N] [--quick] [--url postgresql://…]
     (--url: an existing server instead of a throwaway durable one)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from bench_sessions import text  # noqa: E402
from pgserver import PgServer, home_url  # noqa: E402

from scriptorium.sessions import Node, SessionStore  # noqa: E402
from scriptorium.postgres.connect import PgHome  # noqa: E402
from scriptorium.sessions.pg_store import PgSessionStore  # noqa: E402

MARK = "memory_written_scriptorium"


def ms(fn: Callable[[], Any], rounds: int) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def fill(store: Any, sid: str, n: int) -> float:
    """Write an n-node chain through ``store.bulk``; returns the milliseconds it took."""
    rng = random.Random(7)
    store.create_session(sid)
    t0 = time.perf_counter()
    with store.bulk(sid) as bulk:
        pred = "ROOT"
        for seq in range(n):
            nid = f"n{seq:05d}"
            bulk.append(Node(id=nid, created_at=1.0 + seq, role="user" if seq % 2 == 0 else "llm",
                             output=text(rng, 400), predecessor=pred,
                             metadata={"source": "bench"}))
            pred = nid
        bulk.set_head(pred)
    return (time.perf_counter() - t0) * 1000


def measure(make: Callable[[], Any], n: int, rounds: int,
            make_cold: Callable[[], Any]) -> dict[str, float]:
    """Every operation of the module docstring on an n-node session of ``make()``'s home;
    ``make_cold()`` is a new store on the same home, its cache empty."""
    store, other = make(), make()
    sid = f"s{n}"
    out = {"bulk": fill(store, sid, n)}
    counter = iter(range(10**9))

    def append() -> None:
        k = next(counter)
        store.append_message(sid, {"id": f"x{k}", "role": "user" if k % 2 == 0 else "assistant",
                                   "content": "one more turn"})

    out["append"] = ms(append, rounds)
    store.get_branch(sid)
    out["get_branch warm"] = ms(lambda: store.get_branch(sid), rounds)

    def foreign() -> None:
        k = next(counter)
        other.append_message(sid, {"id": f"f{k}", "role": "user", "content": "elsewhere"})
        t0 = time.perf_counter()
        store.get_branch(sid)
        foreign_times.append((time.perf_counter() - t0) * 1000)

    foreign_times: list[float] = []
    for _ in range(rounds):
        foreign()
    out["get_branch after foreign append"] = statistics.median(foreign_times)
    out["get_branch cold"] = ms(lambda: make_cold().get_branch(sid), max(3, rounds // 3))
    branch = store.get_branch(sid)
    marked = branch[-11]["id"]
    store.merge_node_metadata_batch(sid, {marked: {MARK: "w-bench"}})
    out["branch_tail warm"] = ms(lambda: store.branch_tail(sid, stop=lambda m: MARK in m),
                                 rounds)
    batch = [m["id"] for m in branch[-30:-20]]
    rnd = iter(range(10**9))
    out["mark 10 nodes"] = ms(lambda: store.merge_node_metadata_batch(
        sid, {nid: {"bench_round": next(rnd)} for nid in batch}), rounds)
    for s in (store, other):
        if hasattr(s, "close"):
            s.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="100 and 1,000 nodes only")
    ap.add_argument("--url", default=None, help="a PostgreSQL server to use (base URL)")
    args = ap.parse_args()
    sizes = [100, 1000] if args.quick else [100, 1000, 10_000]
    server = None
    base = args.url
    if not base:
        server = PgServer(durable=True)
        base = server.start()
    load_before = os.getloadavg()
    try:
        url = home_url(base, "bench")
        shared = PgHome.open(url)  # the cold reads' connection pool (open already)
        results: dict[int, tuple[dict[str, float], dict[str, float]]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            sessions = Path(tmp) / "sessions"
            for n in sizes:
                d = measure(lambda: SessionStore(sessions, git=False), n, args.rounds,
                            lambda: SessionStore(sessions, git=False))
                p = measure(lambda: PgSessionStore.open(url), n, args.rounds,
                            lambda: PgSessionStore(shared))
                results[n] = (d, p)
        shared.close()
    finally:
        if server is not None:
            server.stop()
    load_after = os.getloadavg()
    print(f"session store: directory vs PostgreSQL (median of {args.rounds} rounds, ms)")
    print(f"{'nodes':>6}  {'operation':<33} {'directory':>10} {'postgres':>10} {'pg/dir':>7}")
    for n, (d, p) in results.items():
        for op in d:
            print(f"{n:>6}  {op:<33} {d[op]:>10.2f} {p[op]:>10.2f} {p[op] / d[op]:>6.1f}x")
    print(f"load average (1/5/15 min): before {' '.join(f'{x:.2f}' for x in load_before)}, "
          f"after {' '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
