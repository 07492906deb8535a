"""MCP overhead: ``search_memory`` through the stdio server vs the library call it wraps.

Builds a home whose workspace holds ~``--mb`` of topics (the synthetic topics of
bench_search.py, citing archived turns), starts ``scriptorium mcp`` as a subprocess with the
SDK's real client, and times the same queries both ways in one run:

- library: ``search(memory.workspace, q)`` in this process (warm index);
- MCP: ``client.call_tool("search_memory", {"query": q})`` — JSON-RPC over the subprocess's
  stdin/stdout, argument validation, the same search, the structured result back.

The overhead is the difference of the medians (goal: < 5 ms at 10 MB).

Usage:
    python benchmarks/bench_mcp.py [--mb 10] [--queries 40] [--rounds 3]
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

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

sys.path.insert(0, str(Path(__file__).parent))
from topic_gen import build  # noqa: E402

from scriptorium.memory.search import search  # noqa: E402
from scriptorium.memory.writing import Memory  # noqa: E402


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(0.95 * len(xs) + 0.5) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        home = Path(tmp)
        info = build(home / "memory", args.mb)
        memory = Memory(home)
        rnd = random.Random(11)
        queries = [" ".join(rnd.sample(info["vocab"][20:1500], rnd.randint(1, 3)))
                   for _ in range(args.queries)]
        search(memory.workspace, queries[0])  # build the index once, outside the timings

        lib: list[float] = []
        for _ in range(args.rounds):
            for q in queries:
                t0 = time.perf_counter()
                search(memory.workspace, q)
                lib.append((time.perf_counter() - t0) * 1000)

        params = StdioServerParameters(
            command=sys.executable, args=["-m", "scriptorium", "mcp", "--home", str(home)],
            env={"PYTHONPATH": os.pathsep.join(sys.path)})
        rpc: list[float] = []

        async def through_mcp() -> None:
            async with Client(params) as client:
                await client.call_tool("search_memory", {"query": queries[0]})  # warm
                for _ in range(args.rounds):
                    for q in queries:
                        t0 = time.perf_counter()
                        result = await client.call_tool("search_memory", {"query": q})
                        rpc.append((time.perf_counter() - t0) * 1000)
                        assert not result.is_error, result.content

        anyio.run(through_mcp)
    load = os.getloadavg()
    med = statistics.median
    print(f"topics: {info['bytes'] / 1e6:.1f} MB in {info['files']} files; "
          f"{len(lib)} queries each way; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| way | median | p95 |")
    print("|---|---|---|")
    print(f"| library `search()` | {med(lib):.2f} ms | {p95(lib):.2f} ms |")
    print(f"| MCP `search_memory` over stdio | {med(rpc):.2f} ms | {p95(rpc):.2f} ms |")
    print(f"overhead (difference of medians): {med(rpc) - med(lib):.2f} ms; "
          f"ratio MCP / library: {med(rpc) / med(lib):.2f}×")


if __name__ == "__main__":
    main()
