"""The README's Performance table quotes benchmark commands that run as written."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "benchmarks" / "readme_commands.py"


def run_check(readme: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(readme)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_every_performance_command_is_accepted_by_its_script():
    out = run_check(ROOT / "README.md")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) >= 10 and all(line.startswith("ok ") for line in lines), out.stdout


def test_a_flag_the_script_does_not_have_is_reported(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("## Performance\n\n| a | `python benchmarks/bench_marks.py --rounds 3` |\n"
                      "| b | `python benchmarks/bench_marks.py --no-such-flag 1` |\n"
                      "| c | `python benchmarks/no_such_bench.py` |\n\n## Layout\n")
    out = run_check(readme)
    assert out.returncode == 1
    ok, bad_flag, missing = out.stdout.splitlines()
    assert ok.startswith("ok ")
    assert bad_flag.startswith("FAIL") and "--no-such-flag" in bad_flag
    assert missing.startswith("FAIL") and "no such script" in missing
