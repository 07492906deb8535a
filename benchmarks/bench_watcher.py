"""The told watcher vs the polling watcher, on a home of many quiet sessions and a few active.

Builds a home of ``--sessions`` quiet sessions (default 10,000; already written, as a home that
has run for a while) and ``--active`` active ones (default 10), then measures in one run:

1. **Latency** from a head move off a qualifying branch (an edit of the last user turn, so the
   old line is left behind) to that branch being marked, with ``scriptorium memory watch``
   running as a real process (safety-net poll every 300 s, idle 1800 s). The polling watcher
   writes nothing until the whole session is idle: by its rule that is ``idle_seconds`` plus
   up to one interval after the move, so that row is the rule, not a stopwatch.
2. **CPU per idle hour.** Told: the watcher process's CPU time (``/proc/<pid>/stat``) over an
   idle window (schedstat, ns; a second watcher process with the default safety net), scaled
   to an hour, plus its safety-net passes (one per configured interval,
   each costing one measured pass). Polling: one measured pass over every session (the old
   watcher's whole job), times the passes an hour at its 300 s interval.

Usage:
    python benchmarks/bench_watcher.py [--sessions 10000] [--active 10] [--idle-window 120]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scriptorium.config import Settings, load_settings
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.watcher import IdleWatcher
from scriptorium.memory.writing import Memory

POLL_INTERVAL = 300.0   # the polling watcher's default interval (and the told one's net here)
IDLE = 1800.0
TRIGGER = 8        # one user turn of the benchmark is a qualifying branch


def build(home: Path, quiet: int, active: int) -> Memory:
    mem = Memory(home, settings=load_settings(home, {"trigger_tokens": TRIGGER}))
    template = "quiet-template"
    mem.store.create_session(template, title="A settled conversation")
    mem.store.append_message(template, {"id": "u1", "role": "user",
                                        "content": "Deploys go out on Tuesdays after standup."})
    mem.store.append_message(template, {"id": "a1", "role": "assistant",
                                        "content": "Noted: Tuesday deploys, after standup."})
    assert mem.write_session(template).failure is None
    src = mem.store.root / template
    for i in range(quiet):
        dst = mem.store.root / f"quiet-{i:05d}"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".git", "*.lock"))
        meta = json.loads((dst / "meta.json").read_text())
        meta["id"] = dst.name
        (dst / "meta.json").write_text(json.dumps(meta))
    shutil.rmtree(src)
    for i in range(active):
        sid = f"active-{i}"
        mem.store.create_session(sid, title=f"Active {i}")
        mem.store.append_message(sid, {"id": "u1", "role": "user",
                                       "content": "We need a venue for forty people in May."})
        mem.store.append_message(sid, {"id": "a1", "role": "assistant",
                                       "content": "I will shortlist three venues by Friday."})
        assert mem.write_session(sid).failure is None  # written so far: the edit is news
    # the home has run for a while: every quiet session handled, the log position saved
    watcher = IdleWatcher(mem, idle_seconds=IDLE)
    state = watcher.load_state()
    state["processed"] = {r["session_id"]: r["updated_at"] for r in mem.store.list_sessions()}
    state["event_seq"] = mem.store.events.last_seq()
    watcher._save_state(state)
    return mem


def cpu_seconds(pid: int) -> float:
    """CPU time of a process: nanoseconds from schedstat where the kernel keeps it (the
    clock-tick counts of /proc/<pid>/stat are 10 ms coarse, too coarse for an idle process)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watch(home: Path, env: dict[str, str], *extra: str) -> subprocess.Popen:
    """``scriptorium memory watch`` as a real process, once it is ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "scriptorium", "--home", str(home), "memory", "watch",
         "--idle-seconds", str(IDLE), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("watching ")
    return proc


def pass_cpu(mem: Memory, rounds: int = 3) -> float:
    costs = []
    for _ in range(rounds):
        watcher = IdleWatcher(mem, idle_seconds=IDLE, interval_seconds=POLL_INTERVAL)
        t0 = time.process_time()
        report = watcher.run_once()
        costs.append(time.process_time() - t0)
        assert report.ran and not report.terminal
    return statistics.median(costs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--active", type=int, default=10)
    ap.add_argument("--idle-window", type=float, default=120.0,
                    help="seconds of idle watcher CPU to sample")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-watcher-") as tmp:
        home = Path(tmp)
        t0 = time.perf_counter()
        mem = build(home, args.sessions, args.active)
        print(f"built {args.sessions} quiet + {args.active} active sessions in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
        env = {**os.environ, "SCRIPTORIUM_TRIGGER_TOKENS": str(TRIGGER),
               "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = watch(home, env, "--interval", str(POLL_INTERVAL))  # the net at 300 s
        try:
            latencies = []
            for i in range(args.active):
                sid = f"active-{i}"
                mem.store.append_message(sid, {"id": "u2", "role": "user",
                                               "content": "The budget is fifty thousand "
                                                          "euros, flights included."})
                moved = time.perf_counter()
                mem.store.edit(sid, "u2", "Make that sixty thousand euros.", node_id="u2e")
                while mem.store.get_node(sid, "u2").metadata.get(MARK_KEY) is None:
                    if time.perf_counter() - moved > 120:
                        raise SystemExit(f"{sid}: the left branch was not written in 120 s")
                    time.sleep(0.01)
                latencies.append(time.perf_counter() - moved)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        proc = watch(home, env)  # idle, with the configured safety net
        try:
            time.sleep(2)  # past start-up
            c0, w0 = cpu_seconds(proc.pid), time.perf_counter()
            time.sleep(args.idle_window)
            idle_cpu = (cpu_seconds(proc.pid) - c0) / (time.perf_counter() - w0) * 3600
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        one_pass = pass_cpu(mem)
    told_interval = Settings().watcher_interval_seconds
    told_hour = idle_cpu + one_pass * 3600 / told_interval
    polling_hour = one_pass * 3600 / POLL_INTERVAL
    load = os.getloadavg()
    print(f"home: {args.sessions:,} quiet + {args.active} active sessions; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| what | told watcher | polling watcher | ratio |")
    print("|---|---|---|---|")
    print(f"| head move off a qualifying branch → branch marked (median / max of "
          f"{len(latencies)}) | {statistics.median(latencies):.2f} / {max(latencies):.2f} s "
          f"| ≥ {IDLE:.0f} s (written only once the session idles, then up to "
          f"{POLL_INTERVAL:.0f} s) | ≥ {IDLE / max(latencies):.0f}× sooner |")
    print(f"| CPU per idle hour | {told_hour:.2f} s ({idle_cpu:.2f} s following the log + "
          f"{3600 / told_interval:.2g} safety-net pass(es) of {one_pass:.2f} s) "
          f"| {polling_hour:.2f} s ({3600 / POLL_INTERVAL:g} passes of {one_pass:.2f} s) "
          f"| {polling_hour / told_hour:.0f}× less |")


if __name__ == "__main__":
    main()
