"""A writer from another package is found through the ``scriptorium.writers`` entry points
and used from the CLI, exactly like the built-in ones (whose names stay theirs): a tiny package is built in a temporary
directory and installed, with this project, into a temporary virtualenv (offline)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

WRITER_MODULE = '''
"""A third-party writer: the embedded writer's output, plus a log of what it was handed."""
import json
import os

from scriptorium.memory.writers.embedded import EmbeddedWriter


class ThirdPartyWriter:
    name = "thirdparty"
    repair_attempts = 0

    def write(self, request):
        with open(os.environ["THIRDPARTY_LOG"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps([r.source_id for r in request.batch]) + "\\n")
        audit = EmbeddedWriter().write(request)
        audit.writer = self.name
        return audit


def make(settings):
    return ThirdPartyWriter()
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "thirdparty-writer"
version = "1.0"

[project.entry-points."scriptorium.writers"]
thirdparty = "thirdparty_writer:make"
embedded = "thirdparty_writer:make"
'''


def run(*args: object, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


@pytest.mark.slow
def test_a_writer_installed_from_another_package_is_used_by_memory_write(tmp_path):
    package = tmp_path / "thirdparty"
    package.mkdir()
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "thirdparty_writer.py").write_text(textwrap.dedent(WRITER_MODULE))
    project = tmp_path / "project"  # a copy: building in place would leave build/ behind
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "src", project / "src",
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))

    venv = tmp_path / "venv"
    made = run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    # Dependencies (click, rich, pip, setuptools) come from the environment running the tests.
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    parent = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site.stdout.strip()) / "_parent_env.pth").write_text("\n".join(sorted(parent)) + "\n")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for source in (project, package):
        installed = run(python, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", source, env=env, cwd=tmp_path)
        assert installed.returncode == 0, installed.stderr[-2000:]

    scriptorium = venv / "bin" / "scriptorium"
    home, log = tmp_path / "home", tmp_path / "handed.jsonl"
    env = {**env, "THIRDPARTY_LOG": str(log), "SCRIPTORIUM_HOME": str(home)}
    for args in (["session", "new", "--id", "s", "--title", "Plugin trip"],
                 ["session", "add", "s", "--role", "user", "--text", "Budget is 9k.", "--id", "u1"],
                 ["session", "add", "s", "--role", "assistant", "--text", "Noted, 9k.",
                  "--id", "a1"]):
        step = run(scriptorium, *args, env=env)
        assert step.returncode == 0, step.stderr

    wrote = run(scriptorium, "memory", "write", "s", "--force", "--writer", "thirdparty",
                "--json", env=env)
    assert wrote.returncode == 0, wrote.stderr
    assert json.loads(wrote.stdout)["sessions"][0]["marked"] == ["u1", "a1"]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        ["openprogram/s/u1", "openprogram/s/a1"]]
    assert "Budget is 9k" in (home / "memory" / "topics" / "plugin-trip.md").read_text()

    # an unknown name is one line listing every registered writer, the plug-in among them
    unknown = run(scriptorium, "memory", "write", "s", "--writer", "nosuch", env=env)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1
    assert "registered: embedded, llm, thirdparty" in unknown.stderr
    # and the config file may name it too
    (home / "config.toml").write_text('[writer]\nkind = "thirdparty"\n')
    run(scriptorium, "session", "add", "s", "--role", "user", "--text", "Add a day.", env=env)
    again = run(scriptorium, "memory", "write", "s", "--force", env=env)
    assert again.returncode == 0, again.stderr
    assert len(log.read_text().splitlines()) == 2

    # a package that registers a built-in writer's name does not replace it
    (home / "config.toml").write_text('[writer]\nkind = "embedded"\n')
    run(scriptorium, "session", "add", "s", "--role", "user", "--text", "And a pool.", env=env)
    ours = run(scriptorium, "memory", "write", "s", "--force", "--json", env=env)
    assert ours.returncode == 0, ours.stderr
    assert json.loads(ours.stdout)["sessions"][0]["marked"]
    assert len(log.read_text().splitlines()) == 2  # the plug-in was not handed the batch
