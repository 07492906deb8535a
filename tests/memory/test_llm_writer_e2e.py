"""The llm writer through the whole write path: Memory on a real session store in a temporary
home, the real openai client, a scripted OpenAI-compatible server on 127.0.0.1.

The scripted "model" reads the prompt it is sent (the JSON line of each turn) and cites the
refs it finds there, as a real model would; nothing about the batch is hard-coded.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from openai_stub import ScriptedServer, delay, error, final, reply, tool_call
from scriptorium.config import load_settings
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.writers.llm import HISTORY_FILE, LLMWriter
from scriptorium.memory.writing import Memory

KEY_ENV = "SCRIPTORIUM_TEST_LLM_KEY"
TURNS = [("u1", "user", "I switched to green tea; coffee keeps me up at night."),
         ("a1", "assistant", "Noted: green tea instead of coffee in the evenings."),
         ("u2", "user", "Also book the Lisbon offsite for the 14th of May.")]


# -- the scripted model --------------------------------------------------------------------


def turns_in(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(observed day, turn) for each JSON turn line of the task the model was sent."""
    task = next(m["content"] for m in body["messages"] if m["role"] == "user")
    out, day = [], "undated"
    for line in task.splitlines():
        heading = re.fullmatch(r"## Observed (\S+)", line)
        if heading:
            day = heading.group(1)
        elif line.startswith('{"ref":'):
            out.append((day, json.loads(line)))
    return out


def topic_for(body: dict[str, Any], *, cite: str | None = None, bare: bool = False) -> str:
    """A valid topic paragraph per turn, citing the turn's own ref (or ``cite``); ``bare``
    writes each footnote's Sources as the bare handle, as some models do."""
    paragraphs, definitions = [], []
    for n, (day, turn) in enumerate(turns_in(body), 1):
        who = "The user" if turn["speaker"] == "user" else "The assistant"
        paragraphs.append(f"{who} said: {turn['content']}[^e{n}]")
        target = cite or turn["ref"]
        definitions.append(f"[^e{n}]: Time: `{day}`; Sources: " +
                           (target if bare else f"[what was said]({target})"))
    return "# Habits\n\n" + " ".join(paragraphs) + "\n\n" + "\n".join(definitions) + "\n"


def writes_topic(path: str = "topics/habits.md", cite: str | None = None, bare: bool = False):
    return lambda body: reply(tool_call("write", path=path,
                                        content=topic_for(body, cite=cite, bare=bare)))


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")


def memory_with(home: Path, server: ScriptedServer, **kw) -> Memory:
    writer = LLMWriter(base_url=server.base_url, model="stub-model", api_key_env=KEY_ENV,
                       timeout_seconds=kw.pop("timeout_seconds", 5.0), **kw)
    mem = Memory(home, settings=load_settings(home), writer=writer)
    mem.store.create_session("s", title="Evening habits")
    for node_id, role, text in TURNS:
        mem.store.append_message("s", {"id": node_id, "role": role, "content": text})
    return mem


def marks(mem: Memory) -> set[str]:
    return {n.id for n in mem.store.get_nodes("s") if n.metadata.get(MARK_KEY)}


def topics_tree(mem: Memory) -> dict[str, str]:
    root = mem.workspace.root / "topics"
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*.md"))}


def snapshot(root: Path, skip: tuple[str, ...]) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.relative_to(root).as_posix().startswith(skip)}


def history(mem: Memory) -> list[dict[str, Any]]:
    path = mem.workspace.runtime_dir / HISTORY_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- outcomes ------------------------------------------------------------------------------


def test_a_good_run_installs_a_topic_and_marks_the_batch(home, key):
    with ScriptedServer([writes_topic(), final("Recorded the tea habit and the offsite.")]) \
            as server:
        mem = memory_with(home, server)
        result = mem.write_session("s")
    assert result.failure is None
    assert marks(mem) == {"u1", "a1", "u2"}
    assert result.changed_files == ["topics/habits.md"]
    text = topics_tree(mem)["habits.md"]
    assert "green tea" in text and "Lisbon offsite" in text
    assert re.search(r" \^[0-9a-f]{8}$", text, re.M), "the runtime gave the block its id"
    assert "[^e1]" not in text and "sources/openprogram" in text  # ids and links normalised
    runs = history(mem)
    assert len(runs) == 1 and runs[0]["outcome"] == "finished"
    assert runs[0]["refs"] == ["openprogram/s/u1", "openprogram/s/a1", "openprogram/s/u2"]
    assert runs[0]["tool_calls"] == [{"round": 1, "tool": "write", "status": "ok"}]


def test_a_footnote_listing_a_bare_source_handle_is_normalised_into_a_link_not_rejected(
        home, key):
    with ScriptedServer([writes_topic(bare=True), final()]) as server:
        mem = memory_with(home, server)
        result = mem.write_session("s")
    assert result.failure is None and marks(mem) == {"u1", "a1", "u2"}
    text = topics_tree(mem)["habits.md"]
    links = re.findall(r"Sources: \[source\]\(\.\./sources/openprogram/_v2/s\.md#"
                       r"source-[0-9a-f]{16}\)$", text, re.M)
    assert len(links) == 3, text
    assert "Sources: openprogram/" not in text


def test_a_bare_handle_that_is_not_evidence_of_the_batch_is_still_rejected(home, key):
    foreign = "openprogram/other-session/n1"
    with ScriptedServer([writes_topic(cite=foreign, bare=True), final(),
                         writes_topic(cite=foreign, bare=True), final()]) as server:
        mem = memory_with(home, server)
        result = mem.write_session("s")
    assert result.failure is not None and result.failure.reason_code == "COMMIT_REJECTED"
    assert marks(mem) == set() and topics_tree(mem) == {}


def test_a_run_that_edits_nothing_is_no_progress_and_marks_nothing(home, key):
    with ScriptedServer([reply(tool_call("glob", pattern="**/*.md")),
                         final("Nothing worth remembering.")]) as server:
        mem = memory_with(home, server)
        result = mem.write_session("s")
    assert result.failure is not None
    assert (result.failure.reason_code, result.failure.retryable) == ("WRITER_NO_PROGRESS",
                                                                      False)
    assert "Nothing worth remembering." in result.failure.message
    assert marks(mem) == set() and topics_tree(mem) == {}


def test_a_model_that_keeps_making_a_rejected_edit_gets_one_repair_run_then_commit_rejected(
        home, key):
    foreign = "openprogram/other-session/n1"  # not evidence of this batch
    with ScriptedServer([writes_topic(cite=foreign), final(),
                         writes_topic(cite=foreign), final()]) as server:
        mem = memory_with(home, server)
        result = mem.write_session("s")
        prompts = [next(m["content"] for m in body["messages"] if m["role"] == "user")
                   for body in server.requests]
        assert server.remaining == 0
    assert result.failure is not None
    assert (result.failure.reason_code, result.failure.retryable) == ("COMMIT_REJECTED", False)
    assert marks(mem) == set() and topics_tree(mem) == {}
    assert not prompts[0].startswith("Your previous edits were rejected")
    assert prompts[2].startswith("Your previous edits were rejected and discarded:")
    assert foreign in prompts[2].split("\n", 1)[0]  # the rejection names the bad ref
    assert "Guidance: cite only the refs listed in this batch" in prompts[2]
    assert "## Observed" in prompts[2]
    assert [run["repair"] for run in history(mem)] == [False, True]


def test_a_repair_run_that_fixes_the_edit_is_installed_and_marked(home, key):
    with ScriptedServer([writes_topic(cite="openprogram/other-session/n1"), final(),
                         writes_topic(), final()]) as server:
        mem = memory_with(home, server)
        result = mem.write_session("s")
    assert result.failure is None and marks(mem) == {"u1", "a1", "u2"}
    assert list(topics_tree(mem)) == ["habits.md"]


def test_a_run_that_tries_dotdot_and_sources_is_refused_and_nothing_outside_topics_changes(
        home, key):
    def attack(body):
        return reply(tool_call("write", path="../../../pwned.md", content="x"),
                     tool_call("write", path="/tmp/scriptorium-pwned.md", content="x"),
                     tool_call("write", path="sources/openprogram/_v2/s.md", content="x"),
                     tool_call("edit", path="sources/openprogram/_v2/s.md", old_string="s",
                               new_string="x", replace_all=True),
                     tool_call("write", path="core.md", content="x"))

    with ScriptedServer([attack, final("Could not write.")]) as server:
        mem = memory_with(home, server)
        before = snapshot(home, skip=("sessions/",))
        result = mem.write_session("s")
        tool_results = [m["content"] for m in server.requests[1]["messages"]
                        if m["role"] == "tool"]
    assert len(tool_results) == 5 and all(r.startswith("Error:") for r in tool_results)
    assert result.failure is not None and result.failure.reason_code == "WRITER_NO_PROGRESS"
    assert marks(mem) == set()
    after = snapshot(home, skip=("sessions/",))
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    # Only the runtime's own bookkeeping and the archived evidence of this batch may change.
    assert all(k.startswith(("memory/.scriptorium", "memory/.git/", "memory/sources/"))
               for k in changed), changed
    assert not Path("/tmp/scriptorium-pwned.md").exists()
    assert not (home.parent / "pwned.md").exists() and not (home / "pwned.md").exists()
    archive = (home / "memory" / "sources" / "openprogram" / "_v2" / "s.md").read_text()
    assert "green tea" in archive and archive.strip() != "x"


@pytest.mark.parametrize("step, code, retryable", [
    (delay(30), "MODEL_TIMEOUT", True),
    (error(429, "slow down"), "MODEL_RATE_LIMIT", True),
    (error(500, "internal"), "MODEL_PROVIDER_INTERNAL", True),
    (error(401, "invalid api key"), "MODEL_AUTHENTICATION", False),
])
def test_endpoint_failures_end_classified_and_mark_nothing(home, key, step, code, retryable):
    with ScriptedServer([writes_topic(), step]) as server:
        mem = memory_with(home, server, timeout_seconds=0.5)
        result = mem.write_session("s")
    assert result.failure is not None
    assert (result.failure.reason_code, result.failure.retryable) == (code, retryable)
    assert marks(mem) == set() and topics_tree(mem) == {}
    assert history(mem)[-1]["outcome"] == code


def test_a_missing_key_fails_classified_without_calling_the_endpoint(home, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with ScriptedServer([writes_topic(), final()]) as server:
        mem = memory_with(home, server)
        result = mem.write_session("s")
        assert server.requests == []
    assert result.failure is not None
    assert (result.failure.reason_code, result.failure.retryable) == ("MODEL_AUTHENTICATION",
                                                                      False)
    assert KEY_ENV in result.failure.message and marks(mem) == set()


def test_an_unreachable_endpoint_fails_retryable_and_marks_nothing(home, key):
    with socket.socket() as sock:  # a port nobody listens on once this socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    writer = LLMWriter(base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key_env=KEY_ENV,
                       timeout_seconds=5)
    mem = Memory(home, settings=load_settings(home), writer=writer)
    mem.store.create_session("s")
    mem.store.append_message("s", {"id": "u1", "role": "user", "content": "remember tea"})
    result = mem.write_session("s")
    assert result.failure is not None
    assert (result.failure.reason_code, result.failure.retryable) == ("MODEL_TRANSPORT", True)
    assert marks(mem) == set()


# -- the CLI -------------------------------------------------------------------------------


def configure(home: Path, base_url: str) -> None:
    (home / "config.toml").write_text(
        f'[writer.llm]\nbase_url = "{base_url}"\nmodel = "stub-model"\n'
        f'api_key_env = "{KEY_ENV}"\nmax_turns = 5\ntimeout_seconds = 5\n')


def test_memory_write_force_writer_llm_works_from_the_cli(home, cli, key):
    cli.json("session", "new", "--id", "s", "--title", "Evening habits")
    for node_id, role, text in TURNS:
        cli.json("session", "add", "s", "--role", role, "--text", text, "--id", node_id)
    with ScriptedServer([writes_topic(), final()]) as server:
        configure(home, server.base_url)
        out = cli.json("memory", "write", "s", "--force", "--writer", "llm")
        assert len(server.requests) == 2
    row = out["sessions"][0]
    assert row["failure"] is None and row["marked"] == ["u1", "a1", "u2"]
    shown = cli.json("session", "show", "s")["messages"]
    assert all(m.get(MARK_KEY) == out["workspace_id"] for m in shown)


def test_the_cli_reports_a_missing_key_as_a_failed_session(home, cli, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    cli.json("session", "new", "--id", "s")
    cli.json("session", "add", "s", "--role", "user", "--text", "remember the tea")
    with ScriptedServer([]) as server:
        configure(home, server.base_url)
        result = cli("memory", "write", "s", "--force", "--writer", "llm", "--json")
        assert server.requests == []
    assert result.exit_code == 1
    failure = json.loads(result.stdout)["sessions"][0]["failure"]
    assert failure["reason_code"] == "MODEL_AUTHENTICATION" and failure["retryable"] is False


def test_the_cli_takes_the_endpoint_from_the_environment(home, cli, key, monkeypatch):
    cli.json("session", "new", "--id", "s")
    for node_id, role, text in TURNS:
        cli.json("session", "add", "s", "--role", role, "--text", text, "--id", node_id)
    with ScriptedServer([writes_topic(), final()]) as server:
        monkeypatch.setenv("SCRIPTORIUM_WRITER_KIND", "llm")
        monkeypatch.setenv("SCRIPTORIUM_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("SCRIPTORIUM_LLM_MODEL", "env-model")
        monkeypatch.setenv("SCRIPTORIUM_LLM_API_KEY_ENV", KEY_ENV)
        out = cli.json("memory", "write", "s", "--force")
        assert [body["model"] for body in server.requests] == ["env-model", "env-model"]
    assert out["sessions"][0]["marked"] == ["u1", "a1", "u2"]


def test_flags_override_the_config_file_for_the_endpoint_and_model(home, cli, key):
    cli.json("session", "new", "--id", "s")
    for node_id, role, text in TURNS:
        cli.json("session", "add", "s", "--role", role, "--text", text, "--id", node_id)
    with ScriptedServer([writes_topic(), final()]) as server:
        configure(home, "http://127.0.0.1:9/v1")  # a dead endpoint in the file
        out = cli.json("memory", "write", "s", "--force", "--writer", "llm",
                       "--llm-base-url", server.base_url, "--llm-model", "flag-model")
        assert [body["model"] for body in server.requests] == ["flag-model", "flag-model"]
    assert out["sessions"][0]["marked"] == ["u1", "a1", "u2"]
