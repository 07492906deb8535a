"""Tally the bad inputs the test suite tries, by kind, by running them.

The suite's tests are named for their behaviour, so a test that feeds scriptorium a bad input
says so ("…_is_refused", "a_corrupt_…", "…_escapes_…"). This script collects the whole suite,
keeps the tests whose names say they try a bad input (every parametrized case counts once),
files each under the first kind its name (or file) matches, runs them, and prints one row per
kind with the number of cases and how many passed.

    python benchmarks/faults_bad_inputs.py             # the table
    python benchmarks/faults_bad_inputs.py --only ids  # run one kind (add --list to see them)
    python benchmarks/faults_bad_inputs.py --json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A test that tries a bad input says so in its name.
BAD = re.compile(r"bad|invalid|refus|reject|corrupt|escape|unsafe|malformed|truncat|forg|torn|"
                 r"unreadable|damage|symlink|dangling|unknown_(?!message)|something_unknown|"
                 r"noncanonical|off_schema|collid|broken|garbage|impossible|cycle|smuggle|dotdot|"
                 r"padding|not_json|not_a_safe|not_a_chat|an_error|"
                 r"half_made|killed_during|named_by_the_environment|plain_file|is_a_directory|"
                 r"non_utf8|nul_or|not_archived|does_not_exist|unknown_caller|"
                 r"colliding|too_long|existing_id|cannot_be_written|unknown_section|"
                 r"given_twice", re.I)
# Names that match the words above but do not feed a bad input.
NOT_BAD = re.compile(r"test_verify_race|index_lives_in_the_runtime_dir", re.I)

# (kind, label, pattern on the test name, pattern on its file); the first match wins.
KINDS = [
    ("git", "git histories (half-made, holding history, killed in `git init`)",
     r"_git_|git_commit|git_init|repository", r"test_git_pinned"),
    ("text", "message text (blank, NUL, lone surrogate, bad `--text-file`)",
     r"empty_or_blank|nul_or_a_lone|text_is_refused|different_text", None),
    ("runtime", "runtime.json and other state files (journal, config, node/meta files)",
     r"runtime|journal|state_file|workspace_id_file|setting|cursor|index_file|index_damaged|"
     r"node_file|meta_json|unreadable_session|config|search_index|write_lock|session_lock",
     None),
    ("paths", "paths (escapes, `..`, absolute, symlinks, non-files)",
     r"_path(?!_and_line)|path_|escape|symlink|outside_topics|files_outside|dotdot|smuggle|"
     r"leave_the_workspace|topics_directory|non_markdown|directory_that|history_that|"
     r"non_utf8_name|home_that", None),
    ("archives", "evidence archives (v2 frames, legacy records)",
     r"archive|frame|header|record_lines|meta_token|speaker|utf8",
     r"test_sources_(v2|legacy|archive|properties)|test_migrate"),
    ("topics", "topic files (blocks, citations, footnotes, links)",
     r"topic|footnote|citation|block|definition|time_is|caret|grammar|paragraph|label",
     r"test_topics"),
    ("ids", "ids (session, node, caller, source, block ids)",
     r"_id_|_id$|_id\[|_ids|unsafe_id|session_id|node_id|source_id|unknown_(node|session|"
     r"caller|head)|predecessor|caller|an_unknown_session", r"test_sources_ids"),
    ("other", "other arguments (search, budgets, roles, writer output, endpoints)", r".", None),
]


def collect() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "::" in line]


def kind_of(test_id: str) -> str | None:
    path, name = test_id.split("::", 1)
    if not BAD.search(name) or NOT_BAD.search(test_id):
        return None
    for kind, _label, name_pattern, file_pattern in KINDS:
        if re.search(name_pattern, name, re.I) or (
                file_pattern and re.search(file_pattern, path)):
            return kind
    return None


class Outcomes:
    """A pytest plugin recording each test's outcome."""

    def __init__(self) -> None:
        self.passed: set[str] = set()
        self.failed: set[str] = set()

    def pytest_runtest_logreport(self, report) -> None:  # noqa: ANN001 - pytest hook
        if report.when == "call" or (report.when == "setup" and not report.passed):
            (self.passed if report.passed else self.failed).add(report.nodeid)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=[k for k, *_ in KINDS])
    parser.add_argument("--list", action="store_true", help="print the selected test ids")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    selected = {t: k for t in collect() if (k := kind_of(t)) and (not args.only or k == args.only)}
    if args.list:
        for test_id, kind in sorted(selected.items(), key=lambda item: (item[1], item[0])):
            print(f"{kind:8} {test_id}")
        return 0
    import pytest

    outcomes = Outcomes()
    sys.path.insert(0, str(ROOT / "tests"))
    code = pytest.main(["-q", "-p", "no:cacheprovider", "--no-header", "-o",
                        "console_output_style=classic", *sorted(selected)],
                       plugins=[outcomes])
    cases, passed = Counter(selected.values()), Counter(
        selected[t] for t in outcomes.passed if t in selected)
    rows = [{"kind": kind, "label": label, "cases": cases[kind], "passed": passed[kind],
             "command": f"python benchmarks/faults_bad_inputs.py --only {kind}"}
            for kind, label, *_ in KINDS if cases[kind]]
    total = {"cases": sum(cases.values()), "passed": sum(passed.values())}
    if args.json:
        print(json.dumps({"rows": rows, "total": total}))
    else:
        print(f"\n| {'bad input':70} | cases | passed |")
        print(f"|{'-' * 72}|-------|--------|")
        for row in rows:
            print(f"| {row['label']:70} | {row['cases']:5} | {row['passed']:6} |")
        print(f"| {'total':70} | {total['cases']:5} | {total['passed']:6} |")
    return 0 if code == 0 and total["cases"] == total["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
