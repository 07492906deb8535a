"""Write-path figures, side by side with the alternatives the written-marker note weighs.

1. Pending work of a long session with a 10-turn backlog, at 1,000 and 10,000 turns:
   ours (walk back from the tip to the last mark) vs (a) an external set-of-ids ledger
   (load the set, walk the whole branch, keep what the set lacks) and (b) re-reading the
   evidence archive to find turns it does not hold.
2. The per-turn call below the threshold (no model, no archive), beside the append of one
   message (no git commit) that such a call follows, in the same store.
3. Turns written per second by the embedded writer (archive, transaction, search index, mark).

Run:  python benchmarks/bench_write_path.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scriptorium.config import load_settings
from scriptorium.memory.records import MARK_KEY, records
from scriptorium.memory.sources import SourceArchive, SourceRecord, parse_v2
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore
from workspaces import load

WS = "w-0bec0000"


def make_session(root: Path, n: int, backlog: int) -> None:
    """Write an n-turn linear session straight to disk (appending 10k turns one by one would
    benchmark the append path instead); all but the last ``backlog`` turns carry the mark."""
    sdir = root / "sessions" / "long"
    (sdir / "history").mkdir(parents=True)
    prev = "ROOT"
    for i in range(n):
        role = "user" if i % 2 == 0 else "llm"
        node = {"id": f"t{i}", "created_at": 1_700_000_000.0 + i, "seq": i, "role": role,
                "name": "", "input": None, "caller": "", "predecessor": prev, "reads": [],
                "output": f"Turn {i}: the deploy window moved to Tuesday {i % 28 + 1}.",
                "metadata": {MARK_KEY: WS} if i < n - backlog else {}}
        (sdir / "history" / f"{i:08d}-{role[0]}-t{i}.json").write_text(json.dumps(node))
        prev = f"t{i}"
    (sdir / "meta.json").write_text(json.dumps({"id": "long", "title": "Long", "head_id": prev,
                                                "created_at": 1.0, "updated_at": 2.0}))
    mem_rt = root / "memory" / ".scriptorium"
    mem_rt.mkdir(parents=True)
    (mem_rt / "workspace-id").write_text(WS + "\n")


def timed(fn, rounds: int) -> float:
    """Median milliseconds of ``fn`` over ``rounds`` runs (one warm-up first)."""
    fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def pending_figures(n: int, rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_session(root, n, backlog=10)
        store = SessionStore(root / "sessions", git=False)
        mem = Memory(root, settings=load_settings(root), store=store)
        assert len(mem.pending("long")) == 10
        # (a) the external ledger: every written id, kept outside the session store.
        ledger = root / "ledger.json"
        ledger.write_text(json.dumps({"long": [f"t{i}" for i in range(n - 10)]}))

        def with_ledger():
            written = set(json.loads(ledger.read_text())["long"])
            out = [r for r in records("long", store.get_branch("long"))
                   if r.node_id not in written]
            assert len(out) == 10

        # (b) the archive as the record: every written turn archived, parse it per read.
        archive = SourceArchive(root / "memory")
        archive.archive([SourceRecord("openprogram", "long", f"t{i}", "user", f"turn {i}")
                         for i in range(n - 10)])
        path = root / "memory" / "sources" / "openprogram" / "_v2" / "long.md"

        def with_archive():
            parsed = parse_v2(path.read_text(encoding="utf-8", errors="surrogateescape"),
                              "sources/openprogram/_v2/long.md")
            held = {f.source_id for f in parsed.frames}
            out = [r for r in records("long", store.get_branch("long"))
                   if r.source_id not in held]
            assert len(out) == 10

        return {"ours": timed(lambda: mem.pending("long"), rounds),
                "ledger": timed(with_ledger, rounds),
                "archive": timed(with_archive, max(3, rounds // 3))}


def per_turn_below_threshold(rounds: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        mem = Memory(root, settings=load_settings(root, {"trigger_tokens": 1_000_000}))
        mem.store.create_session("s")
        for i in range(200):
            mem.store.append_message("s", {"role": "user" if i % 2 == 0 else "assistant",
                                           "content": f"turn {i} about the offsite"},
                                     commit=False)
        mem.write_session("s")  # everything written: the per-turn call sees a short backlog
        mem.store.append_message("s", {"role": "user", "content": "one more turn"},
                                 commit=False)

        def call():
            result = mem.write_turn("s")
            assert not result.steps  # below the threshold: nothing written

        mem.store.create_session("a")

        def append():
            mem.store.append_message("a", {"role": "user", "content": "one more turn"},
                                     commit=False)

        return timed(call, rounds), timed(append, rounds)


def writer_throughput(turns: int, batch_tokens: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        mem = Memory(root, settings=load_settings(root, {"trigger_tokens": batch_tokens}))
        mem.store.create_session("s", title="Offsite planning")
        for i in range(turns):
            text = (f"Question {i}: which hotel near Alfama has a meeting room for {i % 20 + 5}?"
                    if i % 2 == 0 else
                    f"The Alfama Grand has a room for {i % 20 + 5}; I will hold it until day "
                    f"{i % 28 + 1}.")
            mem.store.append_message("s", {"role": "user" if i % 2 == 0 else "assistant",
                                           "content": text}, commit=False)
        start = time.perf_counter()
        result = mem.write_session("s")
        elapsed = time.perf_counter() - start
        assert result.failure is None and len(result.marked) == turns
        return turns / elapsed, len(result.steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and turns")
    args = parser.parse_args()
    rounds = 5 if args.quick else 15
    print(f"python {sys.version.split()[0]}; medians of {rounds} rounds; "
          f"load average at start: {load()}\n")
    print("1. pending work, 10-turn backlog (ms)")
    print(f"{'turns':>8} {'ours':>9} {'ledger':>9} {'archive':>9} {'ledger/ours':>12} "
          f"{'archive/ours':>13}")
    for n in (1_000, 10_000):
        f = pending_figures(n, rounds)
        print(f"{n:>8} {f['ours']:>9.2f} {f['ledger']:>9.2f} {f['archive']:>9.2f} "
              f"{f['ledger'] / f['ours']:>11.1f}x {f['archive'] / f['ours']:>12.1f}x")
    print("\n2. per-turn call below the threshold (no model, no archive)")
    call, append = per_turn_below_threshold(rounds)
    print(f"   write_turn on a written 200-turn session + 1 new turn: {call:.2f} ms; "
          f"baseline, appending one message (no commit): {append:.2f} ms "
          f"(call / append {call / append:.2f}x)")
    turns = 400 if args.quick else 2000
    print("\n3. embedded writer throughput (archive + transaction + search index + mark)")
    for batch in (2_000, 16_000):
        rate, batches = writer_throughput(turns, batch)
        print(f"   {turns} turns, trigger_tokens={batch}: {rate:.0f} turns/s "
              f"({batches} batches)")
    print(f"\nload average at end: {load()}")


if __name__ == "__main__":
    main()
