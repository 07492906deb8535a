"""Migration cost on a long, fully archived session with forks: ours vs one walk per candidate.

Ours walks the newest candidate's DAG path first and skips every candidate already seen on a
walked path (the path ending at it is a prefix of that walk, so it cannot add marks). The
baseline walks the path of every candidate, which is what the rule reads as ("for each
candidate, read the real DAG path ending at it") — quadratic in the session length.

    python benchmarks/bench_migrate.py [--turns 2000] [--forks 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from scriptorium.memory.migrate import archive_candidates, migrate, safe_prefix  # noqa: E402
from scriptorium.memory.records import records  # noqa: E402
from scriptorium.memory.sources import SourceArchive, SourceRecord  # noqa: E402
from scriptorium.memory.writing import Memory  # noqa: E402
from scriptorium.sessions import SessionStore  # noqa: E402


def build(home: Path, turns: int, forks: int) -> None:
    store = SessionStore(home / "sessions", git=False)
    store.create_session("s")
    names: list[str] = []
    for k in range(turns):
        name = f"m{k}"
        store.append_message("s", {"id": name, "role": "user" if k % 2 == 0 else "assistant",
                                   "content": f"turn {k} about the offsite budget and venue"})
        names.append(name)
    step = max(1, turns // (forks + 1))
    for f in range(forks):  # short branches off the trunk, all archived too
        prev = names[(f + 1) * step - 1]
        for j in range(3):
            name = f"f{f}-{j}"
            store.append_message("s", {"id": name, "predecessor": prev, "role": "user",
                                       "content": f"fork {f} turn {j}"})
            names.append(name)
            prev = name
    root = home / "memory"
    SourceArchive(root).archive([SourceRecord("openprogram", "s", n, "user", "archived")
                                 for n in names])
    (root / ".scriptorium").mkdir(parents=True, exist_ok=True)
    (root / ".scriptorium" / "runtime.json").write_text(
        json.dumps({"cursors": {"s": {"message_id": names[-1], "ordinal": 9}}}))


def baseline_prefix(store: SessionStore, sid: str, cands: list[str]) -> set[str]:
    wanted, safe = set(cands), set()
    for node in cands:
        for r in records(sid, store.get_branch(sid, head=node)):
            if r.node_id not in wanted:
                break
            safe.add(r.node_id)
    return safe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--forks", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    ours, base, full = [], [], []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            build(home, args.turns, args.forks)
            store = SessionStore(home / "sessions", git=False)
            cands = archive_candidates(home / "memory")["s"]
            t0 = time.perf_counter()
            expected = baseline_prefix(store, "s", cands)
            base.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            got, _ = safe_prefix(store, "s", cands)
            ours.append(time.perf_counter() - t0)
            assert set(got) == expected, "ours and the baseline disagree"
            mem = Memory(home, store=store)
            t0 = time.perf_counter()
            report = migrate(mem)
            full.append(time.perf_counter() - t0)
            assert set(report.marked["s"]) == expected
            marked_count = len(expected)
    o, b = statistics.median(ours) * 1000, statistics.median(base) * 1000
    f = statistics.median(full) * 1000
    print(f"session: {args.turns} trunk turns + {args.forks}x3 fork turns, all archived "
          f"({marked_count} to mark); medians of {args.rounds} rounds")
    print(f"{'what':44} {'ours':>10} {'baseline':>10} {'ratio':>7}")
    print(f"{'safe prefix (walks only)':44} {o:8.1f}ms {b:8.1f}ms {b / o:6.1f}x")
    print(f"{'full migrate (candidates, walks, one batch)':44} {f:8.1f}ms {'-':>10} {'-':>7}")


if __name__ == "__main__":
    main()
