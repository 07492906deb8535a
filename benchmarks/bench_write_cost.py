"""What a write costs as memory grows: ours beside the pre-change code, in one run.

1. Embedded-writer throughput (archive + transaction + search index + mark) writing one
   session into a workspace that already holds 1 / 10 / 50 MB of topics (synthetic topics
   citing archived turns, as topic_gen.py builds them), at 16k- and 2k-token batches. Each run is a
   fresh process on a fresh copy of the workspace; the first write of the process (which
   builds the topic catalog once: its cost is reported as "cold") is a separate 2-turn
   session, then (after a garbage collection, so the cold write's garbage is not charged to
   the measured one) the measured session is written. ``--baseline-batches`` large enough
   (e.g. 100) makes the baseline write the same turns as ours, for a like-for-like ratio.
2. Disk growth per write: how much the search index and the git history grew, as a ratio to
   the topic text the write added (a curve over writes, with the archive's text too:
   bench_disk_growth.py).

Under load, wall-clock rates are noisy: each row also gives the CPU time per written turn
(the writing process plus the git processes it ran), which the load inflates far less; the
size ratios are given for both.

The baseline is the code of ``--baseline-rev`` (default BASELINE_COMMIT, before issue 12's
work), extracted with ``git archive`` into benchmarks/out/ and run in its own process, so both
sides do the same job on the same input; each row gives the load average it ran under.
Generated workspaces are cached under benchmarks/out/ (gitignored), their history packed (so
neither side's first commit packs the seed's loose objects). The last lines give, per
batch size, how much slower the largest workspace writes than the smallest (the goal: within
1.3x), for ours and the baseline.

Usage:
    python benchmarks/bench_write_cost.py [--sizes 1,10,50] [--turns 1000] [--batches 16,2]
        [--baseline-batches 2] [--baseline-rev REV] [--quick]
    (--quick: 1 MB, 16k batches only, 600 turns, one baseline batch, 3 runs a side: 1-2 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from workspaces import (BASELINE_COMMIT, CHILD_HELPERS, baseline_src, copy_workspace, load,
                        ours_src)

CHILD = r'''
import json, os, resource, sys, time
from pathlib import Path
from scriptorium.config import load_settings
from scriptorium.memory.writing import Memory

home, turns, batch = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
mem = Memory(home, settings=load_settings(home, {"trigger_tokens": batch}))

''' + CHILD_HELPERS + r'''
def index_size():
    """The index's files once its write-ahead log is folded in (the WAL is transient)."""
    import sqlite3
    rt = mem.workspace.runtime_dir
    conn = sqlite3.connect(rt / "search.sqlite")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sum(os.path.getsize(rt / n) for n in os.listdir(rt) if n.startswith("search.sqlite"))

marking = [0.0]  # seconds inside the mark step (merge_node_metadata_batch)
_merge = mem.store.merge_node_metadata_batch
def timed_merge(*a, **k):
    t = time.perf_counter()
    try:
        return _merge(*a, **k)
    finally:
        marking[0] += time.perf_counter() - t
mem.store.merge_node_metadata_batch = timed_merge

session("warm", 2, "Warm up")
session("s", turns, "Offsite planning")
t0 = time.perf_counter()
assert mem.write_session("warm").failure is None
cold = time.perf_counter() - t0
# The cold write's one-off work (a catalog of all of memory) leaves a full garbage collection
# due; it belongs to that write, not to the measured one (both sides get the same treatment).
import gc; gc.collect()

topics0, git0, idx0 = size(mem.workspace.topics_dir), size(mem.workspace.root / ".git"), index_size()
t0, c0, marking[0] = time.perf_counter(), cpu(), 0.0
result = mem.write_session("s")
elapsed, spent = time.perf_counter() - t0, cpu() - c0
assert result.failure is None and len(result.marked) == turns, result.failure
print(json.dumps({"rate": turns / elapsed, "cpu_ms": spent * 1000 / turns, "batches": len(result.steps), "cold": cold,
                  "mark_per_turn": marking[0] / turns,
                  "topics_added": size(mem.workspace.topics_dir) - topics0,
                  "git_added": size(mem.workspace.root / ".git") - git0,
                  "index_added": index_size() - idx0}))
'''


def run(src: Path, mb: float, turns: int, batch: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-write-") as tmp:
        home = Path(tmp)
        copy_workspace(mb, home / "memory", packed=True)  # as a memory in use keeps it
        env = {**os.environ, "PYTHONPATH": str(src)}
        proc = subprocess.run([sys.executable, "-c", CHILD, str(home), str(turns), str(batch)],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        return json.loads(proc.stdout.strip().splitlines()[-1])


def median_run(rounds: int, src: Path, mb: float, turns: int, batch: int) -> dict:
    """The run with the median rate of ``rounds`` runs (load swings hit single runs)."""
    runs = sorted((run(src, mb, turns, batch) for _ in range(rounds)), key=lambda r: r["rate"])
    return runs[len(runs) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1,10,50", help="MB of topics, comma separated")
    ap.add_argument("--turns", type=int, default=1000, help="turns written by ours")
    ap.add_argument("--baseline-batches", type=int, default=2,
                    help="full batches written by the baseline (0: skip it)")
    ap.add_argument("--baseline-rev", default=BASELINE_COMMIT,
                    help=f"the commit the baseline runs (default {BASELINE_COMMIT}, before "
                         f"issue 12's work)")
    ap.add_argument("--batches", default="16,2", help="batch sizes in thousands of tokens")
    ap.add_argument("--rounds", type=int, default=1, help="runs per side and row (median)")
    ap.add_argument("--quick", action="store_true",
                    help="--sizes 1 --batches 16 --turns 600 --baseline-batches 1 --rounds 3")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.batches, args.turns = "1", "16", 600
        args.baseline_batches, args.rounds = 1, 3
    batches = [int(x) * 1000 for x in args.batches.split(",")]
    print(f"python {sys.version.split()[0]}; load average at start {load()}; baseline = "
          f"commit {args.baseline_rev}\n")
    print(f"{args.rounds} run(s) per side and row, the median shown\n")
    print("| topics | batch | ours turns/s | baseline turns/s | ours / baseline | mark ms/turn "
          "ours / baseline | CPU ms/turn ours / baseline | ours cold first write "
          "| index growth / text | git growth / text | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for mb in (float(x) for x in args.sizes.split(",")):
        for batch in batches:
            ours = median_run(args.rounds, ours_src(), mb, args.turns, batch)
            # The baseline writes the same full-size batches, only fewer of them.
            per_batch = max(1, args.turns // max(1, ours["batches"]))
            base = median_run(args.rounds, baseline_src(args.baseline_rev), mb,
                              min(args.turns, args.baseline_batches * per_batch),
                              batch) if args.baseline_batches else None
            text = max(ours["topics_added"], 1)
            rows.append((mb, batch, ours, base))
            print(f"| {mb:g} MB | {batch // 1000}k | {ours['rate']:.0f} "
                  f"| {base['rate']:.0f} | {ours['rate'] / base['rate']:.1f}× "
                  if base else f"| {mb:g} MB | {batch // 1000}k | {ours['rate']:.0f} | – | – ",
                  end="")
            print(f"| {ours['mark_per_turn'] * 1000:.2f} / "
                  + (f"{base['mark_per_turn'] * 1000:.2f} " if base else "– "), end="")
            print(f"| {ours['cpu_ms']:.2f} / "
                  + (f"{base['cpu_ms']:.2f} " if base else "– "), end="")
            print(f"| {ours['cold'] * 1000:.0f} ms | {ours['index_added'] / text:.2f} "
                  f"| {ours['git_added'] / text:.2f} | {os.getloadavg()[0]:.1f} |", flush=True)
    print(f"\nload average at end {load()}")
    sizes = sorted({mb for mb, *_ in rows})
    for side, pick in (("ours", 2), ("baseline", 3)):
        by = {(mb, b): r[pick] for r in rows for mb, b in [r[:2]] if r[pick]}
        for batch in batches:
            cells = [by[(mb, batch)] for mb in sizes if (mb, batch) in by]
            if len(cells) > 1:
                print(f"{side}, {batch // 1000}k batches: throughput at {sizes[0]:g} MB / at "
                      f"{sizes[-1]:g} MB = {cells[0]['rate'] / cells[-1]['rate']:.2f}×; CPU "
                      f"per turn at {sizes[-1]:g} MB / at {sizes[0]:g} MB = "
                      f"{cells[-1]['cpu_ms'] / cells[0]['cpu_ms']:.2f}×")


if __name__ == "__main__":
    main()
