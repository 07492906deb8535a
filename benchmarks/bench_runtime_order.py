"""What one install pays to rank the blocks it creates in ``runtime.json``, as the home grows.

``creation_order`` holds every block of the home. Ours (``with_created``) splices the new
blocks' ranks into the file's bytes when it is in the form ``dumps`` writes; the baseline is
what installs did before: parse the whole file into a dict, rank, dump it again. For homes of
``--blocks`` blocks (5 new blocks per install): time per install (median of ``--rounds``,
both sides interleaved) and the Python heap peak (tracemalloc) beyond the file's own bytes,
with the ratio, and the machine load.

Usage: python benchmarks/bench_runtime_order.py [--blocks 1000,4000,12000] [--rounds 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc

from scriptorium.memory.runtime_state import RuntimeState, with_created, with_created_parsed


def peak(fn, data: bytes, created: list[str]) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn(data, created)
    top = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return top


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", default="1000,4000,12000")
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}")
    print(f"{'blocks':>7} {'file kB':>8} {'ours ms':>8} {'base ms':>8} {'ratio':>6} "
          f"{'ours peak kB':>13} {'base peak kB':>13} {'ratio':>6}")
    for n in (int(x) for x in args.blocks.split(",")):
        state = RuntimeState({f"{i * 2654435761 % 2**32:08x}": i for i in range(n)}, 3, 2, 20931,
                             "2026-08-10T03:00:04+00:00")
        data = state.dumps().encode("utf-8")
        created = [f"new{i:05d}" for i in range(5)]
        assert with_created(data, created) == with_created_parsed(data, created)
        times: dict[str, list[float]] = {"ours": [], "base": []}
        for _ in range(args.rounds):
            for name, fn in (("ours", with_created), ("base", with_created_parsed)):
                start = time.perf_counter()
                fn(data, created)
                times[name].append(time.perf_counter() - start)
        ours, base = (statistics.median(times[k]) * 1000 for k in ("ours", "base"))
        p_ours, p_base = peak(with_created, data, created), peak(with_created_parsed, data, created)
        print(f"{n:>7} {len(data) / 1024:>8.0f} {ours:>8.2f} {base:>8.2f} {ours / base:>6.2f} "
              f"{p_ours / 1024:>13.0f} {p_base / 1024:>13.0f} {p_ours / p_base:>6.2f}")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
