"""The README's reliability figures: crashes injected, turns lost, redone batches, races run.

Runs the crash harness of tests/faults (real writer processes SIGKILLed at every named step
boundary and after random delays, the whole process group, over a branching workload,
restarted after each crash) twice on the same seed and schedule: once with scriptorium's write
path (archive -> install -> mark) and once with a baseline that marks before it writes (the
order the written-marker note forbids). Then runs the three-process race.

    python benchmarks/faults_crash.py                  # 200 crash rounds, 10 races
    SCRIPTORIUM_FAULT_ROUNDS=500 SCRIPTORIUM_RACE_ROUNDS=20 python benchmarks/faults_crash.py

``--json`` prints one JSON document instead of the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "faults"))

from faultkit import run_campaign, run_race  # noqa: E402


def campaign(root: Path, name: str, rounds: int, seed: int, baseline: str | None) -> dict:
    started = time.monotonic()
    stats = run_campaign(root / name, rounds=rounds, seed=seed, random_share=0.4,
                         baseline=baseline)
    out = stats.to_dict()
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def races(root: Path, count: int) -> dict:
    started = time.monotonic()
    total: dict = {"races": 0, "appended": 0, "rewound": 0, "marks_checked": 0,
                   "writer_calls": 0, "redundant_handoffs": 0, "retryable_failures": 0,
                   "omissions": 0, "duplicate_citations": 0, "eligible_turns": 0}
    for seed in range(count):
        stats = run_race(root / f"race{seed}", seed=seed).to_dict()
        total["races"] += 1
        total["appended"] += stats["appended"]
        total["rewound"] += stats["rewound"]
        total["marks_checked"] += stats["marks_logged"]
        total["writer_calls"] += stats["writer_calls"]
        total["redundant_handoffs"] += stats["redundant_handoffs"]
        total["retryable_failures"] += sum(stats["failures"].values())
        total["omissions"] += stats["omissions"]
        total["duplicate_citations"] += stats["duplicate_citations"]
        total["eligible_turns"] += stats["eligible_turns"]
    total["seconds"] = round(time.monotonic() - started, 1)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = int(os.environ.get("SCRIPTORIUM_FAULT_ROUNDS", "200"))
    race_count = int(os.environ.get("SCRIPTORIUM_RACE_ROUNDS", "10"))
    seed = int(os.environ.get("SCRIPTORIUM_FAULT_SEED", "1"))
    with tempfile.TemporaryDirectory(prefix="scriptorium-faults-") as tmp:
        root = Path(tmp)
        ours = campaign(root, "ours", rounds, seed, None)
        base = campaign(root, "baseline", rounds, seed, "mark-first")
        race = races(root, race_count)
    data = {"rounds": rounds, "seed": seed, "scriptorium": ours, "mark_first_baseline": base,
            "races": race}
    if args.json:
        print(json.dumps(data))
        return 0
    rows = [
        ("crash rounds (workload ops, killed write, restart)", "rounds"),
        ("writer processes SIGKILLed (crashes injected)", "crashes"),
        ("  of which at a random point (process group)", None),
        ("eligible turns on live branches at the end", "eligible_turns"),
        ("turns lost (unmarked, or marked but never cited)", "lost_turns"),
        ("writer calls", "writer_calls"),
        ("redone batches (a turn handed to the writer again)", "redone_batches"),
        ("turns cited by two blocks", "duplicate_citations"),
        ("invariant checks after crashes and restarts", "checks"),
        ("broken invariants", "violations"),
        ("git history holds every installed file", "git_clean"),
        ("seconds", "seconds"),
    ]
    print(f"crash harness, seed {seed}: scriptorium (archive -> install -> mark) vs a baseline "
          f"that marks first")
    print(f"| {'what':58} | {'scriptorium':>11} | {'mark-first':>10} |")
    print(f"|{'-' * 60}|{'-' * 13}|{'-' * 12}|")
    for label, key in rows:
        if key is None:
            a, b = ours["crashes_at"].get("random", 0), base["crashes_at"].get("random", 0)
        else:
            a, b = ours[key], base[key]
        print(f"| {label:58} | {str(a):>11} | {str(b):>10} |")
    print()
    print("crashes per named step (scriptorium):",
          ", ".join(f"{k} {v}" for k, v in sorted(ours["crashes_at"].items())))
    print(f"races: {race['races']} runs of appender + per-turn writer + idle watcher: "
          f"{race['appended']} turns appended, {race['rewound']} rewind stamps, "
          f"{race['marks_checked']} marks checked afterwards, {race['writer_calls']} writer "
          f"calls ({race['redundant_handoffs']} redundant hand-offs, "
          f"{race['retryable_failures']} retryable busy failures), "
          f"{race['omissions']} omissions, {race['duplicate_citations']} duplicate citations "
          f"({race['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
