"""The SQLite search index build, ours beside a baseline revision, each build in a fresh process.

bench_search.py times a side's builds back to back in one process (the least CPU of a few).
On this machine the same build's CPU swings by a quarter from one minute to the next, so a
small change is judged here instead: the two sides take turns, ``--rounds`` builds each, every
build in a new process on its own copy of the same workspace (topic_gen.py's generator; cached
under benchmarks/out/), and the least and the median CPU of each side are printed with their
ratio, beside how many passes the cycle collector made during a build (gc.callbacks) and the
machine load before and after.

Run: python benchmarks/bench_index_build.py [--size 9.8] [--rounds 12] [--baseline-rev dc0349e]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from workspaces import HERE, baseline_src, cached_workspace, load, ours_src

CHILD = r'''
import gc, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, HERE)
from workspaces import copy_workspace
from scriptorium.memory.search.index import SearchIndex
tmp = Path(tempfile.mkdtemp())
try:
    index = SearchIndex(copy_workspace(SIZE, tmp / "ws"))
    passes = []
    gc.callbacks.append(lambda phase, info: passes.append(1) if phase == "start" else None)
    start = time.process_time()
    index.rebuild()
    print(time.process_time() - start, len(passes), index.count())
finally:
    shutil.rmtree(tmp)
'''


def build(src: str, size: float) -> tuple[float, int, int]:
    """(CPU seconds, collector passes, documents) of one build with the code in ``src``."""
    code = CHILD.replace("HERE", repr(str(HERE))).replace("SIZE", repr(size))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": src}).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=float, default=9.8, help="MB of topics")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--baseline-rev", default="dc0349e")
    args = ap.parse_args()
    cached_workspace(args.size)
    sides = {"ours": str(ours_src()), args.baseline_rev: str(baseline_src(args.baseline_rev))}
    before = load()
    runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, src in sides.items():
            runs[name].append(build(src, args.size))
    after = load()
    docs = {name: {r[2] for r in got} for name, got in runs.items()}
    print(f"python {sys.version.split()[0]}; {args.size:g} MB of topics; {args.rounds} builds "
          f"a side, taking turns, each in a new process; load {before} -> {after}\n")
    print("| side | CPU least | CPU median | collector passes a build | documents |")
    print("|---|---|---|---|---|")
    cpu = {}
    for name, got in runs.items():
        times = [r[0] for r in got]
        cpu[name] = (min(times), statistics.median(times))
        print(f"| {name} | {cpu[name][0]:.2f} s | {cpu[name][1]:.2f} s | "
              f"{statistics.median(r[1] for r in got):.0f} | {', '.join(map(str, docs[name]))} |")
    ours, base = cpu["ours"], cpu[args.baseline_rev]
    print(f"\nbaseline ÷ ours: least {base[0] / ours[0]:.2f}×, median {base[1] / ours[1]:.2f}×")


if __name__ == "__main__":
    main()
