"""Where the memory of ``memory write --all`` goes, session by session: a probe, not a benchmark.

Writes a fresh copy of a cached benchmark home (``bench_write_all_rss.cached_home``) in this
process through ``Memory.write_each(force=True)``, and every ``--every`` sessions prints the
process's resident set split as the kernel counts it (anonymous memory, file pages mapped in,
the peak since the last row: VmHWM is reset through ``/proc/self/clear_refs`` after each
row), SQLite's own allocator (``sqlite3_memory_used``), the live Python objects after a
full collection and the size of CPython's interned-string table. With ``--trace`` it also
compares two tracemalloc snapshots (after ``--from`` and at the end) by traceback, largest
growth first.

Usage:
    python benchmarks/probe_write_all_memory.py [--sessions 1000] [--every 100] [--per-title N]
        [--trace] [--from 200] [--frames 12] [--top 15] [--peaks] [--trim] [--shrink]
        [--index-cache KB] [--index-mmap BYTES] [--src PATH]

(``--trim``: malloc_trim(0) after each session, which ``write_each`` itself does since
round 31, so it matters for a ``--src`` baseline; ``--shrink``: PRAGMA shrink_memory on every
connection; ``--index-cache`` / ``--index-mmap``: try other search index settings (the map
is the one a connection opens with: since round 31 updates after the first session run
unmapped);
``--peaks``: each interval's largest Python peak within one session; ``--phases``: how far
each step of a session's write takes the resident set above where the step began, mean and
largest over each interval (VmHWM reset as each step begins, so the VmHWM column then
holds only the peak since the last step began); ``--per-title``: the home
with N sessions a title, whose topics stay the same size, instead of 40 titles.)
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import os
import resource
import shutil
import sqlite3
import sys
import tempfile
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile (kB) from /proc/self/status."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(rest.split()[0])
    return out


def reset_peak() -> None:
    """Start VmHWM again from the current RSS, so the next row's peak is its interval's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _sqlite_lib() -> ctypes.CDLL | None:
    """The libsqlite3 the sqlite3 module is linked to (the one already in this process)."""
    import _sqlite3

    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libsqlite3" in line:
            return ctypes.CDLL(line.split()[-1])
    try:
        return ctypes.CDLL(_sqlite3.__file__)  # statically linked
    except OSError:
        return None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]


def malloc_heap(libc: ctypes.CDLL) -> tuple[int, int]:
    """glibc's main heap: (bytes taken from the system, bytes of it in use), in kB."""
    fn = getattr(libc, "mallinfo2", None)
    if fn is None:
        return 0, 0
    fn.restype = _MallInfo2
    mi = fn()
    return (mi.arena + mi.hblkhd) // 1024, (mi.uordblks + mi.hblkhd) // 1024


def pymalloc_arenas() -> int:
    """Arenas pymalloc holds now (each 256 kB on 3.11), from ``sys._debugmallocstats``."""
    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(f.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        for line in f.read().decode().splitlines():
            if line.startswith("# arenas allocated current"):
                return int(line.split("=")[1].replace(",", ""))
    return 0


def connection_cache(lib: ctypes.CDLL | None) -> str:
    """Page cache + statement memory of every open sqlite3 connection (kB), read with
    ``sqlite3_db_status`` through the ``sqlite3 *`` that CPython keeps right after the
    object header of a connection (a probe's trick, CPython 3.11)."""
    if lib is None:
        return ""
    out = []
    for obj in gc.get_objects():
        if type(obj) is sqlite3.Connection:
            try:
                obj.total_changes  # closed connections raise
            except sqlite3.ProgrammingError:
                continue
            db = ctypes.c_void_p.from_address(id(obj) + 2 * ctypes.sizeof(ctypes.c_void_p))
            vals = []
            for op in (1, 3):  # SQLITE_DBSTATUS_CACHE_USED, _STMT_USED
                cur, hi = ctypes.c_int(), ctypes.c_int()
                lib.sqlite3_db_status(db, op, ctypes.byref(cur), ctypes.byref(hi), 0)
                vals.append(cur.value // 1024)
            name = obj.execute("PRAGMA database_list").fetchone()[2].rsplit("/", 1)[-1]
            out.append(f"{name} {vals[0]}+{vals[1]}")
    return ", ".join(sorted(out))


def statements(lib: ctypes.CDLL | None) -> str:
    """The prepared statements each open connection holds (CPython's statement cache keeps
    up to 128 per connection): how many, their memory, and the texts that differ only in
    how many ``?`` they carry, folded into one line with a count."""
    if lib is None:
        return ""
    lib.sqlite3_next_stmt.restype = ctypes.c_void_p
    lib.sqlite3_next_stmt.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.sqlite3_sql.restype = ctypes.c_char_p
    lib.sqlite3_sql.argtypes = [ctypes.c_void_p]
    lib.sqlite3_stmt_status.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lines = []
    for obj in gc.get_objects():
        if type(obj) is not sqlite3.Connection:
            continue
        try:
            name = obj.execute("PRAGMA database_list").fetchone()[2].rsplit("/", 1)[-1]
        except sqlite3.ProgrammingError:
            continue
        db = ctypes.c_void_p.from_address(id(obj) + 2 * ctypes.sizeof(ctypes.c_void_p)).value
        shapes: dict[str, list[int]] = {}
        stmt = lib.sqlite3_next_stmt(db, None)
        while stmt:
            sql = (lib.sqlite3_sql(stmt) or b"").decode()
            shape = " ".join(sql.replace("?,", "").split())[:90]
            shapes.setdefault(shape, []).append(lib.sqlite3_stmt_status(stmt, 99, 0))
            stmt = lib.sqlite3_next_stmt(db, stmt)
        total = sum(sum(v) for v in shapes.values())
        lines.append(f"{name}: {sum(len(v) for v in shapes.values())} statements, "
                     f"{total // 1024} kB")
        for shape, sizes in sorted(shapes.items(), key=lambda kv: -sum(kv[1]))[:6]:
            lines.append(f"    {len(sizes)} x {sum(sizes) // 1024} kB  {shape}")
    return "\n".join(lines)


def watch_phases(excursions: dict[str, list[int]]) -> None:
    """Wrap the steps of a session's write so each appends, under its name, how far the
    resident set rose above where it began (kB; VmHWM is reset as it begins). The steps do
    not nest, so each reset starts one step's own peak."""
    from scriptorium.memory import transaction, write_step, writing
    from scriptorium.memory import search
    from scriptorium.memory.sources import archive
    from scriptorium.sessions import store

    def wrap(owner: object, name: str, label: str) -> None:
        real = getattr(owner, name)

        def step(*args: object, **kw: object) -> object:
            reset_peak()
            start = status()["VmRSS"]
            try:
                return real(*args, **kw)
            finally:
                excursions.setdefault(label, []).append(status()["VmHWM"] - start)
        setattr(owner, name, step)

    for owner, name, label in (
            (write_step, "_would_strand", "strand check"),
            (archive.SourceArchive, "archive", "archive"),
            (write_step, "cited_sources", "cited?"),
            (transaction.Transaction, "__init__", "stage"),
            (search, "update_index", "index update"),
            (store.SessionStore, "merge_node_metadata_batch", "mark"),
            (writing.Memory, "still_pending", "still pending")):
        wrap(owner, name, label)


def interned(text: str) -> bool:
    """Is a string equal to ``text`` in CPython's interned-string table? (A fresh copy is
    interned: if another string comes back, one was there. The copy stays interned, so ask
    each name once, at the end.)"""
    copy = "".join(list(text))
    return sys.intern(copy) is not copy


def interned_names(sessions: int) -> str:
    """Which per-session names the write left interned, over a sample of sessions."""
    sample = range(1, sessions, max(1, sessions // 20))
    names = {"session id": "s{}", "archive file": "s{}.md", "node id": "s{}t3",
             "node file": "00000003-l-s{}t3.json"}
    counts = {what: sum(interned(form.format(s)) for s in sample) for what, form in names.items()}
    return ", ".join(f"{what} {n}/{len(sample)}" for what, n in counts.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--from", dest="start", type=int, default=200)
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--peaks", action="store_true",
                    help="trace Python allocations (1 frame) for each session's transient peak")
    ap.add_argument("--phases", action="store_true",
                    help="each step's own rise of the resident set, mean and largest a row")
    ap.add_argument("--trim", action="store_true", help="malloc_trim(0) after each session")
    ap.add_argument("--index-cache", type=int, default=None,
                    help="try the search index connection with this cache_size (kB)")
    ap.add_argument("--index-mmap", type=int, default=None,
                    help="try the search index connection with this mmap_size (bytes)")
    ap.add_argument("--shrink", action="store_true",
                    help="PRAGMA shrink_memory on every open connection after each session")
    ap.add_argument("--per-title", type=int, default=None,
                    help="N sessions a title (topics stay the same size); default 40 titles")
    ap.add_argument("--src", default=None, help="import scriptorium from here (a baseline)")
    args = ap.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    from bench_write_all_rss import cached_home
    from scriptorium.memory.writing import Memory

    if args.index_cache is not None or args.index_mmap is not None:
        from scriptorium.memory.search import index as index_mod

        opened = index_mod.open_index

        def open_index(path: Path) -> sqlite3.Connection:
            conn = opened(path)
            if args.index_cache is not None:
                conn.execute(f"PRAGMA cache_size=-{args.index_cache}")
            if args.index_mmap is not None:
                conn.execute(f"PRAGMA mmap_size={args.index_mmap}")
            return conn

        index_mod.open_index = open_index
    lib = _sqlite_lib()
    used = getattr(lib, "sqlite3_memory_used", None) if lib else None
    if used is not None:
        used.restype = ctypes.c_int64
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if args.trace or args.peaks:
        tracemalloc.start(args.frames if args.trace else 1)
    excursions: dict[str, list[int]] = {}
    if args.phases:
        watch_phases(excursions)
    with tempfile.TemporaryDirectory(prefix="probe-rss-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(cached_home(args.sessions, args.per_title), home,
                        ignore=shutil.ignore_patterns(".done"))
        os.environ["SCRIPTORIUM_HOME"] = str(home)
        mem = Memory.open(home)
        first = None
        print("| sessions | VmRSS | RssAnon | RssFile | VmHWM | sqlite | malloc heap/used "
              "| pymalloc arenas | gc objects | connections cache+stmt | threads | Python peak "
              "over a session (max, kB) | largest child so far (git; kB) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        top = 0
        for k, result in enumerate(mem.write_each(None, force=True), 1):
            if args.peaks:
                now, peak = tracemalloc.get_traced_memory()
                top = max(top, (peak - now) // 1024)
                tracemalloc.reset_peak()
            assert result.failure is None, result.failure
            del result
            if args.shrink:
                for obj in gc.get_objects():
                    if type(obj) is sqlite3.Connection:
                        try:
                            obj.execute("PRAGMA shrink_memory")
                        except sqlite3.ProgrammingError:
                            pass
            if args.trim:
                libc.malloc_trim(0)
            if k == args.start and args.trace:
                gc.collect()
                first = tracemalloc.take_snapshot()
            if k % args.every == 0 or k == args.sessions:
                gc.collect()
                st = status()
                sq = used() / 1024 if used is not None else float("nan")
                heap, inuse = malloc_heap(libc)
                print(f"| {k} | {st['VmRSS']} | {st['RssAnon']} | {st['RssFile']} | "
                      f"{st['VmHWM']} | {sq:.0f} | {heap}/{inuse} | {pymalloc_arenas()} | "
                      f"{len(gc.get_objects())} | {connection_cache(lib)} | "
                      f"{len(os.listdir('/proc/self/task'))} | {top} | "
                      f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss} |", flush=True)
                top = 0
                if excursions:
                    print("|  | " + ", ".join(
                        f"{label} {sum(v) // len(v)}/{max(v)}"
                        for label, v in excursions.items()) + " (kB, mean/largest) |")
                    excursions.clear()
                reset_peak()
        print(statements(lib))
        print(f"interned per-session names: {interned_names(args.sessions)}")
        for f in sorted((home / "memory").rglob("*.sqlite")):
            print(f"{f.relative_to(home)}: {f.stat().st_size // 1024} kB")
        if first is not None:
            gc.collect()
            last = tracemalloc.take_snapshot()
            stats = last.compare_to(first, "traceback")
            total = sum(s.size_diff for s in stats)
            count = sum(s.count_diff for s in stats)
            print(f"\ntraced growth {total / 1024:.0f} kB in {count} blocks "
                  f"from {args.start} to {args.sessions} sessions")
            for s in stats[:args.top]:
                print(f"\n{s.size_diff / 1024:+.1f} kB {s.count_diff:+d} blocks")
                for line in s.traceback.format()[-2 * args.frames:]:
                    print("   ", line)


if __name__ == "__main__":
    main()
