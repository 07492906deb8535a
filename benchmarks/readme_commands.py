"""Check that every benchmark command in the README's Performance table runs as written: each
``python benchmarks/NAME.py ARGS`` is parsed by that script's own argument parser, which then
stops it before it measures anything. A flag renamed or dropped from a script fails here
instead of failing the reader who copies the command.

Run: python benchmarks/readme_commands.py [README]   (prints one line per command; exit 1 on
any command whose arguments the script refuses)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class _Parsed(Exception):
    """Raised by the patched parser once the arguments were accepted."""


def performance_commands(readme: Path) -> list[str]:
    """Every distinct ``python benchmarks/….py …`` command quoted in ``## Performance``."""
    text = readme.read_text(encoding="utf-8")
    section = re.search(r"^## Performance\n(.*?)(?=^## )", text, re.S | re.M)
    if section is None:
        raise SystemExit(f"{readme}: no '## Performance' section")
    found = re.findall(r"`(python benchmarks/[^`]+)`", section.group(1))
    return list(dict.fromkeys(found))


def check(command: str) -> str | None:
    """None when the script's parser accepts the command's arguments, else the reason."""
    argv = shlex.split(command)[1:]
    script = REPO / argv[0]
    if not script.is_file():
        return f"no such script: {argv[0]}"
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv, sys.path[:0] = [str(script), *argv[1:]], [str(script.parent), str(REPO / "src")]
    argparse.ArgumentParser.parse_args = parse_then_stop  # type: ignore[method-assign]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(str(script), run_name="__main__")
    except _Parsed:
        return None
    except SystemExit:
        return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "exited"
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv, sys.path[:] = saved_argv, saved_path
    return "the script never parsed its arguments"


def main() -> None:
    readme = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "README.md"
    failed = 0
    for command in performance_commands(readme):
        problem = check(command)
        print(f"{'ok  ' if problem is None else 'FAIL'} {command}"
              + ("" if problem is None else f": {problem}"))
        failed += problem is not None
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
