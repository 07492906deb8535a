"""Helpers shared by test modules (import as ``from testkit import …``).

Kept out of conftest.py because several conftest modules exist and only one can be imported
under that name.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

DATA = Path(__file__).parent / "data"
OPENPROGRAM_STATE = DATA / "openprogram-state"


def copy_state(name: str, dest: Path) -> Path:
    """Copy a reference-system state directory (``written`` or ``legacy-cursor``) to ``dest``."""
    shutil.copytree(OPENPROGRAM_STATE / name, dest)
    return dest


class Cli:
    """Run ``scriptorium --home HOME …`` in-process and decode ``--json`` output."""

    def __init__(self, home: Path):
        self.home = home
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None):
        from scriptorium.cli import main

        return self.runner.invoke(main, ["--home", str(self.home), *args], input=input,
                                  catch_exceptions=False)

    def json(self, *args: str) -> dict:
        result = self(*args, "--json")
        assert result.exit_code == 0, f"exit {result.exit_code}: {result.output}"
        return json.loads(result.stdout)
