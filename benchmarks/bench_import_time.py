"""What importing the package costs: CPU time of a fresh interpreter doing one import, minus a
bare interpreter, beside the CLI's own framework (click + rich) as a baseline.

CPU time (user + sys of the child), not wall time, and the minimum of N runs: on a loaded
machine wall time measures the neighbours. The module counts are exact.

    python benchmarks/bench_import_time.py [--runs 9] [--src DIR]

``--src`` measures another checkout's ``src/`` (e.g. a worktree of main) the same way.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

STATEMENTS = {
    "import scriptorium": "import scriptorium",
    "import scriptorium.cli": "import scriptorium.cli",
    "baseline: import click, rich.console": "import click, rich.console",
}


def cpu_ms(code: str, env: dict[str, str], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, spent * 1000)
    return best


def module_count(code: str, env: dict[str, str]) -> int:
    probe = code + "; import sys; print(sum(m.startswith('scriptorium') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], env=env, check=True,
                         capture_output=True, text=True)
    return int(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": args.src}
    bare = cpu_ms("pass", env, args.runs)
    baseline = cpu_ms(STATEMENTS["baseline: import click, rich.console"], env, args.runs) - bare
    print(f"src {args.src}; load average {os.getloadavg()[0]:.2f}; min of {args.runs} runs")
    for label, code in STATEMENTS.items():
        spent = cpu_ms(code, env, args.runs) - bare
        print(f"{label:40} {spent:7.1f} ms CPU  {spent / baseline:5.2f}x baseline  "
              f"{module_count(code, env):3d} scriptorium modules")


if __name__ == "__main__":
    main()
