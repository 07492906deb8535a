"""What grows while ``write --all`` runs: one process writes every session of an N-session home
(the homes of bench_write_all_rss.py) through ``Memory.write_each``, letting each result go, and
prints, per session written between a quarter of the way and the end, how much each root of
long-lived objects grew (its deep size: ``sys.getsizeof`` over ``gc.get_referents``, modules,
classes and functions not entered). Roots: the Memory, its store and workspace, the topic
catalog's fields, every lru cache and module-level value of scriptorium.

``--cpu``: instead, the CPU time per session written (over the same sessions) of each part of a
write that could follow the size of the topic file it changes (the parts, in ``PARTS``, are
wrapped with a process-CPU timer: a part called inside another counts in both), plus the CPU of
the child processes (git). Run it at two sizes to see which parts grow.

Usage: python benchmarks/write_all_attribution.py [--sessions 600] [--top 15] [--cpu]
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


# (label, module, attribute path): the parts of a write whose CPU --cpu measures
PARTS = [
    ("write, whole (writer to marks)", "scriptorium.memory.writing", "Memory.write_batch"),
    ("embedded writer (reads the topic)", "scriptorium.memory.writers.embedded",
     "EmbeddedWriter.write"),
    ("archive evidence", "scriptorium.memory.sources.archive", "SourceArchive.archive"),
    ("commit, whole", "scriptorium.memory.transaction", "Transaction.commit"),
    ("plan: build (normalise, parse, check)", "scriptorium.memory.commit_plan", "CommitPlan.build"),
    ("  normalise the changed paragraphs", "scriptorium.memory.commit_plan",
     "CommitPlan._normalize_edit"),
    ("  parse the result", "scriptorium.memory.commit_plan", "parse_topic_bytes"),
    ("  check ids and links (_validate)", "scriptorium.memory.commit_plan", "CommitPlan._validate"),
    ("  resolve citations (_refs)", "scriptorium.memory.commit_plan", "CommitPlan._refs"),
    ("plan: install", "scriptorium.memory.commit_plan", "CommitPlan.install"),
    ("  runtime.json (block ranks)", "scriptorium.memory.directory", "RuntimeState.dumps"),
    ("  journaled install", "scriptorium.memory.commit_plan", "install_files"),
    ("  catalog learns the install", "scriptorium.memory.catalog", "TopicCatalog.installed"),
    ("    catalog rows written", "scriptorium.memory.catalog_db", "CatalogDB.put"),
    ("  git commit (this process)", "scriptorium.memory.directory", "WorkspaceDir.commit_history"),
    ("search index update", "scriptorium.memory.search.index", "SearchIndex.update"),
    ("  claims' documents", "scriptorium.memory.search.index", "file_documents"),
    ("  rows replaced", "scriptorium.memory.search.rows", "Rows.replace"),
    ("marks", "scriptorium.sessions.marks", "MarkOps.merge_node_metadata_batch"),
]


def time_parts() -> dict[str, list[float]]:
    """Wrap each part of PARTS with a CPU timer; label -> [seconds, calls]."""
    import importlib
    import time

    totals: dict[str, list[float]] = {}
    for label, module_name, attr in PARTS:
        module = importlib.import_module(module_name)
        owner: Any = module
        *outer, name = attr.split(".")
        for part in outer:
            owner = getattr(owner, part)
        real = getattr(owner, name, None)
        if real is None:
            continue  # a part this revision does not have
        cell = totals[label] = [0.0, 0]

        def timed(*a: Any, _real: Any = real, _cell: list[float] = cell, **k: Any) -> Any:
            start = time.process_time()
            try:
                return _real(*a, **k)
            finally:
                _cell[0] += time.process_time() - start
                _cell[1] += 1

        setattr(owner, name, timed)
    return totals


def cpu_main(n: int) -> None:
    totals = time_parts()
    with tempfile.TemporaryDirectory(prefix="bench-attr-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(cached_home(n), home, ignore=shutil.ignore_patterns(".done"))
        mem = Memory.open(home, settings=load_settings(home))
        first: dict[str, list[float]] = {}
        t0 = c0 = 0.0
        for i, result in enumerate(mem.write_each(force=True), 1):
            assert result.failure is None, result.failure
            if i == n // 4:
                first = {k: list(v) for k, v in totals.items()}
                times = os.times()
                t0, c0 = times.user + times.system, times.children_user + times.children_system
        times = os.times()
        own = times.user + times.system - t0
        children = times.children_user + times.children_system - c0
    per = n - n // 4
    print(f"load average {os.getloadavg()[0]:.1f}; CPU ms per session written, sessions "
          f"{n // 4} -> {n} of {n}:\n")
    print("| part | ms per session | calls per session |")
    print("|---|---|---|")
    print(f"| all, this process | {own / per * 1000:.2f} | |")
    print(f"| child processes (git) | {children / per * 1000:.2f} | |")
    for label, _, _ in PARTS:
        if label in totals:
            secs, calls = (totals[label][k] - first.get(label, [0, 0])[k] for k in (0, 1))
            print(f"| {label} | {secs / per * 1000:.2f} | {calls / per:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=600)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--cpu", action="store_true", help="CPU per part instead of memory")
    args = ap.parse_args()
    n = args.sessions
    if args.cpu:
        cpu_main(n)
        return
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
