"""The README's promises hold: its library example runs and its two commands are there."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_library_example_runs_in_a_fresh_home(tmp_path, monkeypatch, capsys):
    code = re.search(r"## Use it as a library\n\n```python\n(.*?)```", README.read_text(),
                     re.S).group(1)
    monkeypatch.setenv("HOME", str(tmp_path))  # "~/.scriptorium" lands in the temp dir
    exec(compile(code, str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "'failure': None" in out and "topics/lisbon-offsite.md" in out
    assert (tmp_path / ".scriptorium" / "memory" / "topics" / "lisbon-offsite.md").exists()


def test_the_readme_gives_the_demo_and_the_test_command_ci_runs():
    text = README.read_text()
    assert "scriptorium demo" in text
    ci = (README.parent / ".ci" / "run").read_text()
    command = re.search(r"^(python -m pytest[^\n]*)$", ci, re.M).group(1)
    assert re.search(rf"^{re.escape(command)}\s", text, re.M), "CI must run the README's command"


def test_the_main_entry_points_import_from_the_package():
    import scriptorium
    from scriptorium import Memory, SessionStore, Workspace, search
    from scriptorium.memory.writing import Memory as memory_class

    assert Memory is memory_class and callable(search)
    assert SessionStore.__name__ == "SessionStore" and Workspace.__name__ == "Workspace"
    try:
        scriptorium.nothing_here
    except AttributeError as exc:
        assert "nothing_here" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("unknown names must raise AttributeError")
