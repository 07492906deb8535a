"""The llm writer's tools under hostile arguments: a catastrophic regex cannot hang the writer
(and with it the workspace lock), and no tool failure ends a run: every one comes back to the
model as a tool error result.

The whole-run tests drive the real openai client against the scripted server (``openai_stub``)
through ``Memory.write_session``, as the other llm tests do.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openai_stub import ScriptedServer, final, reply, tool_call
from scriptorium.config import load_settings
from scriptorium.memory.writers.llm import LLMWriter
from scriptorium.memory.writers.llm_tools import StageTools
from scriptorium.memory.writing import Memory
from testkit import workspace_lock_held

KEY_ENV = "SCRIPTORIUM_TEST_LLM_KEY"
CATASTROPHIC = "(a+)+$"            # exponential for a backtracking engine on "aaa…!"
EVIL_LINE = "a" * 5000 + "!"
# A process that hangs is killed after this long; the tools answer in milliseconds, so this is
# a guard against a regression hanging the suite, not a speed requirement.
HANG_GUARD_SECONDS = 120


@pytest.fixture
def stage(tmp_path: Path) -> Path:
    root = tmp_path / "stage"
    (root / "topics").mkdir(parents=True)
    (root / "topics" / "evil.md").write_text(f"# Evil\n\n{EVIL_LINE}\n", encoding="utf-8")
    return root


def test_a_catastrophic_grep_pattern_answers_at_once_in_a_real_process(stage):
    script = textwrap.dedent(f"""
        import json, sys
        from scriptorium.memory.writers.llm_tools import StageTools
        result = StageTools(sys.argv[1]).run("grep", {{"pattern": {CATASTROPHIC!r}}})
        print(json.dumps([result.status, result.output]))
    """)
    done = subprocess.run([sys.executable, "-c", script, str(stage)], capture_output=True,
                          text=True, timeout=HANG_GUARD_SECONDS)
    assert done.returncode == 0, done.stderr
    status, output = json.loads(done.stdout)
    assert (status, output) == ("ok", "no matches")


def test_grep_still_finds_what_a_bounded_engine_can_match(stage):
    tools = StageTools(stage)
    (stage / "topics" / "tea.md").write_text("# Tea\n\nDave likes Green tea.\n")
    assert tools.run("grep", {"pattern": r"green\s+TEA", "ignore_case": True}).output == \
        "topics/tea.md:3: Dave likes Green tea."
    assert tools.run("grep", {"pattern": "(a+)+!"}).output.startswith("topics/evil.md:3: aaa")


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?=a)b", "[^"])
def test_a_pattern_the_engine_refuses_is_a_tool_error_with_guidance(stage, pattern):
    result = StageTools(stage).run("grep", {"pattern": pattern})
    assert result.status == "error"
    assert "regular expression" in result.output


@pytest.mark.parametrize("pattern", ["[z-a]", "*[z-a]*.md", "**" * 200 + "x"])
def test_glob_with_a_reversed_range_or_many_stars_is_a_tool_result(stage, pattern):
    result = StageTools(stage).run("glob", {"pattern": pattern})
    assert result.status in ("ok", "error")
    if result.status == "error":
        assert "glob" in result.output


def test_any_exception_inside_a_tool_comes_back_as_an_error_result(stage, monkeypatch):
    tools = StageTools(stage)

    def broken(args):
        raise RuntimeError("disk controller on fire")

    monkeypatch.setitem(tools.handlers, "read", broken)
    result = tools.run("read", {"path": "topics/evil.md"})
    assert result.status == "error"
    assert "RuntimeError" in result.output and "disk controller on fire" in result.output


# -- whole runs: the model sees the error and the run goes on ---------------------------------


def memory_with(home: Path, server: ScriptedServer) -> Memory:
    writer = LLMWriter(base_url=server.base_url, model="stub-model", api_key_env=KEY_ENV,
                       timeout_seconds=5.0)
    mem = Memory(home, settings=load_settings(home), writer=writer)
    mem.store.create_session("s", title="Evil patterns")
    mem.store.append_message("s", {"id": "u1", "role": "user", "content": "aaaa!"})
    return mem


def valid_topic(body: dict) -> str:
    task = next(m["content"] for m in body["messages"] if m["role"] == "user")
    ref = next(json.loads(line)["ref"] for line in task.splitlines()
               if line.startswith('{"ref":'))
    return (f"# Patterns\n\nThe user typed a run of a's.[^e1]\n\n"
            f"[^e1]: Time: `undated`; Sources: [a's]({ref})\n")


def tool_results(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_a_run_with_a_reversed_glob_range_and_an_evil_grep_finishes_and_marks(home,
                                                                                monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with ScriptedServer([
            reply(tool_call("glob", pattern="[z-a]"),
                  tool_call("grep", pattern=CATASTROPHIC)),
            lambda body: reply(tool_call("write", path="topics/patterns.md",
                                         content=valid_topic(body))),
            final("Recorded it.")]) as server:
        mem = memory_with(home, server)
        (mem.workspace.topics_dir / "evil.md").write_text(  # valid: a fence holds any text
            f"# Evil\n\n```\n{EVIL_LINE}\n```\n", encoding="utf-8")
        result = mem.write_session("s")
        second_request = server.requests[1]
    assert result.failure is None, result.failure
    assert result.marked == ["u1"]
    glob_answer, grep_answer = tool_results(second_request)
    assert glob_answer.startswith("Error:") and "glob" in glob_answer
    assert not grep_answer.startswith("Error:")


def test_the_workspace_lock_is_free_for_others_after_a_tool_error(home, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with ScriptedServer([reply(tool_call("glob", pattern="[z-a]")),
                         final("Nothing to add.")]) as server:
        mem = memory_with(home, server)
        result = mem.write_session("s")
    assert result.failure is not None
    assert result.failure.reason_code == "WRITER_NO_PROGRESS"  # not WRITER_FAILURE_UNKNOWN
    with workspace_lock_held(mem.workspace.root):
        pass  # another holder gets the lock at once: the run released it
