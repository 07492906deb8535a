"""Importer benchmark: a generated Claude Code project folder, cold import vs re-run.

1. Cold import of a generated ``~/.claude/projects`` folder (default 100 MB: sessions of
   2.1.x-shaped lines — prompts, streamed assistant blocks, parallel tool calls, progress
   lines, tool results with their ``toolUseResult`` copies, a compaction every 400 turns),
   through ``import_sources`` with the store's per-session git commit. Nodes/s and MB/s.
   Baseline: the first 400 message lines appended one by one with
   ``SessionStore.append_message`` (the store's own per-node path, git commits off), nodes/s.
2. Re-run with nothing new (goal: >= 50x faster than cold). Baseline: the same re-run with
   the bookkeeping deleted, so every line is read again and found already imported.
3. Peak memory of importing ONE transcript of growing size, each in a fresh process
   (``VmHWM``): the lines are streamed, so it must not grow with the transcript's bytes.

Run: python benchmarks/bench_import.py [--mb 100] [--session-mb 2.5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from scriptorium.importers import import_sources  # noqa: E402
from scriptorium.sessions import SessionStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sessions import text  # noqa: E402  (the same word generator)

def transcript(path: Path, target_bytes: int, seed: int) -> int:
    """Write one 2.1.x-shaped session file of about ``target_bytes``; return its line count."""
    rng = random.Random(seed)
    sid = str(uuid.UUID(int=rng.getrandbits(128)))
    clock = [0]
    lines = 0

    def env(kind: str, parent: str | None, **extra) -> dict:
        clock[0] += 1
        uid = str(uuid.UUID(int=rng.getrandbits(128)))
        line = {"parentUuid": parent, "isSidechain": False, "userType": "external",
                "cwd": "/home/u/project", "sessionId": sid, "version": "2.1.39",
                "gitBranch": "main", "type": kind, "uuid": uid,
                "timestamp": f"2026-01-{1 + clock[0] // 86400 % 28:02d}T"
                             f"{clock[0] // 3600 % 24:02d}:{clock[0] // 60 % 60:02d}:"
                             f"{clock[0] % 60:02d}.000Z"}
        line.update(extra)
        return line

    with open(path, "w", encoding="utf-8") as fh:
        def put(line: dict) -> str:
            nonlocal lines
            fh.write(json.dumps(line) + "\n")
            lines += 1
            return line["uuid"]

        parent = put(env("progress", None, data={"type": "hook_progress", "hookEvent": "Start"}))
        turn = 0
        while fh.tell() < target_bytes:
            turn += 1
            parent = put(env("user", parent, message={"role": "user",
                                                      "content": text(rng, 200)}))
            mid = f"msg_{rng.getrandbits(64):x}"
            parent = put(env("assistant", parent, message={
                "id": mid, "role": "assistant", "model": "claude-x",
                "content": [{"type": "text", "text": text(rng, 500)}]}))
            calls = []
            for _ in range(rng.randint(1, 3)):
                tid = f"toolu_{rng.getrandbits(64):x}"
                parent = put(env("assistant", parent, message={
                    "id": mid, "role": "assistant", "model": "claude-x",
                    "content": [{"type": "tool_use", "id": tid, "name": "Read",
                                 "input": {"file_path": "/home/u/project/" + text(rng, 20)}}]}))
                calls.append((parent, tid))
            last = parent
            for call_line, tid in calls:
                put(env("progress", call_line, data={"type": "hook_progress"},
                        toolUseID=tid, parentToolUseID=tid))
                out = text(rng, 1500)
                last = put(env("user", call_line, message={"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": tid, "content": out}]},
                    toolUseResult={"type": "text", "file": {"content": out}},
                    sourceToolAssistantUUID=call_line))
            parent = put(env("assistant", last, message={
                "id": f"msg_{rng.getrandbits(64):x}", "role": "assistant", "model": "claude-x",
                "content": [{"type": "text", "text": text(rng, 700)}]}))
            if turn % 400 == 0:
                boundary = env("system", None, subtype="compact_boundary",
                               content="Conversation compacted", logicalParentUuid=parent)
                put(boundary)
                parent = put(env("user", boundary["uuid"], isCompactSummary=True, message={
                    "role": "user", "content": "This session is being continued. " +
                    text(rng, 2000)}))
    return lines


def generate(root: Path, total_mb: float, session_mb: float) -> tuple[int, int]:
    n = max(1, round(total_mb / session_mb))
    lines = 0
    for i in range(n):
        project = root / f"-home-u-project{i % 4}"
        project.mkdir(parents=True, exist_ok=True)
        lines += transcript(project / f"s{i:03d}.jsonl", int(session_mb * 1e6), seed=i)
    size = sum(p.stat().st_size for p in root.rglob("*.jsonl"))
    return size, lines


def cold(home: Path, src: Path) -> tuple[float, int]:
    store = SessionStore(home / "sessions")
    t0 = time.perf_counter()
    result = import_sources(store, home, "claude-code", [src])
    dt = time.perf_counter() - t0
    assert not result.errors, result.errors[:3]
    return dt, sum(f.nodes_added for f in result.files)


def rerun(home: Path, src: Path) -> float:
    store = SessionStore(home / "sessions")
    t0 = time.perf_counter()
    result = import_sources(store, home, "claude-code", [src])
    dt = time.perf_counter() - t0
    assert sum(f.nodes_added for f in result.files) == 0
    return dt


def per_node_baseline(home: Path, path: Path, limit: int) -> float:
    """nodes/s of the store's own append path on the first ``limit`` message lines."""
    store = SessionStore(home / "baseline-sessions", git=False)  # no per-turn commits
    store.create_session("b")
    rows = []
    with open(path) as fh:
        for raw in fh:
            line = json.loads(raw)
            if line.get("type") in ("user", "assistant"):
                rows.append(line)
            if len(rows) >= limit:
                break
    t0 = time.perf_counter()
    prev = "ROOT"
    for line in rows:
        content = line["message"]["content"]
        prev = store.append_message("b", {
            "id": line["uuid"], "role": "user" if line["type"] == "user" else "assistant",
            "content": content if isinstance(content, str) else json.dumps(content),
            "predecessor": prev})
    return len(rows) / (time.perf_counter() - t0)


PEAK = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, {src!r})
from scriptorium.importers import import_sources
from scriptorium.sessions import SessionStore
home = Path(tempfile.mkdtemp(dir={tmp!r}))
import_sources(SessionStore(home / "sessions", git=False), home, "claude-code", [Path({path!r})])
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent across exec
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(hwm)
"""


def peak_rss_kb(path: Path, tmp: Path) -> int:
    code = PEAK.format(src=str(Path(__file__).resolve().parents[1] / "src"), tmp=str(tmp),
                       path=str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip().splitlines()[-1])


def folder(tmp: Path, args: argparse.Namespace) -> None:
    """Cold import of the generated folder, the no-change re-run and their baselines."""
    src = tmp / "projects"
    size, lines = generate(src, args.mb, args.session_mb)
    print(f"generated {size / 1e6:.1f} MB, {lines} lines, "
          f"{len(list(src.rglob('*.jsonl')))} transcripts")
    home = tmp / "home"
    t_cold, nodes = cold(home, src)
    t_rerun = rerun(home, src)
    db = sqlite3.connect(home / "imports" / "state.sqlite")  # forget the file offsets
    with db:
        db.execute("DELETE FROM files")
    db.close()
    t_reread = rerun(home, src)
    base = per_node_baseline(tmp, next(iter(sorted(src.rglob("*.jsonl")))), 400)
    print(f"cold import: {t_cold:.1f} s, {nodes} nodes, {nodes / t_cold:.0f} nodes/s, "
          f"{size / 1e6 / t_cold:.2f} MB/s (git commit per session included)")
    print(f"  baseline append_message per node (no git): {base:.0f} nodes/s "
          f"-> ours {nodes / t_cold / base:.1f}x")
    print(f"re-run, nothing new: {t_rerun * 1000:.1f} ms -> {t_cold / t_rerun:.0f}x faster "
          f"than cold (goal >= 50x)")
    print(f"  baseline re-read without bookkeeping: {t_reread:.2f} s "
          f"-> ours {t_reread / t_rerun:.0f}x")


def peak(tmp: Path, sizes: list[float]) -> None:
    """Peak memory of importing one transcript of each size, each in a fresh process."""
    rows = []
    for mb in sizes:
        one = tmp / f"one-{mb}" / "s.jsonl"
        one.parent.mkdir()
        transcript(one, int(mb * 1e6), seed=99)
        rows.append((mb, peak_rss_kb(one, tmp)))
    print("peak RSS importing one transcript (fresh process, VmHWM):")
    for mb, kb in rows:
        print(f"  {mb:6.1f} MB transcript: {kb / 1024:7.1f} MB")
    (mb0, kb0), (mb1, kb1) = rows[0], rows[-1]
    print(f"  growth: {(kb1 - kb0) / 1024:.1f} MB for {mb1 - mb0:.1f} MB more transcript "
          f"({(kb1 - kb0) / 1024 / (mb1 - mb0):.2f} MB per MB)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=100.0, help="size of the generated folder")
    ap.add_argument("--session-mb", type=float, default=2.5, help="size of one transcript")
    ap.add_argument("--peak-mb", default="5,20,40", help="single-transcript sizes for RSS")
    ap.add_argument("--quick", action="store_true", help="10 MB folder, small peak sizes")
    ap.add_argument("--peak-only", action="store_true", help="only the memory measurement")
    args = ap.parse_args()
    if args.quick:
        args.mb, args.peak_mb = 10.0, "2,8"
    tmp = Path(tempfile.mkdtemp(prefix="bench-import-"))
    try:
        load = os.getloadavg()
        print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        if not args.peak_only:
            folder(tmp, args)
        peak(tmp, [float(x) for x in args.peak_mb.split(",")])
        load = os.getloadavg()
        print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
