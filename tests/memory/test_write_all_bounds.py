"""Writing every session of a home holds a bounded amount, whatever the number of sessions
(issue 12: peak RSS of ``write --all`` must not grow with the home). Asserted by counting what
is alive, never by timing or by RSS: after the writes of K sessions and after K more, the live
objects of our own types, the paths, the open file descriptors, sqlite connections and threads
are the same. The bounded caches are made small so that K sessions fill them. The topic
catalog (what memory already cites) is in a file, not in these counts' objects.
"""

from __future__ import annotations

import gc
import json
import os
import sqlite3
import threading
from collections import Counter
from pathlib import Path, PurePath

from scriptorium.config import load_settings
from scriptorium.memory.sources import archive as archive_mod
from scriptorium.memory.writing import Memory
from scriptorium.sessions import store as store_mod

K = 6


def make_home(home: Path, sessions: int, turns: int = 4) -> None:
    """``sessions`` short sessions written straight to disk (the store's format)."""
    for s in range(sessions):
        hist = home / "sessions" / f"s{s}" / "history"
        hist.mkdir(parents=True)
        prev = "ROOT"
        for i in range(turns):
            role = "user" if i % 2 == 0 else "llm"
            node = {"id": f"s{s}t{i}", "created_at": 1_700_000_000.0 + i, "seq": i,
                    "role": role, "name": "", "input": None, "caller": "",
                    "predecessor": prev, "reads": [], "metadata": {},
                    "output": f"Session {s} turn {i}: the kiln batch {s} fires at {i + 8}."}
            (hist / f"{i:08d}-{role[0]}-s{s}t{i}.json").write_text(json.dumps(node))
            prev = node["id"]
        (hist.parent / "meta.json").write_text(json.dumps(
            {"id": f"s{s}", "title": f"Kiln log {s % 3}", "head_id": prev}))


def alive() -> Counter[str]:
    """Live objects of scriptorium's own types (by qualified name), paths and sqlite
    connections, plus the process's open descriptors and threads."""
    gc.collect()
    counts: Counter[str] = Counter()
    for obj in gc.get_objects():
        kind = type(obj)
        module = kind.__module__  # not a str for some extension types (psycopg's Cython ones)
        if isinstance(module, str) and module.startswith("scriptorium"):
            counts[f"{kind.__module__}.{kind.__qualname__}"] += 1
        elif isinstance(obj, (sqlite3.Connection, PurePath)):
            counts[type(obj).__name__] += 1
    counts["open fds"] = len(os.listdir("/proc/self/fd"))
    counts["threads"] = threading.active_count()
    return counts


def test_writing_twice_as_many_sessions_leaves_no_more_alive(home, monkeypatch):
    monkeypatch.setattr(store_mod, "MAX_OPEN_SESSIONS", 2)
    monkeypatch.setattr(archive_mod, "MAX_CACHED_FILES", 2)
    make_home(home, 3 * K)
    mem = Memory.open(home, settings=load_settings(home))
    results = mem.write_each(force=True)
    seen: list[Counter[str]] = []
    marked = 0
    for n, result in enumerate(results, 1):
        assert result.failure is None, result.failure
        marked += len(result.marked)
        if n in (K, 3 * K):
            del result  # a caller that reports each result lets it go
            seen.append(alive())
    assert marked == 3 * K * 4  # every turn of every session was written
    first, last = seen
    grew = {kind: (first[kind], last[kind]) for kind in last if last[kind] > first[kind]}
    assert not grew, f"alive after {K} / {3 * K} sessions: {grew}"


def test_a_write_leaves_nothing_of_ours_for_the_cycle_collector(home):
    """What a batch parsed and planned (its topic's paragraphs and footnotes, the plan, the
    transaction) is freed when the write returns, by reference counting. Left in reference
    cycles, it waited for a full collection, which comes rarely: a long ``write --all`` held
    more of it the bigger the topics it rewrote, so its peak memory grew with the home."""
    make_home(home, K)
    mem = Memory.open(home, settings=load_settings(home))
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        written = [r for r in mem.write_each(force=True)]
        assert all(r.failure is None and r.marked for r in written)
        del written
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection would free lands in gc.garbage
        gc.collect()
        ours = Counter(type(obj).__qualname__ for obj in gc.garbage
                       if str(type(obj).__module__).startswith("scriptorium"))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    assert not ours, f"left in reference cycles after {K} sessions: {dict(ours)}"
