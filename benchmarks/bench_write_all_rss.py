"""Peak memory of ``scriptorium memory write --all`` as the home grows: it must not grow with
the number of sessions (each session's archive and topic are parsed, used and let go).

Homes of 200 / 1,000 / 2,000 sessions (6 short turns each, written straight to disk, cached
under benchmarks/out/) are written by the real CLI in a child process, ours and (at the sizes
asked for) the code of ``--baseline-rev`` (default: the commit before issue 12's work); the
child's peak RSS comes from ``wait4``. The last lines give each side's growth per session
between the smallest and the largest home.

Usage:
    python benchmarks/bench_write_all_rss.py [--sessions 200,1000,2000] [--baseline 200]
        [--baseline-rev REV]
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

from workspaces import BASELINE_COMMIT, OUT, baseline_src, load, ours_src

TURNS = 6


def cached_home(sessions: int) -> Path:
    path = OUT / f"home-{sessions}-sessions"
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
            "id": f"s{s}", "title": f"Kiln log {s % 40}", "head_id": prev,
            "created_at": 1.0, "updated_at": 2.0}))
    (path / ".done").write_text("")
    return path


def peak_rss(src: Path, sessions: int) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one ``memory write --all --force`` on a fresh copy."""
    with tempfile.TemporaryDirectory(prefix="bench-rss-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(cached_home(sessions), home, ignore=shutil.ignore_patterns(".done"))
        env = {**os.environ, "PYTHONPATH": str(src), "SCRIPTORIUM_HOME": str(home)}
        start = time.perf_counter()
        with open(Path(tmp) / "out", "wb") as out, open(Path(tmp) / "err", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-c",
                                     "from scriptorium.cli import main; main()",
                                     "memory", "write", "--all", "--force", "--json"],
                                    env=env, stdout=out, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the max
            proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - start
        data = json.loads((Path(tmp) / "out").read_bytes() or b"{}")
        failed = [r for r in data.get("sessions", []) if r.get("failure")]
        if proc.returncode != 0 or failed or len(data.get("sessions", [])) != sessions:
            raise SystemExit(f"write --all failed: "
                             f"{(Path(tmp) / 'err').read_text()[-2000:]} {failed[:2]}")
        return usage.ru_maxrss / 1024, elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", default="200,1000,2000")
    ap.add_argument("--baseline", default="200", help="sizes also run on the baseline ('' none)")
    ap.add_argument("--baseline-rev", default=BASELINE_COMMIT,
                    help=f"the commit the baseline runs (default {BASELINE_COMMIT}, before "
                         f"issue 12's work)")
    args = ap.parse_args()
    base_sizes = {int(x) for x in args.baseline.split(",") if x}
    print(f"python {sys.version.split()[0]}; load average at start {load()}; baseline = "
          f"commit {args.baseline_rev}\n")
    print("| sessions | ours: peak RSS | ours: time | baseline: peak RSS | baseline: time "
          "| load |")
    print("|---|---|---|---|---|---|")
    ours: dict[int, float] = {}
    base: dict[int, float] = {}
    for n in (int(x) for x in args.sessions.split(",")):
        rss, secs = peak_rss(ours_src(), n)
        ours[n] = rss
        row = f"| {n:,} | {rss:.1f} MB | {secs:.0f} s "
        if n in base_sizes:
            brss, bsecs = peak_rss(baseline_src(args.baseline_rev), n)
            base[n] = brss
            row += f"| {brss:.1f} MB | {bsecs:.0f} s "
        else:
            row += "| – | – "
        print(row + f"| {os.getloadavg()[0]:.1f} |", flush=True)
    print(f"\nload average at end {load()}")
    for name, curve in (("ours", ours), ("baseline", base)):
        if len(curve) > 1:
            lo, hi = min(curve), max(curve)
            print(f"{name}: peak RSS {curve[lo]:.1f} MB at {lo:,} sessions, {curve[hi]:.1f} MB "
                  f"at {hi:,}: {(curve[hi] - curve[lo]) * 1024 / (hi - lo):+.1f} kB per session")


if __name__ == "__main__":
    main()
