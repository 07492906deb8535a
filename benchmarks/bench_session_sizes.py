"""Session-store costs as curves over the session's size (issue 12), printed in one run.

1. Cold pending work: a new store computes ``Memory.pending`` (10-turn backlog) on a session it
   has never read, against the read-and-parse floor measured in the same process, rounds
   interleaved (FLOOR_DOES below), in CPU time (less sensitive to a loaded machine than wall
   time, also printed); ours and the code of ``--baseline-rev`` each in child processes,
   taking turns; and, up to ``--old-max`` turns, the store code of ``--old-rev`` (quadratic).
2. Append: one turn (user message + assistant reply, no git commit) at each size against the
   same turn on a 10-node session, rounds interleaved so machine load hits both alike, in CPU
   time (wall beside); the full re-scans of ``history/`` the appends triggered are counted.
3. The per-turn git commit at each size: ours (``update-index`` of the changed files,
   ``write-tree --missing-ok``, plumbing commit) against the way before it (``add -A --
   files``, a ``write-tree`` that looks up every blob) and ``git add -A`` + ``git commit``
   on the same repository, rounds interleaved; with our CPU time (this process and git), the
   mean of PACK_EVERY more commits of ours (so one packing of the history is included), and
   the size of the ``history/`` tree object every commit writes anew (the flat layout of
   DESIGN §3).
4. Marking a 20-node batch (``merge_node_metadata_batch``): ours (one durable step) against
   one atomic, fsynced replace per node (the old way: two fsyncs per node); and the next
   read after a mark, which re-lists ``history/`` (a mark never records the index as synced).

The sessions are generated as node files written straight to disk, in the store's format (a
linear chain, all but the last 10 turns marked for the workspace): appending 50,000 turns one
by one would benchmark the append path instead.

Run: python benchmarks/bench_session_sizes.py [--sizes 100,1000,10000,50000]
     [--append-sizes 100,1000,10000,50000,100000] [--rounds N] [--only cold,append,commit,mark]
     [--baseline-rev fda7463] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import bench_write_path  # noqa: E402  (the long-session generator)

from scriptorium.fsutil import atomic_write_bytes  # noqa: E402
from scriptorium.gitrepo import GitRepo  # noqa: E402
from scriptorium.sessions import SessionStore  # noqa: E402
from scriptorium.sessions.commits import PACK_EVERY  # noqa: E402

MARK = "memory_written_scriptorium"
REPO = Path(__file__).resolve().parents[1]

FLOOR_DOES = ("the floor lists history/ through one descriptor of it and, per node file, "
              "opens it by name relative to that descriptor, reads it with one read() and "
              "closes it, then parses it with the store's own parse_node; it keeps nothing "
              "and makes no stat call: the least any cold open must do")

COLD_CHILD = r"""
import json, os, statistics, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from scriptorium.config import load_settings
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore
from scriptorium.sessions.node import parse_node
home, rounds = Path(sys.argv[2]), int(sys.argv[3])
hist = str(home / "sessions" / "long" / "history")

def floor():
    dfd = os.open(hist, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with os.scandir(dfd) as it:
            for entry in it:
                fd = os.open(entry.name, os.O_RDONLY, dir_fd=dfd)
                try:
                    data = os.read(fd, 1 << 16)  # the generated node files are far smaller
                finally:
                    os.close(fd)
                assert len(data) < 1 << 16
                parse_node(data, entry.name)
    finally:
        os.close(dfd)

def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c

mem = Memory(home, settings=load_settings(home), store=SessionStore(home / "sessions", git=False))
out = {"floor": [], "pending": []}
floor()  # warm-up, not counted: first calls of the code paths and imports, for both
mem.pending("long")
for _ in range(rounds):
    out["floor"].append(timed(floor))
    mem.store = SessionStore(home / "sessions", git=False)
    out["pending"].append(timed(lambda: len(mem.pending("long")) == 10 or sys.exit("wrong")))
print(json.dumps(out))
"""

OLD_PENDING = r"""
import sys, time, statistics
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from scriptorium.config import load_settings
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore
home, rounds = Path(sys.argv[2]), int(sys.argv[3])
mem = Memory(home, settings=load_settings(home), store=SessionStore(home / "sessions", git=False))
out = []
for _ in range(rounds):
    mem.store = SessionStore(home / "sessions", git=False)
    t0 = time.perf_counter()
    assert len(mem.pending("long")) == 10
    out.append(time.perf_counter() - t0)
print(statistics.median(out))
"""


def make_session(home: Path, n: int) -> str:
    """bench_write_path's n-turn session (all but the last 10 turns marked), backdated an
    hour like a long-lived session; returns its id."""
    bench_write_path.make_session(home, n, backlog=10)
    sdir = home / "sessions" / "long"
    past = time.time() - 3600
    for p in [*(sdir / "history").iterdir(), sdir / "history", sdir / "meta.json"]:
        os.utime(p, (past, past))
    return "long"


def header(title: str, *columns: str) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def ms(x: float) -> str:
    return f"{x * 1000:.1f}" if x >= 0.01 else f"{x * 1000:.2f}"


def old_tree(tmp: Path, rev: str, label: str = "old") -> Path | None:
    """The package as it was at ``rev`` (git archive), or None if git cannot give it."""
    dest = tmp / label
    dest.mkdir()
    try:
        tar = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src/scriptorium"],
                             capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    return dest / "src"


def cold_child(src: Path, home: Path, rounds: int) -> dict[str, list[list[float]]]:
    """``rounds`` (wall, CPU) pairs of the floor and of a cold pending, from a child process
    running the package at ``src``."""
    r = subprocess.run([sys.executable, "-c", COLD_CHILD, str(src), str(home), str(rounds)],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def cold_pending(tmp: Path, sizes: list[int], rounds: int, base: Path | None, base_rev: str,
                 old: Path | None, old_max: int) -> None:
    print(f"\n{FLOOR_DOES}.")
    print("CPU medians; ours and the baseline each run in child processes, taking turns, "
          "each against the floor measured in its own process.")
    header("Cold pending work (new store, first `Memory.pending`, 10-turn backlog)",
           "turns", "floor CPU", "ours CPU", "**ours / floor (CPU)**", "ours / floor (wall)",
           f"`{base_rev}` CPU", f"`{base_rev}` / floor (CPU)", f"`{base_rev}` / ours",
           "old code (wall)", "old / ours (wall)")
    ours_src = REPO / "src"
    for n in sizes:
        home = tmp / f"cold{n}"
        make_session(home, n)
        got: dict[str, dict[str, list[list[float]]]] = {"ours": {}, "base": {}}
        for _ in range(2):  # two children each, taking turns, so load hits both alike
            for who, src in (("ours", ours_src), ("base", base)):
                if src is None:
                    continue
                for key, pairs in cold_child(src, home, max(1, rounds // 2)).items():
                    got[who].setdefault(key, []).extend(pairs)

        def med(who: str, key: str, i: int) -> float:
            return statistics.median(pair[i] for pair in got[who][key])

        f, o, fw, ow = med("ours", "floor", 1), med("ours", "pending", 1), \
            med("ours", "floor", 0), med("ours", "pending", 0)
        base_cells = ["–", "–", "–"]
        if got["base"]:
            bf, bo = med("base", "floor", 1), med("base", "pending", 1)
            base_cells = [f"{ms(bo)} ms", f"{bo / bf:.2f}", f"{bo / o:.2f}x"]
        old_cell, ratio = "–", "–"
        if old is not None and n <= old_max:
            r = subprocess.run([sys.executable, "-c", OLD_PENDING, str(old), str(home),
                                "1" if n >= 10_000 else str(rounds)],
                               capture_output=True, text=True, check=True)
            t_old = float(r.stdout.strip())
            old_cell, ratio = f"{ms(t_old)} ms", f"{t_old / ow:.1f}x"
        print(f"| {n:,} | {ms(f)} ms | {ms(o)} ms | **{o / f:.2f}** | {ow / fw:.2f} | "
              f"{' | '.join(base_cells)} | {old_cell} | {ratio} |")


def one_turn(store: SessionStore, sid: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one turn's two appends."""
    t0, c0 = time.perf_counter(), time.process_time()
    store.append_message(sid, {"role": "user", "content": "one more question " * 10})
    store.append_message(sid, {"role": "assistant", "content": "one more answer " * 20})
    return time.perf_counter() - t0, time.process_time() - c0


def appends(tmp: Path, sizes: list[int], rounds: int) -> None:
    header("Append one turn (user + reply, no commit), warm store: CPU time (wall beside)",
           "nodes", "ours CPU", "same turn at 10 nodes, CPU", "**ratio (CPU)**", "ratio (wall)",
           "full re-scans of history/")
    stores: dict[int, SessionStore] = {}
    for n in [10, *sizes]:
        make_session(tmp / f"append{n}", n)
        stores[n] = SessionStore(tmp / f"append{n}" / "sessions", git=False)
        stores[n].get_branch("long")  # open once: the cold open is measured above
    samples: dict[int, list[tuple[float, float]]] = {n: [] for n in stores}
    scans0 = {n: st._index("long").scans for n, st in stores.items()}
    for _ in range(rounds):
        for n, st in stores.items():
            samples[n].append(one_turn(st, "long"))

    def med(n: int, i: int) -> float:
        return statistics.median(pair[i] for pair in samples[n])

    for n in sizes:
        scans = stores[n]._index("long").scans - scans0[n]
        print(f"| {n:,} | {ms(med(n, 1))} ms | {ms(med(10, 1))} ms | "
              f"**{med(n, 1) / med(10, 1):.2f}** | {med(n, 0) / med(10, 0):.2f} | "
              f"{scans} in {2 * rounds} appends |")


def cpu() -> float:
    """CPU seconds of this process and its finished children (the git commands): less
    sensitive than wall time to the load of a shared machine."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), \
        resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def add_paths_commit(repo: GitRepo, message: str, paths: list[str]) -> str | None:
    """The per-turn commit before this change (commit 683ba17): ``add -A -- paths`` (a
    pathspec match), ``write-tree`` (which looks up every blob the index names), plumbing."""
    repo._run(["-c", "core.splitIndex=true", "add", "-A", "--", *paths])
    tree = repo._run(["write-tree"]).stdout.strip()
    head = repo._run(["rev-parse", "HEAD"]).stdout.strip()
    sha = repo._run(["commit-tree", tree, "-p", head, "-m", message]).stdout.strip()
    repo._run(["update-ref", "HEAD", sha, head])
    return sha


def commits(tmp: Path, sizes: list[int], rounds: int) -> None:
    header("The per-turn git commit (after a turn's two appends), rounds interleaved",
           "nodes", "ours: `update-index` of the changed files, `write-tree --missing-ok`, "
           "plumbing commit", "ours: CPU (this process + git)",
           f"ours, mean of {PACK_EVERY} (one packing)",
           "before: `add -A -- files`, `write-tree`, plumbing",
           "`add -A` + `commit`", "ours / before", "`history/` tree object")
    for n in [10, *sizes]:
        home = tmp / f"git{n}"
        sid = make_session(home, n)
        store = SessionStore(home / "sessions", git=True)
        store.append_message(sid, {"role": "user", "content": "start"}, commit=True)
        repo = GitRepo(home / "sessions" / sid)
        repo._run(["-c", "gc.auto=0", "repack", "-a", "-d", "-q"])  # a maintained history:
        # the generated node files' blobs packed, as the packing every PACK_EVERY commits
        # keeps a session built turn by turn
        ours, before, full, ours_cpu = [], [], [], []
        for i in range(rounds):
            for bucket in (ours, before, full):
                store.append_message(sid, {"role": "user", "content": f"q{i}"}, commit=False)
                store.append_message(sid, {"role": "assistant", "content": f"a{i}"},
                                     commit=False)
                changed = sorted(store._index(sid).uncommitted) \
                    if bucket is before else []
                t0, c0 = time.perf_counter(), cpu()
                if bucket is ours:
                    assert store.commit_turn(sid, f"turn: q{i}")
                    ours_cpu.append(cpu() - c0)
                elif bucket is before:
                    assert add_paths_commit(repo, f"turn: q{i}", changed)
                else:
                    assert repo.commit_all(f"turn: q{i}")
                bucket.append(time.perf_counter() - t0)
                if bucket is before:
                    store._index(sid).uncommitted.clear()
        size = int(repo._run(["cat-file", "-s", "HEAD:history"]).stdout)
        o, b, f = (statistics.median(x) for x in (ours, before, full))
        amortised = []  # PACK_EVERY more of ours: the mean includes one packing
        for i in range(PACK_EVERY):
            store.append_message(sid, {"role": "user", "content": f"p{i}"}, commit=False)
            store.append_message(sid, {"role": "assistant", "content": f"r{i}"}, commit=False)
            t0 = time.perf_counter()
            assert store.commit_turn(sid, f"turn: p{i}")
            amortised.append(time.perf_counter() - t0)
        print(f"| {n:,} | {ms(o)} ms | {ms(statistics.median(ours_cpu))} ms "
              f"| {ms(statistics.mean(amortised))} ms | {ms(b)} ms "
              f"| {ms(f)} ms | {o / b:.2f}x | {size / 1000:.0f} kB |")


def marks(tmp: Path, sizes: list[int], rounds: int) -> None:
    header("Marking a 20-node batch (`merge_node_metadata_batch`)",
           "nodes", "ours: one durable step", "one fsynced replace per node", "ratio",
           "the next read after a mark (re-lists history/)")
    for n in sizes:
        sid = make_session(tmp / f"mark{n}", n)
        make_session(tmp / f"markold{n}", n)  # the old way writes behind a store: a copy
        store = SessionStore(tmp / f"mark{n}" / "sessions", git=False)
        hist = tmp / f"markold{n}" / "sessions" / sid / "history"
        ours, old, reread = [], [], []
        for r in range(rounds):
            t0 = time.perf_counter()
            store.head(sid)  # a mark never records the index as synced (DESIGN §3): re-lists
            reread.append(time.perf_counter() - t0)
            ids = [f"t{(r * 20 + k) % n}" for k in range(20)]
            t0 = time.perf_counter()
            store.merge_node_metadata_batch(sid, {i: {MARK: f"w-{r:08x}"} for i in ids})
            ours.append(time.perf_counter() - t0)
            files = {p.name.split("-", 2)[2][:-5]: p for p in hist.iterdir()
                     if p.name.split("-", 2)[2][:-5] in ids}
            t0 = time.perf_counter()
            for nid in ids:  # the old way: read, merge, one atomic fsynced replace each
                doc = json.loads(files[nid].read_bytes())
                doc["metadata"][MARK] = f"w-old{r}"
                atomic_write_bytes(files[nid], json.dumps(doc).encode())
            old.append(time.perf_counter() - t0)
        o, b = statistics.median(ours), statistics.median(old)
        print(f"| {n:,} | {ms(o)} ms | {ms(b)} ms | {b / o:.1f}x | "
              f"{ms(statistics.median(reread[1:]))} ms |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000,50000")
    ap.add_argument("--append-sizes", default="100,1000,10000,50000,100000")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--baseline-rev", default="fda7463",
                    help="git revision measured beside ours for cold pending ('' for none)")
    ap.add_argument("--old-rev", default="6c50144",
                    help="git revision whose store code is the 'old code' column")
    ap.add_argument("--old-max", type=int, default=10_000,
                    help="largest size the old code runs at (it is quadratic)")
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 rounds (smoke run)")
    ap.add_argument("--only", default="cold,append,commit,mark",
                    help="which tables to print (comma-separated)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    append_sizes = [int(x) for x in args.append_sizes.split(",")]
    rounds = args.rounds
    if args.quick:
        sizes, append_sizes, rounds = [100, 1000], [100, 1000], 3
    print(f"load average at start: {os.getloadavg()}; {os.cpu_count()} CPUs; "
          f"Python {sys.version.split()[0]}; {rounds} rounds, medians")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        only = set(args.only.split(","))
        if "cold" in only:
            base = old_tree(tmp, args.baseline_rev, "base") if args.baseline_rev else None
            cold_pending(tmp, sizes, rounds, base, args.baseline_rev,
                         old_tree(tmp, args.old_rev), args.old_max)
        if "append" in only:
            appends(tmp, append_sizes, rounds)
        if "commit" in only:
            commits(tmp, sizes, max(3, rounds // 3))
        if "mark" in only:
            marks(tmp, sizes, max(3, rounds // 3))
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
