"""Peak memory and time per session of ``scriptorium memory write --all`` as the home grows:
neither may grow with the number of sessions (each session's archive and topic are parsed,
used and let go; what memory already holds is asked of the on-disk topic catalog).

Homes of 250 / 1,000 / 2,000 sessions (6 short turns each, written straight to disk, cached
under benchmarks/out/) of two kinds: ``shared``, 40 titles, so each topic file gathers 1/40 of
the sessions and grows with the home (a batch reads and rewrites its topic: work that does
grow), and ``bounded``, 5 sessions a title, so every topic stays the same size and only the
number of sessions grows. Each is written by the real CLI in a child process, ours and (at
the sizes asked for) the code of ``--baseline-rev`` (default c343fa3: each install compiled a
pattern for its own rank, and ``re`` kept the last 512 alive; b72f057, before it, kept every
search index page its updates touched), one after the other at each size. Peak RSS is the
CLI process's own (VmHWM as it exits) and, in brackets, the largest of it and every git it
ran (``wait4``: a repack maps the history's packs, which grow with the home); CPU comes from
``wait4``, the largest topic file is measured after the run. The last
lines give each side's RSS slope per session between neighbouring sizes and its wall and CPU
time per session. After each table, ours on the largest home as it went: its peak so far and
resident set every ``--curve`` sessions written (the issue asks that the peak of one run not
grow with the sessions it writes), and their rise per session after the first 500.

Usage:
    python benchmarks/bench_write_all_rss.py [--sessions 250,1000,2000]
        [--baseline 250,1000,2000] [--baseline-rev REV] [--homes shared,bounded] [--curve 250]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from workspaces import OUT, baseline_src, load, ours_src

TURNS = 6
BASELINE_REV = "c343fa3"  # main before one rank pattern served a hundred installs
TITLES = 40  # the shared home's titles
PER_TITLE = 5  # the bounded home's sessions per title


def cached_home(sessions: int, per_title: int | None = None) -> Path:
    """A home of ``sessions`` sessions: on 40 titles, or ``per_title`` sessions a title."""
    titles = TITLES if per_title is None else max(1, sessions // per_title)
    name = f"home-{sessions}-sessions" + ("" if per_title is None else f"-{per_title}-a-title")
    path = OUT / name
    if (path / ".done").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    for s in range(sessions):
        sdir = path / "sessions" / f"s{s}"
        (sdir / "history").mkdir(parents=True)
        prev = "ROOT"
        for i in range(TURNS):
            role = "user" if i % 2 == 0 else "llm"
            node = {"id": f"s{s}t{i}", "created_at": 1_700_000_000.0 + i, "seq": i,
                    "role": role, "name": "", "input": None, "caller": "",
                    "predecessor": prev, "reads": [], "metadata": {},
                    "output": f"Session {s} turn {i}: the kiln batch {s % 97} fires at "
                              f"{i + 8} o'clock with glaze {s % 13}."}
            (sdir / "history" / f"{i:08d}-{role[0]}-s{s}t{i}.json").write_text(json.dumps(node))
            prev = node["id"]
        (sdir / "meta.json").write_text(json.dumps({
            "id": f"s{s}", "title": f"Kiln log {s % titles}", "head_id": prev,
            "created_at": 1.0, "updated_at": 2.0}))
    (path / ".done").write_text("")
    return path


# The CLI, with its own peak RSS written to the file named first when it exits: wait4's peak
# is the largest of the process and every git it ran (a child's peak starts at its parent's
# RSS, as it is spawned from it, then counts git's own pages: a repack maps the packs).
# With a second argument N > 0, it also writes its VmHWM and VmRSS (kB) to stderr after every
# N sessions written (the within-run curve: --curve).
CHILD = """import atexit, sys
out, every = sys.argv.pop(1), int(sys.argv.pop(1))
def status():
    with open('/proc/self/status') as f:
        return {k: v.split()[0] for k, _, v in (line.partition(':') for line in f)
                if k in ('VmHWM', 'VmRSS')}
def own_peak():
    with open(out, 'w') as o:
        o.write(status()['VmHWM'])
atexit.register(own_peak)
if every:
    from scriptorium.memory import writing
    each = writing.Memory.write_each
    def write_each(self, *args, **kw):
        for n, result in enumerate(each(self, *args, **kw), 1):
            if n % every == 0:
                st = status()
                print(f'curve {n} {st["VmHWM"]} {st["VmRSS"]}', file=sys.stderr, flush=True)
            yield result
    writing.Memory.write_each = write_each
from scriptorium.cli import main
main()
"""


class Run(NamedTuple):
    rss_mb: float   # the CLI process's own peak RSS (VmHWM at exit)
    tree_mb: float  # the peak of it and every git it ran (wait4)
    secs: float     # wall clock
    cpu: float      # the child's user + system CPU seconds
    topic_kb: float  # the largest topic file after the run
    curve: list[tuple[int, int, int]]  # (sessions written, VmHWM, VmRSS in kB) every --curve


def peak_rss(src: Path, sessions: int, per_title: int | None, every: int = 0) -> Run:
    """One ``memory write --all --force`` on a fresh copy of the home, in a child process
    (its peak and resident set after every ``every`` sessions written too, when not 0)."""
    with tempfile.TemporaryDirectory(prefix="bench-rss-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(cached_home(sessions, per_title), home,
                        ignore=shutil.ignore_patterns(".done"))
        env = {**os.environ, "PYTHONPATH": str(src), "SCRIPTORIUM_HOME": str(home)}
        start = time.perf_counter()
        with open(Path(tmp) / "out", "wb") as out, open(Path(tmp) / "err", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-c", CHILD, str(Path(tmp) / "peak"),
                                     str(every), "memory", "write", "--all", "--force", "--json"],
                                    env=env, stdout=out, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)  # its peak and its gits', not the max
            proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - start
        data = json.loads((Path(tmp) / "out").read_bytes() or b"{}")
        failed = [r for r in data.get("sessions", []) if r.get("failure")]
        if proc.returncode != 0 or failed or len(data.get("sessions", [])) != sessions:
            raise SystemExit(f"write --all failed: "
                             f"{(Path(tmp) / 'err').read_text()[-2000:]} {failed[:2]}")
        largest = max((f.stat().st_size for f in (home / "memory").rglob("topics/**/*.md")),
                      default=0)
        own = int((Path(tmp) / "peak").read_text()) / 1024
        curve = [(int(n), int(hwm), int(rss)) for _, n, hwm, rss in
                 (line.split() for line in (Path(tmp) / "err").read_text().splitlines()
                  if line.startswith("curve "))]
        return Run(own, usage.ru_maxrss / 1024, elapsed, usage.ru_utime + usage.ru_stime,
                   largest / 1024, curve)


def slopes(name: str, curve: dict[int, Run]) -> None:
    """Peak RSS growth per session between neighbouring sizes, and time per session."""
    sizes = sorted(curve)
    if len(sizes) < 2:
        return
    steps = ", ".join(f"{a:,}->{b:,}: {(curve[b].rss_mb - curve[a].rss_mb) * 1024 / (b - a):+.2f}"
                      f" ({(curve[b].tree_mb - curve[a].tree_mb) * 1024 / (b - a):+.2f})"
                      for a, b in zip(sizes, sizes[1:]))
    lo, hi = sizes[0], sizes[-1]
    per = {n: (curve[n].secs / n * 1000, curve[n].cpu / n * 1000) for n in (lo, hi)}
    print(f"{name}: peak RSS slope (with git) {steps} kB/session; per session {per[lo][0]:.0f} -> "
          f"{per[hi][0]:.0f} ms wall ({per[hi][0] / per[lo][0]:.2f}x), {per[lo][1]:.0f} -> "
          f"{per[hi][1]:.0f} ms CPU ({per[hi][1] / per[lo][1]:.2f}x) from {lo:,} to "
          f"{hi:,} sessions")


def within_run(kind: str, run: Run) -> None:
    """Ours on the largest home, as it went: the peak so far and the resident set after
    every so many sessions written, and how much each rose a session after the first 500
    (the bounded caches and SQLite's page caches fill over those, and CPython's
    interned-string table is rebuilt once: benchmarks/README.md, round 32)."""
    if not run.curve:
        return
    print(f"\n{kind}, ours on the largest home as it went (the CLI's own VmHWM and VmRSS)\n")
    print("| sessions written | peak so far | resident |")
    print("|---|---|---|")
    for n, hwm, rss in run.curve:
        print(f"| {n:,} | {hwm / 1024:.1f} MB | {rss / 1024:.1f} MB |")
    after = [row for row in run.curve if row[0] >= 500]
    if len(after) >= 2:
        (n0, h0, r0), (n1, h1, r1) = after[0], after[-1]
        print(f"\n{kind}, ours from {n0:,} to {n1:,} sessions written: peak so far "
              f"{(h1 - h0) / (n1 - n0):+.2f} kB/session, resident {(r1 - r0) / (n1 - n0):+.2f} "
              f"kB/session")


def curve(kind: str, sizes: list[int], base_sizes: set[int], baseline_rev: str,
          every: int = 0) -> None:
    """One table: each size run on ours and (where asked) on the baseline; with ``every``,
    ours on the largest size also reports how its memory went as it wrote."""
    per_title = None if kind == "shared" else PER_TITLE
    what = (f"{TITLES} titles: topics grow with the home" if per_title is None
            else f"{PER_TITLE} sessions a title: topics stay the same size")
    print(f"\n{kind} home ({what})\n")
    print("| sessions | largest topic | ours: peak RSS (with git) | ours: ms/session (CPU) "
          "| baseline: peak RSS (with git) | baseline: ms/session (CPU) | RSS ours/baseline "
          "| load |")
    print("|---|---|---|---|---|---|---|---|")
    ours: dict[int, Run] = {}
    base: dict[int, Run] = {}
    for n in sizes:
        run = ours[n] = peak_rss(ours_src(), n, per_title, every if n == max(sizes) else 0)
        row = (f"| {n:,} | {run.topic_kb:.0f} kB | {run.rss_mb:.1f} MB ({run.tree_mb:.1f}) "
               f"| {run.secs / n * 1000:.0f} ({run.cpu / n * 1000:.0f}) ")
        if n in base_sizes:
            b = base[n] = peak_rss(baseline_src(baseline_rev), n, per_title)
            row += (f"| {b.rss_mb:.1f} MB ({b.tree_mb:.1f}) "
                    f"| {b.secs / n * 1000:.0f} ({b.cpu / n * 1000:.0f}) "
                    f"| {run.rss_mb / b.rss_mb:.2f} ")
        else:
            row += "| – | – | – "
        print(row + f"| {os.getloadavg()[0]:.1f} |", flush=True)
    print()
    slopes(f"{kind}, ours", ours)
    slopes(f"{kind}, baseline", base)
    within_run(kind, ours[max(sizes)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", default="250,1000,2000")
    ap.add_argument("--baseline", default="250,1000,2000",
                    help="sizes also run on the baseline ('' none)")
    ap.add_argument("--baseline-rev", default=BASELINE_REV,
                    help=f"the commit the baseline runs (default {BASELINE_REV}: before one "
                         f"rank pattern served a hundred installs)")
    ap.add_argument("--homes", default="shared,bounded",
                    help="which homes: shared (40 titles), bounded (5 sessions a title)")
    ap.add_argument("--curve", type=int, default=250,
                    help="on the largest home, ours' peak and resident set every N sessions "
                         "written (0: not)")
    args = ap.parse_args()
    base_sizes = {int(x) for x in args.baseline.split(",") if x}
    sizes = [int(x) for x in args.sessions.split(",")]
    kinds = [k for k in args.homes.split(",") if k]
    unknown = set(kinds) - {"shared", "bounded"}
    if unknown:
        raise SystemExit(f"error: unknown home kind {sorted(unknown)[0]!r} (shared, bounded)")
    print(f"python {sys.version.split()[0]}; load average at start {load()}; baseline = "
          f"commit {args.baseline_rev}")
    for kind in kinds:
        curve(kind, sizes, base_sizes, args.baseline_rev, args.curve)
    print(f"\nload average at end {load()}")


if __name__ == "__main__":
    main()
