"""The public modules are clean under ``mypy --strict`` (the list is pyproject's
[tool.mypy] files), and both built-in writers satisfy the Writer protocol statically."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROTOCOL_CHECK = '''
from scriptorium import Writer
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writers.llm import LLMWriter


def builtins(embedded: EmbeddedWriter, llm: LLMWriter) -> list[Writer]:
    return [embedded, llm]
'''


@pytest.mark.slow
def test_the_public_modules_pass_mypy_strict(tmp_path):
    pytest.importorskip("mypy")
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert "src/scriptorium/__init__.py" in files
    check = tmp_path / "protocol_check.py"
    check.write_text(PROTOCOL_CHECK)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), *files, str(check)],
        cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"in {len(files) + 1} source files" in result.stdout


def test_the_package_ships_py_typed():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["scriptorium"]
    assert (ROOT / "src" / "scriptorium" / "py.typed").is_file()
