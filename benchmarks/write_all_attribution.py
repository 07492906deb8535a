"""What grows while ``write --all`` runs: one process writes every session of an N-session home
(the homes of bench_write_all_rss.py) through ``Memory.write_each``, letting each result go, and
prints, per session written between a quarter of the way and the end, how much each root of
long-lived objects grew (its deep size: ``sys.getsizeof`` over ``gc.get_referents``, modules,
classes and functions not entered). Roots: the Memory, its store and workspace, the topic
catalog's fields, every lru cache and module-level value of scriptorium.

Usage: python benchmarks/write_all_attribution.py [--sessions 600] [--top 15]
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from bench_write_all_rss import cached_home

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from scriptorium.config import load_settings  # noqa: E402
from scriptorium.memory.catalog import TopicCatalog  # noqa: E402
from scriptorium.memory.writing import Memory  # noqa: E402

OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
          types.MethodType, types.CodeType, types.FrameType)


def deep_size(root: Any) -> int:
    seen: set[int] = set()
    total, stack = 0, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, OPAQUE):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj, 0)
        stack.extend(gc.get_referents(obj))
    return total


def roots(mem: Memory) -> dict[str, Any]:
    out: dict[str, Any] = {"memory": mem, "store": mem.store, "workspace": mem.workspace}
    for catalog in TopicCatalog._instances.values():
        out.update({f"catalog.{name}": value for name, value in vars(catalog).items()})
    for mname, module in list(sys.modules.items()):
        if not mname.startswith("scriptorium"):
            continue
        for name, value in vars(module).items():
            if isinstance(value, functools._lru_cache_wrapper):
                out[f"lru {mname}.{name}"] = value
            elif not isinstance(value, OPAQUE) and not name.startswith("__"):
                out[f"{mname}.{name}"] = value
    return out


def measure(mem: Memory) -> dict[str, int]:
    gc.collect()
    return {name: deep_size(value) for name, value in roots(mem).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=600)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    n = args.sessions
    with tempfile.TemporaryDirectory(prefix="bench-attr-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(cached_home(n), home, ignore=shutil.ignore_patterns(".done"))
        mem = Memory.open(home, settings=load_settings(home))
        first: dict[str, int] = {}
        for i, result in enumerate(mem.write_each(force=True), 1):
            assert result.failure is None, result.failure
            if i == n // 4:
                del result
                first = measure(mem)
        last = measure(mem)
    per = n - n // 4
    print(f"load average {os.getloadavg()[0]:.1f}; growth per session written, sessions "
          f"{n // 4} -> {n} of {n}:\n")
    print("| root | bytes per session | deep size at the end |")
    print("|---|---|---|")
    rows = sorted(((last[k] - first.get(k, 0), k) for k in last), reverse=True)
    for grew, name in rows[:args.top]:
        print(f"| {name} | {grew / per:.0f} | {last[name]:,} |")


if __name__ == "__main__":
    main()
