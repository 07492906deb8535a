"""One registry of reason codes, one table of exit codes, and errors reported the same way
everywhere: one stderr line, and under --json a JSON error document on stdout."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import scriptorium
from scriptorium.cli import main
from scriptorium.errors import (EXIT_CODES, EXIT_MEANINGS, ConcurrentUpdate, ReasonCode,
                                ScriptoriumError, WriteFailed)
from scriptorium.memory.transaction import TransactionError
from testkit import json_error

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "scriptorium"


def all_error_classes() -> set[type[ScriptoriumError]]:
    for info in pkgutil.walk_packages(scriptorium.__path__, "scriptorium."):
        if info.name.endswith("__main__"):  # running it would start the CLI
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional extra (openai, sentence-transformers) not installed
            continue
    seen: set[type[ScriptoriumError]] = set()
    todo = [ScriptoriumError]
    while todo:
        cls = todo.pop()
        seen.add(cls)
        todo.extend(c for c in cls.__subclasses__() if c not in seen)
    return seen


def test_every_error_class_has_a_registered_code_and_a_documented_exit_code():
    classes = all_error_classes()
    assert len(classes) > 15
    for cls in classes:
        assert isinstance(cls.code, ReasonCode), cls
        exc = cls.__new__(cls, "x")
        ScriptoriumError.__init__(exc, "x")
        assert exc.exit_code in EXIT_MEANINGS and exc.exit_code != 0, cls


def test_no_reason_code_is_a_bare_string_literal_in_the_source():
    offenders = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            literal = None
            if isinstance(node, ast.keyword) and node.arg in {"code", "outcome", "reason_code"}:
                literal = node.value
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "code" for t in node.targets):
                literal = node.value
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Failure" \
                    and node.args:
                literal = node.args[0]
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == []


def test_an_unregistered_code_is_refused_at_construction():
    with pytest.raises(ValueError):
        ScriptoriumError("x", code="NOT_A_REGISTERED_CODE")


def test_reason_codes_compare_and_serialise_as_their_strings():
    assert ReasonCode.STALE_BATCH == "STALE_BATCH"
    assert json.dumps({"c": ReasonCode.STALE_BATCH}) == '{"c": "STALE_BATCH"}'


def test_a_concurrent_transaction_error_is_a_concurrent_update():
    exc = TransactionError("moved under us", code="CONCURRENT_UPDATE")
    assert isinstance(exc, ConcurrentUpdate) and isinstance(exc, TransactionError)
    assert exc.retryable and exc.exit_code == 5 and exc.code == ReasonCode.CONCURRENT_UPDATE
    rejected = TransactionError("bad edit", code="NOT_EVIDENCE")
    assert not isinstance(rejected, ConcurrentUpdate) and isinstance(rejected, WriteFailed)
    assert rejected.exit_code == 1 and not rejected.retryable


def test_the_readme_exit_code_table_is_the_one_in_errors():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = re.search(r"\| exit \| meaning \|\n\|---\|---\|\n((?:\|[^\n]*\|\n)+)", text)
    assert table, "README lost its exit-code table"
    rows = {int(code): meaning.strip() for code, meaning in
            re.findall(r"^\| (\d) \| ([^|]+)\|$", table.group(1), re.M)}
    assert rows == EXIT_MEANINGS
    assert set(EXIT_CODES.values()) <= set(rows)


def test_json_errors_are_a_document_on_stdout_and_one_line_on_stderr(tmp_path):
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "session", "show", "ghost",
                                       "--json"])
    assert result.exit_code == 3
    error = json_error(result)
    assert error["code"] == "SESSION_NOT_FOUND" and error["retryable"] is False
    assert "ghost" in error["message"]


@pytest.mark.parametrize("args", [
    ["memory", "search"],                              # missing argument
    ["memory", "search", "x", "--top-k", "many"],      # bad value
    ["memory", "nonsense"],                            # no such command
    ["session", "show", "s", "--no-such-flag"],        # no such option
])
def test_click_usage_errors_are_one_line_with_exit_2(tmp_path, args):
    result = CliRunner().invoke(main, ["--home", str(tmp_path), *args])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    as_json = CliRunner().invoke(main, ["--home", str(tmp_path), *args, "--json"])
    assert as_json.exit_code == 2 and json_error(as_json)["code"] == "INVALID_INPUT"
