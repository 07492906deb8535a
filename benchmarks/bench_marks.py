"""What marking a batch costs per node: ours beside the code of ``--baseline-rev``, in one run.

Marking is the last step of a memory write: ``merge_node_metadata_batch`` rewrites every node
file of the batch with the workspace's mark (DESIGN §3). For each batch size, one session of
that many turns is generated through the store (``append_message``, no git), copied once per
round, and marked whole by a fresh process of each side: ours and the baseline's ``src/``
(extracted with ``git archive``, see workspaces.py), rounds interleaved so machine load hits
both alike. Printed per size: the median wall time and CPU time per node of each side, the
ratio, and the load average; each round's caches are dropped to the same state (``sync``
before each mark, so neither side pays for the other's write-back).

Run: python benchmarks/bench_marks.py [--sizes 20,100,600] [--rounds 5] [--baseline-rev REV]
     [--quick]   (--quick: sizes 20,600, 3 rounds)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from workspaces import baseline_src, load, ours_src

BASELINE_REV = "009abc4"  # round 23's base: one fsync per node (in parallel), sequential renames

MAKE = r'''
import sys
from pathlib import Path
from scriptorium.sessions import SessionStore
store = SessionStore(Path(sys.argv[1]), git=False)
store.create_session("s", title="bench")
for i in range(int(sys.argv[2])):
    store.append_message("s", {"role": "user" if i % 2 == 0 else "assistant",
                               "content": f"Question {i}: which hotel near Alfama has a meeting "
                                          f"room for {i % 20 + 5}?"}, commit=False)
'''

MARK = r'''
import json, os, sys, time
from pathlib import Path
from scriptorium.sessions import SessionStore
store = SessionStore(Path(sys.argv[1]), git=False)
ids = [m["id"] for m in store.get_branch("s")]
patches = {nid: {"memory_written_scriptorium": "w-bench"} for nid in ids}
os.sync()
t0, c0 = time.perf_counter(), time.process_time()
store.merge_node_metadata_batch("s", patches)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
assert all(m.get("memory_written_scriptorium") == "w-bench" for m in store.get_branch("s"))
print(json.dumps({"wall": wall, "cpu": cpu, "nodes": len(ids)}))
'''


def child(src: Path, script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(src)})
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="20,100,600", help="nodes per marked batch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline-rev", default=BASELINE_REV)
    ap.add_argument("--quick", action="store_true", help="sizes 20,600 and 3 rounds")
    args = ap.parse_args()
    sizes = [20, 600] if args.quick else [int(x) for x in args.sizes.split(",")]
    rounds = 3 if args.quick else args.rounds
    sides = {"ours": ours_src(), "baseline": baseline_src(args.baseline_rev)}
    print(f"python {sys.version.split()[0]}; load average at start {load()}; baseline = "
          f"commit {args.baseline_rev}; {rounds} rounds, medians\n")
    print("| batch | ours ms/node | baseline ms/node | baseline / ours | ours CPU ms/node "
          "| baseline CPU ms/node | load |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-marks-") as tmp:
        for n in sizes:
            template = Path(tmp) / f"tpl-{n}"
            child(ours_src(), MAKE, str(template), str(n))
            got: dict[str, list[dict]] = {side: [] for side in sides}
            for r in range(rounds):
                for side, src in sides.items():
                    root = Path(tmp) / f"{side}-{n}-{r}"
                    shutil.copytree(template, root, symlinks=True)
                    got[side].append(json.loads(child(src, MARK, str(root)).splitlines()[-1]))
                    shutil.rmtree(root)
            med = {side: {k: statistics.median(x[k] for x in runs) * 1000 / n
                          for k in ("wall", "cpu")} for side, runs in got.items()}
            print(f"| {n} | {med['ours']['wall']:.3f} | {med['baseline']['wall']:.3f} "
                  f"| {med['baseline']['wall'] / med['ours']['wall']:.2f}× "
                  f"| {med['ours']['cpu']:.3f} | {med['baseline']['cpu']:.3f} "
                  f"| {os.getloadavg()[0]:.1f} |", flush=True)
    print(f"\nload average at end {load()}")


if __name__ == "__main__":
    main()
