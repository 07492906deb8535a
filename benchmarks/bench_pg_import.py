"""Importing into a PostgreSQL home beside a directory home, in one run.

The generated Claude Code project folder of ``bench_import.py`` (sessions of 2.1.x-shaped
lines) is imported into a directory home (no per-session git commit, as a PostgreSQL home
keeps none) and into a PostgreSQL home (a durable server: fsync on), then:

1. cold import: seconds and nodes/s on each, and the ratio PostgreSQL / directory;
2. re-run with nothing new (goal, as for the directory home: >= 50x faster than cold);
3. a re-run after every transcript grew by a few turns: only the new lines are read; on the
   PostgreSQL home each grown session answers graph lookups from its tables (a cache miss is
   a query), so this is where its round trips show;
4. a curve of peak memory (VmHWM) importing one transcript of growing size, each in a fresh
   process into a fresh home: the PostgreSQL home with our code and with ``--baseline-rev``'s
   (default 293a2ab, which held the session's graph in memory), and the directory home with
   ours. Nodes are streamed and the ledger's cache is bounded, so it must not grow with it.

Run: python benchmarks/bench_pg_import.py [--mb 20] [--quick] [--only-peak]
     [--peak-mb 2,8,16,32] [--baseline-rev 293a2ab] [--url postgresql://…]
(without --url a throwaway server is started from the Debian package).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from bench_import import generate, transcript  # noqa: E402
from workspaces import baseline_src, ours_src  # noqa: E402
from pgserver import ENV, PgServer, home_url  # noqa: E402
from scriptorium.importers import import_sources  # noqa: E402
from scriptorium.sessions import SessionStore  # noqa: E402
from scriptorium.sessions.pg_store import PgSessionStore  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def timed_import(store, home: Path, src: Path) -> tuple[float, int, float]:
    """Wall seconds, nodes added, CPU seconds of this process."""
    c0, t0 = time.process_time(), time.perf_counter()
    result = import_sources(store, home, "claude-code", [src])
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert not result.errors, result.errors[:3]
    return dt, result.to_dict()["nodes_added"], cpu


def grow(src: Path, turns: int) -> None:
    """Append ``turns`` prompt/answer pairs to every transcript (new ids, parent = last)."""
    import json
    import uuid

    for path in sorted(src.rglob("*.jsonl")):
        last = json.loads(path.read_bytes().rstrip().rsplit(b"\n", 1)[-1])
        parent, sid = last.get("uuid"), last.get("sessionId")
        with open(path, "a", encoding="utf-8") as fh:
            for n in range(turns):
                for kind, text in (("user", f"follow-up {n}"), ("assistant", f"answer {n}")):
                    uid = str(uuid.uuid4())
                    content = text if kind == "user" else [{"type": "text", "text": text}]
                    fh.write(json.dumps({
                        "parentUuid": parent, "isSidechain": False, "type": kind,
                        "uuid": uid, "sessionId": sid, "timestamp": "2026-02-01T00:00:00Z",
                        "message": {"role": kind, "content": content}}) + "\n")
                    parent = uid


PEAK = """
import sys
from pathlib import Path
sys.path.insert(0, {src!r})
from scriptorium.importers import import_sources
if {url!r}:
    from scriptorium.sessions.pg_store import PgSessionStore
    store = PgSessionStore.open({url!r})
else:
    from scriptorium.sessions import SessionStore
    store = SessionStore(Path({home!r}) / "sessions", git=False)
result = import_sources(store, Path({home!r}), "claude-code", [Path({path!r})])
assert not result.errors, result.errors[:3]
if {url!r}:
    store.close()
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(hwm)
"""


def peak_kb(src: Path, path: Path, url: str = "", home: Path | None = None) -> int:
    """VmHWM (kB) of a fresh process importing ``path`` with the code in ``src``, into the
    PostgreSQL home ``url`` or else the directory home ``home``."""
    code = PEAK.format(src=str(src), url=url, path=str(path),
                       home=str(home or "/nonexistent"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip().splitlines()[-1])


def peak_curve(tmp: Path, base_url: str, sizes: list[float], baseline_rev: str) -> None:
    """The peak-memory curve (point 4 of the module docstring), printed as a table."""
    print(f"peak RSS (VmHWM) importing one transcript, fresh process and home each, "
          f"load {load()}:")
    print(f"| transcript | PostgreSQL, ours | PostgreSQL, {baseline_rev} | directory, ours |")
    print("|---|---|---|---|")
    curves: dict[str, list[tuple[float, int]]] = {"pg": [], "base": [], "dir": []}
    for i, mb in enumerate(sizes):
        one = tmp / f"one-{i}" / "s.jsonl"
        one.parent.mkdir()
        transcript(one, int(mb * 1e6), seed=99)
        curves["pg"].append((mb, peak_kb(ours_src(), one, home_url(base_url, "peak"))))
        curves["base"].append((mb, peak_kb(baseline_src(baseline_rev), one,
                                           home_url(base_url, "peakbase"))))
        curves["dir"].append((mb, peak_kb(ours_src(), one, home=tmp / f"dir-{i}")))
        print(f"| {mb:g} MB | " + " | ".join(f"{curves[k][-1][1] / 1024:.1f} MB"
                                             for k in ("pg", "base", "dir")) + " |")
    growth = {k: (c[-1][1] - c[0][1]) / 1024 / (c[-1][0] - c[0][0]) for k, c in curves.items()}
    print(f"growth per MB of transcript ({sizes[0]:g} -> {sizes[-1]:g} MB): PostgreSQL ours "
          f"{growth['pg']:.2f} MB, {baseline_rev} {growth['base']:.2f} MB; directory ours "
          f"{growth['dir']:.2f} MB")


def folder_runs(tmp: Path, args: argparse.Namespace) -> None:
    """Points 1-3 of the module docstring: one generated folder into both homes."""
    src = tmp / "projects"
    size, lines = generate(src, args.mb, args.session_mb)
    files = len(list(src.rglob("*.jsonl")))
    print(f"generated {size / 1e6:.1f} MB, {lines} lines, {files} transcripts")
    home = tmp / "home"
    directory = SessionStore(home / "sessions", git=False)
    pg = PgSessionStore.open(home_url(args.url, "bench"))
    rows = {}
    for name, store in (("directory", directory), ("postgres", pg)):
        cold = timed_import(store, home, src)
        rerun = timed_import(store, home, src)
        assert rerun[1] == 0
        rows[name] = [cold, rerun]
    grow(src, 5)
    for name, store in (("directory", directory), ("postgres", pg)):
        grown = timed_import(store, home, src)
        assert grown[1] == files * 10, grown
        rows[name].append(grown)
    pg.close()
    print(f"{'':28} {'directory':>22} {'postgres':>22} {'pg/dir':>8}")
    for i, what in enumerate(("cold import", "re-run, nothing new",
                              f"re-run, {files} grown by 10 nodes")):
        d, p = rows["directory"][i], rows["postgres"][i]
        print(f"{what:28} {d[0]:9.3f} s {d[2]:6.2f} cpu  {p[0]:9.3f} s {p[2]:6.2f} cpu "
              f"{p[0] / d[0]:7.2f}x")
    for name in rows:
        cold, rerun = rows[name][0], rows[name][1]
        print(f"{name}: cold {cold[1] / cold[0]:.0f} nodes/s; nothing new "
              f"{cold[0] / rerun[0]:.0f}x faster than cold (goal >= 50x)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=20.0, help="size of the generated folder")
    ap.add_argument("--session-mb", type=float, default=2.5, help="size of one transcript")
    ap.add_argument("--peak-mb", default="2,8,16,32", help="single-transcript sizes for RSS")
    ap.add_argument("--quick", action="store_true", help="5 MB folder, peak at 1 and 4 MB")
    ap.add_argument("--only-peak", action="store_true", help="only the peak-memory curve")
    ap.add_argument("--baseline-rev", default="293a2ab", help="the peak curve's baseline code")
    ap.add_argument("--url", default=os.environ.get(ENV), help="a server's base URL")
    args = ap.parse_args()
    if args.quick:
        args.mb, args.peak_mb = 5.0, "1,4"
    server = None
    if not args.url:
        server = PgServer(durable=True)
        args.url = server.start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-pg-import-"))
    try:
        print(f"# bench_pg_import: load {load()} at start, {os.cpu_count()} cores")
        if not args.only_peak:
            folder_runs(tmp, args)
        peak_curve(tmp, args.url, [float(x) for x in args.peak_mb.split(",")],
                   args.baseline_rev)
        print(f"# load {load()} at end")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
