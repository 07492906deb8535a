"""Writers are found by name through the ``scriptorium.writers`` entry points; the built-ins
register there like any third party (tests/test_thirdparty_writer.py installs one)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from scriptorium.config import Settings, load_settings
from scriptorium.entrypoints import BUILTIN_WRITERS, registered_writers
from scriptorium.errors import InvalidInput
from scriptorium.memory.writers import make_writer
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writers.llm import LLMWriter

ROOT = Path(__file__).resolve().parents[2]


def test_the_built_in_writers_are_registered_in_pyproject_as_entry_points():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["scriptorium.writers"] == BUILTIN_WRITERS
    found = registered_writers()
    assert {name: found[name].value for name in BUILTIN_WRITERS} == BUILTIN_WRITERS


def test_make_writer_builds_each_built_in_from_its_entry_point():
    assert isinstance(make_writer("embedded"), EmbeddedWriter)
    llm = make_writer("llm", Settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="m"))
    assert isinstance(llm, LLMWriter) and (llm.name, llm.repair_attempts) == ("llm", 1)
    assert llm.base_url == "http://127.0.0.1:9/v1"


def test_a_built_in_writer_is_built_without_scanning_the_installed_packages():
    """The metadata scan imports importlib.metadata and 34 modules, 1.8 MB, at every start."""
    code = ("import sys\n"
            "from scriptorium.memory.writers import make_writer\n"
            "print(type(make_writer('embedded')).__name__, 'importlib.metadata' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["EmbeddedWriter", "False"]


def test_an_unknown_writer_is_one_line_naming_the_registered_ones(tmp_path):
    with pytest.raises(InvalidInput) as info:
        make_writer("magic")
    assert info.value.code == "UNKNOWN_WRITER" and info.value.exit_code == 2
    assert "'magic'" in str(info.value) and "registered: embedded, llm" in str(info.value)
    (tmp_path / "config.toml").write_text("[writer]\nkind = 'magic'\n")
    with pytest.raises(InvalidInput, match="registered: embedded, llm"):
        load_settings(tmp_path, environ={})


def test_the_cli_refuses_an_unknown_writer_in_one_line(cli):
    cli("session", "new", "--id", "s")
    result = cli("memory", "write", "s", "--writer", "magic")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "unknown writer 'magic' (registered: embedded, llm" in result.stderr
