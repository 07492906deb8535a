"""The README's kills-per-command figures: real `scriptorium` CLI processes SIGKILLed.

Runs tests/faults/clikill.py: round after round, each command (session add, memory write,
memory write --all, memory verify --repair, memory migrate, memory backfill, memory reorganize,
memory watch, memory search, import codex --write) runs as a real CLI process whose process
group is SIGKILLed at a named step of the write path or after a random delay; the user's retry
must succeed, the marks must stay a prefix, verify must pass, and nothing may appear outside the
home (an enclosing git repository, HOME, TMPDIR and the working directory are watched). At the
end a forced write must leave every live turn marked and cited exactly once.

    python benchmarks/faults_cli_kill.py                   # 8 rounds per command
    SCRIPTORIUM_CLI_KILL_ROUNDS=20 python benchmarks/faults_cli_kill.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "faults"))

from clikill import run_cli_kills  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = int(os.environ.get("SCRIPTORIUM_CLI_KILL_ROUNDS", "8"))
    seed = int(os.environ.get("SCRIPTORIUM_FAULT_SEED", "1"))
    load_before = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="scriptorium-cli-kill-") as tmp:
        stats = run_cli_kills(Path(tmp), rounds=rounds, seed=seed)
    data = stats.to_dict()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    data.update(rounds_per_command=rounds, seed=seed, commit=commit,
                seconds=round(time.monotonic() - started, 1),
                load_before=[round(x, 1) for x in load_before],
                load_after=[round(x, 1) for x in os.getloadavg()])
    if args.json:
        print(json.dumps(data))
        return 0
    print(f"CLI kill campaign, seed {seed}, {rounds} rounds per command, commit {commit}, "
          f"load {data['load_before'][0]} -> {data['load_after'][0]}, {data['seconds']} s")
    print(f"| {'command':24} | rounds | killed | at a named step | step not reached | "
          f"retry ok |")
    print(f"|{'-' * 26}|--------|--------|-----------------|------------------|----------|")
    for cmd, row in data["commands"].items():
        print(f"| {cmd:24} | {row['rounds']:6} | {row['killed']:6} | "
              f"{row['at_named_step']:15} | {row['step_not_reached']:16} | "
              f"{row['retries_ok']:8} |")
    print(f"total kills {data['kills']}; {data['checks']} invariant checks; after a final "
          f"forced write on {data['homes']} homes: {data['eligible_turns']} live turns, "
          f"{data['omissions']} unmarked, {data['uncited']} uncited, "
          f"{data['duplicate_citations']} cited twice; "
          f"{data['files_written_outside_home']} files written outside the home")
    return 0


if __name__ == "__main__":
    sys.exit(main())
