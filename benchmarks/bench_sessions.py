"""Session-store benchmark: ours vs a baseline, side by side as a ratio.

1. Read after a foreign mark: a long-lived 289-node, ~4.2 MB session is held (cached) by this
   process; *another process* marks a 20-node batch through merge_node_metadata_batch; we time
   this process's next refresh (and refresh + get_branch). Baseline: a full index rebuild,
   which is what the reference store does on a stale fingerprint (it quotes 14-50 ms).
2. Cold open of that session (first read by a new store = full parse).
3. get_branch on a 10,000-node session: warm cache vs cold (rebuild + walk).
4. Append latency (user + assistant turn) with the per-turn git commit vs without.

How costs grow with the session's size (cold open, append, commit, marks) is measured by
bench_session_sizes.py.

Run: python benchmarks/bench_sessions.py [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from scriptorium.sessions import SessionStore  # noqa: E402
from scriptorium.sessions.index import RACY_NS, SessionIndex  # noqa: E402

WORDS = ("budget flight hotel menu vegetarian meeting room Lisbon offsite deploy Tuesday "
         "rollback staging canary metrics review approve schedule dinner venue transfer").split()


def text(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def age(sdir: Path, seconds: float = 3600) -> None:
    """Backdate every file: a long-lived session whose files were written long ago."""
    past = time.time() - seconds
    for p in [*sdir.rglob("*"), sdir / "history", sdir]:
        os.utime(p, (past, past), follow_symlinks=False)


def build(root: Path, sid: str, n: int, chars: int, seed: int = 7) -> list[str]:
    """Write an n-node chain directly as node files (fast, same format the store writes)."""
    rng = random.Random(seed)
    hist = root / sid / "history"
    hist.mkdir(parents=True)
    pred, ids = "ROOT", []
    for seq in range(n):
        nid = f"n{seq:05d}"
        role = "user" if seq % 2 == 0 else "llm"
        doc = {"id": nid, "created_at": 1.0 + seq, "seq": seq, "role": role, "name": "",
               "input": None, "output": text(rng, chars), "caller": "", "predecessor": pred,
               "reads": [], "metadata": {"source": "bench"}}
        (hist / f"{seq:08d}-{role[0]}-{nid}.json").write_text(json.dumps(doc))
        pred = nid
        ids.append(nid)
    (root / sid / "meta.json").write_text(json.dumps(
        {"id": sid, "title": sid, "created_at": 1.0, "updated_at": 2.0, "head_id": pred,
         "branches": {}}, separators=(",", ":")))
    return ids


def marker(root: str, sid: str, conn) -> None:
    """Another process: marks the batches it is sent."""
    store = SessionStore(Path(root), git=False)
    while True:
        batch = conn.recv()
        if batch is None:
            return
        store.merge_node_metadata_batch(sid, {nid: {"memory_written_scriptorium": "w-bench"}
                                              for nid in batch})
        conn.send("done")


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.2f} ms"


def row(name: str, ours: list[float], base: list[float], base_name: str) -> None:
    o, b = statistics.median(ours), statistics.median(base)
    print(f"| {name} | {ms(ours)} | {base_name}: {ms(base)} | {b / o:.1f}x |")


def bench_mark_refresh(tmp: Path, rounds: int) -> None:
    root = tmp / "s289"
    ids = build(root, "big", 289, 14_400)
    size = sum(p.stat().st_size for p in (root / "big" / "history").iterdir())
    print(f"\nsession: 289 nodes, {size / 1e6:.2f} MB of node files\n")
    print("| what | ours | baseline | ratio |")
    print("|---|---|---|---|")
    holder = SessionStore(root, git=False)
    parent, child = mp.get_context("fork").Pipe()
    proc = mp.get_context("fork").Process(target=marker, args=(str(root), "big", child))
    proc.start()
    refresh, read, full, full_read, cold = [], [], [], [], []
    refresh_cpu: list[float] = []
    full_cpu: list[float] = []
    rng = random.Random(1)
    try:
        for _ in range(rounds):
            age(root / "big")
            # a long-lived holder: its files changed well before it read them (a cold open
            # trusts a file's listed inode only with a ctime older than the open by RACY_NS)
            time.sleep(2 * RACY_NS / 1e9)
            holder.get_branch("big")  # settle the cache (re-parses what aging touched)
            start = rng.randrange(0, 289 - 20)
            parent.send(ids[start:start + 20])
            assert parent.recv() == "done"
            idx = holder._index("big")
            p0 = idx.parses
            c0, t0 = time.process_time(), time.perf_counter()
            idx.refresh()
            t1, c1 = time.perf_counter(), time.process_time()
            refresh_cpu.append(c1 - c0)
            assert idx.parses - p0 == 20, idx.parses - p0
            holder.get_branch("big")
            t2 = time.perf_counter()
            refresh.append(t1 - t0)
            read.append(t2 - t0)
            # baseline: the reference's answer to a stale fingerprint, a full rebuild
            c0, t0 = time.process_time(), time.perf_counter()
            fresh = SessionIndex("big", root / "big")
            fresh.refresh()
            t1, c1 = time.perf_counter(), time.process_time()
            full_cpu.append(c1 - c0)
            SessionStore(root, git=False).get_branch("big")
            t2 = time.perf_counter()
            full.append(t1 - t0)
            cold.append(t2 - t1)
            full_read.append(t2 - t1)
    finally:
        parent.send(None)
        proc.join(10)
    row("refresh after a foreign 20-node mark", refresh, full, "full rebuild")
    row("the same, CPU time", refresh_cpu, full_cpu, "full rebuild")
    row("refresh + get_branch after the mark", read, full_read, "cold open + get_branch")
    print(f"| cold open (new store, first get_branch) | {ms(cold)} | reference quotes 14-50 ms "
          f"for its rebuild | - |")


def bench_big_branch(tmp: Path, rounds: int) -> None:
    root = tmp / "s10k"
    build(root, "huge", 10_000, 200)
    age(root / "huge")
    store = SessionStore(root, git=False)
    assert len(store.get_branch("huge")) == 10_000
    warm, cold = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        store.get_branch("huge")
        warm.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        SessionStore(root, git=False).get_branch("huge")
        cold.append(time.perf_counter() - t0)
    row("get_branch, 10,000-node session (warm cache)", warm, cold, "cold (rebuild + walk)")


def bench_append(tmp: Path, rounds: int) -> None:
    with_git = SessionStore(tmp / "git", git=True)
    without = SessionStore(tmp / "nogit", git=False)
    for s in (with_git, without):
        s.create_session("a")
    rng = random.Random(3)
    t_git, t_plain = [], []
    for i in range(rounds):
        for s, bucket in ((with_git, t_git), (without, t_plain)):
            t0 = time.perf_counter()
            s.append_message("a", {"role": "user", "content": text(rng, 300)})
            s.append_message("a", {"role": "assistant", "content": text(rng, 600)})
            bucket.append(time.perf_counter() - t0)
    assert len(with_git.git_log("a")) == rounds + 1
    row("append a turn (user + reply), no commit", t_plain, t_git, "with per-turn git commit")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="3 rounds (smoke run)")
    args = ap.parse_args()
    rounds = 3 if args.quick else args.rounds
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_mark_refresh(tmp, rounds)
        bench_big_branch(tmp, max(3, rounds // 3))
        bench_append(tmp, rounds)
    print(f"\nmedians over {rounds} rounds; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
