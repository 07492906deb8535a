"""Branch-aware reading: precision on forked facts, and what it costs per query.

1. Precision. ``--conversations`` (default 200) conversations in which an edit or a retry
   makes two branches state different values for one fact (numbers, names, dates, choices),
   written through the real write path (embedded writer, default settings; see
   ``branch_facts.py``). For a reader on each branch tip: precision@1 of that branch's own
   value, branch-aware search (``session=``, ``head=``) beside branch-blind search; a number
   counts by its digits, and a last row asks for the value in full (unit included).
2. Cost. The same workspace padded with generated topics (``topic_gen.build``) to about
   1 MB and 10 MB: a branch-aware query vs a branch-blind one (same queries, interleaved,
   warm index; each reader asks several times in a row, so its session and line are cached:
   the ratio goal is ≤ 1.5×); the same when the readers take turns, one query each (more
   sessions than the store keeps open, so each branch-aware query opens its session again);
   and the first branch-aware query of a reader in a long session (the line computed, not
   cached).
3. ``memory context`` latency at 10 MB (target < 50 ms).

Usage:
    python benchmarks/bench_branches.py [--conversations 200] [--sizes 1,10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

import topic_gen  # noqa: E402
import branch_facts  # noqa: E402
from scriptorium.config import load_settings  # noqa: E402
from scriptorium.memory.context import memory_context  # noqa: E402
from scriptorium.memory.search import SearchIndex, search  # noqa: E402
from scriptorium.memory.sources import SourceArchive  # noqa: E402
from scriptorium.memory.writing import Memory  # noqa: E402
from scriptorium.sessions import SessionStore  # noqa: E402
from scriptorium.sessions.store import MAX_OPEN_SESSIONS  # noqa: E402

LONG_TURNS = 3000


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def ms(fn, *args, **kw) -> float:
    t0 = time.perf_counter()
    fn(*args, **kw)
    return (time.perf_counter() - t0) * 1000


def timed(cpu: list[float], fn, *args, **kw) -> float:
    """Wall ms of one call (returned) and its CPU ms (appended to ``cpu``: far less
    sensitive to the machine's load, so the ratios are also given in CPU time)."""
    c0 = time.process_time()
    wall = ms(fn, *args, **kw)
    cpu.append((time.process_time() - c0) * 1000)
    return wall


def long_session(store: SessionStore, sid: str = "long") -> str:
    """A session of LONG_TURNS turns with a retry every 50 turns; returns the head."""
    store.create_session(sid, title="A long conversation")
    prev = None
    for i in range(LONG_TURNS):
        msg = {"id": f"n{i}", "role": "user" if i % 2 == 0 else "assistant",
               "content": f"turn {i} of the long conversation"}
        if prev:
            msg["predecessor"] = prev
        prev = store.append_message(sid, msg)
        if i % 50 == 49 and i % 2 == 1:
            store.retry(sid, prev, f"retried {i}", node_id=f"r{i}")
            store.set_head(sid, prev)
    return prev


def padded(base: Path, megabytes: float, tmp: Path) -> SimpleNamespace:
    """A copy of the memory workspace at ``base`` plus generated topics up to the size."""
    root = tmp / f"memory-{megabytes:g}"
    shutil.copytree(base, root, ignore=shutil.ignore_patterns(".git", "search.sqlite*"))
    pad = tmp / f"pad-{megabytes:g}"
    topic_gen.build(pad, megabytes)
    for area in (pad / "topics").iterdir():
        shutil.move(str(area), root / "topics" / area.name)
    for thread in (pad / "sources" / "openprogram" / "_v2").iterdir():
        shutil.move(str(thread), root / "sources" / "openprogram" / "_v2" / thread.name)
    size = sum(p.stat().st_size for p in (root / "topics").rglob("*.md"))
    ws = SimpleNamespace(root=root, runtime_dir=root / ".scriptorium",
                         sources=SourceArchive(root), topics_mb=size / 1e6)
    ws.build_ms = ms(SearchIndex.of(ws).rebuild, False)
    return ws


def cost(ws, store: SessionStore, cases, rounds: int, long_head: str) -> dict:
    blind, aware, cycling = [], [], []
    cpu: dict[str, list[float]] = {k: [] for k in ("blind", "aware", "cycling_blind", "cycling")}
    readers = [(c.query, c.session_id, tip) for c in cases for tip in c.values]
    for query, sid, tip in readers:  # warm: index pages, statements
        search(ws, query)
        search(ws, query, session=sid, head=tip, store=store)
    for _ in range(rounds):
        # one query per reader in turn: more sessions than the store keeps open
        # (MAX_OPEN_SESSIONS), so each branch-aware query opens its session again
        for query, sid, tip in readers:
            blind.append(timed(cpu["cycling_blind"], search, ws, query))
            cycling.append(timed(cpu["cycling"], search, ws, query, session=sid, head=tip,
                                 store=store))
    warm_blind = []
    for query, sid, tip in readers:
        # a reader asking again in its conversation: its session and line are cached
        search(ws, query, session=sid, head=tip, store=store)
        for _ in range(rounds):
            warm_blind.append(timed(cpu["blind"], search, ws, query))
            aware.append(timed(cpu["aware"], search, ws, query, session=sid, head=tip,
                               store=store))
    changed, fresh = [], []
    for i in range(min(rounds * 5, 15)):
        # the long session's graph just changed (a retry elsewhere): the line is recomputed
        store.retry("long", "n1", f"again {i}", node_id=f"x{len(cases)}-{ws.topics_mb:.0f}-{i}")
        store.set_head("long", long_head)
        changed.append(ms(search, ws, "long conversation turn", session="long",
                          head=long_head, store=store))
        # a process that never opened the session: its index is loaded first
        fresh.append(ms(search, ws, "long conversation turn", session="long", head=long_head,
                        store=SessionStore(store.root, git=False)))
    time.sleep(0.2)  # past the session index's 100 ms "racily clean" window
    search(ws, "long conversation turn", session="long", head=long_head, store=store)
    warm_long, blind_long = [], []
    for _ in range(rounds * 10):  # interleaved, like the readers above
        blind_long.append(ms(search, ws, "long conversation turn"))
        warm_long.append(ms(search, ws, "long conversation turn", session="long",
                            head=long_head, store=store))
    contexts = [ms(memory_context, ws, store, sid, tip, 800) for _, sid, tip in readers]
    return {"blind": warm_blind, "aware": aware, "cycling_blind": blind,
            "cycling": cycling, "cpu": cpu, "changed_long": changed, "fresh_long": fresh,
            "warm_long": warm_long,
            "blind_long": blind_long, "context": contexts}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--sizes", default="1,10", help="MB of topics for the cost rows")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    med = statistics.median
    print(f"load average at start: {load()}")
    with tempfile.TemporaryDirectory(prefix="bench-branches-") as tmp_name:
        tmp = Path(tmp_name)
        home = tmp / "home"
        store = SessionStore(home / "sessions", git=False)
        mem = Memory(home, settings=load_settings(home), store=store)
        t0 = time.perf_counter()
        cases = branch_facts.generate(mem, args.conversations)
        write_s = time.perf_counter() - t0
        long_head = long_session(store)
        base_mb = sum(p.stat().st_size for p in (home / "memory/topics").rglob("*.md")) / 1e6
        print(f"wrote {len(cases)} forked conversations through the write path in "
              f"{write_s:.1f} s ({base_mb:.2f} MB of topics); long session: {LONG_TURNS} "
              f"turns", file=sys.stderr)

        aware = branch_facts.precision(mem.workspace, store, cases, aware=True)
        blind = branch_facts.precision(mem.workspace, store, cases, aware=False)
        print(f"\n## Precision@1 of the reader's own branch value ({len(cases)} conversations, "
              f"{aware['readers']} readers, {base_mb:.2f} MB of topics)\n")
        print("The first hit states the reader's branch value (a number by its digits: "
              "\"Budget: 359\" states \"359 thousand euros\") and not the other branch's.\n")
        print("| readers | branch-blind search | branch-aware search |")
        print("|---|---|---|")
        print(f"| all | {blind['p_at_1']:.3f} | {aware['p_at_1']:.3f} |")
        for key in aware["by"]:
            print(f"| {key} | {blind['by'][key]:.3f} | {aware['by'][key]:.3f} |")
        print(f"| all, the value stated in full (its unit too) | "
              f"{blind['p_at_1_in_full']:.3f} | {aware['p_at_1_in_full']:.3f} |")

        rows = []
        for mb in (float(x) for x in args.sizes.split(",")):
            ws = padded(home / "memory", mb, tmp)
            result = cost(ws, store, cases, args.rounds, long_head)
            result["precision"] = branch_facts.precision(ws, store, cases, aware=True)
            result["precision_blind"] = branch_facts.precision(ws, store, cases, aware=False)
            rows.append((ws, result))
            shutil.rmtree(ws.root)
        print(f"\n## Cost per query (medians; {args.rounds} rounds × "
              f"{2 * len(cases)} readers)\n")
        print("| topics | branch-blind | branch-aware | ratio aware / blind (wall; CPU) | "
              f"readers in turn ({2 * len(cases)} readers, {MAX_OPEN_SESSIONS} sessions kept "
              "open): blind / aware / ratio (wall; CPU) | long session "
              f"({LONG_TURNS} turns): blind / aware / aware after its graph changed / aware in "
              "a fresh process | p@1 blind / aware at this size |")
        print("|---|---|---|---|---|---|---|")
        for ws, r in rows:
            cpu = {k: sum(v) for k, v in r["cpu"].items()}
            print(f"| {ws.topics_mb:.2f} MB | {med(r['blind']):.2f} ms | {med(r['aware']):.2f} ms "
                  f"| {med(r['aware']) / med(r['blind']):.2f}×; "
                  f"{cpu['aware'] / cpu['blind']:.2f}× | {med(r['cycling_blind']):.2f} / "
                  f"{med(r['cycling']):.2f} ms / "
                  f"{med(r['cycling']) / med(r['cycling_blind']):.2f}×; "
                  f"{cpu['cycling'] / cpu['cycling_blind']:.2f}× | {med(r['blind_long']):.2f} / "
                  f"{med(r['warm_long']):.2f} / {med(r['changed_long']):.2f} / "
                  f"{med(r['fresh_long']):.0f} ms "
                  f"| {r['precision_blind']['p_at_1']:.3f} / {r['precision']['p_at_1']:.3f} |")
        print("\n## memory context (budget 800 tokens, one per reader)\n")
        print("| topics | median | p95 | max |")
        print("|---|---|---|---|")
        for ws, r in rows:
            xs = sorted(r["context"])
            print(f"| {ws.topics_mb:.2f} MB | {med(xs):.2f} ms | "
                  f"{xs[int(0.95 * (len(xs) - 1))]:.2f} ms | {xs[-1]:.2f} ms |")
    print(f"\nload average at end: {load()}")


if __name__ == "__main__":
    main()
