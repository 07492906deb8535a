"""The llm writer's run has a deadline (issue 11, item 9).

The write path holds the workspace lock for a whole writer run, and each model request is
bounded by ``timeout_seconds``; a run of many slow requests could still hold the lock for
``max_turns`` request timeouts. ``[writer.llm] run_timeout_seconds`` (default five request
timeouts) bounds the run: no request waits past it, and a run that reaches it ends as a
retryable MODEL_TIMEOUT with nothing installed or marked.

The clock is pinned: the scripted server (127.0.0.1) moves it forward as each request
arrives, so nothing here depends on machine speed. The SDK states each request's timeout in
its ``x-stainless-read-timeout`` header, which the server records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from openai_stub import ScriptedServer, Step, final, reply, tool_call
from test_llm_writer_e2e import (  # noqa: F401 (key is a fixture)
    KEY_ENV, history, key, marks, memory_with, topics_tree, writes_topic,
)
from scriptorium.config import load_settings
from scriptorium.errors import ReasonCode
from scriptorium.memory.writers import WriteRequest
from scriptorium.memory.writers.llm import LLMWriter, ModelError
from scriptorium.memory.records import records
from scriptorium.memory.writing import Memory


class PinnedClock:
    """A monotonic clock that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def taking(clock: PinnedClock, seconds: float, step: Step | Callable) -> Callable:
    """A scripted answer that takes ``seconds`` on the pinned clock."""
    def answer(body: dict) -> Step:
        clock.now += seconds
        return step(body) if callable(step) else step
    return answer


def read_timeouts(server: ScriptedServer) -> list[float]:
    return [float(h["x-stainless-read-timeout"]) for h in server.headers]


GLOB = reply(tool_call("glob", pattern="**/*.md"))


def run_once(server: ScriptedServer, stage: Path, **kw) -> None:
    writer = LLMWriter(base_url=server.base_url, model="stub-model", api_key_env="", **kw)
    batch = records("s-1", [{"id": "n1", "role": "user", "content": "I prefer green tea."}])
    writer.write(WriteRequest(batch=batch, stage=stage, log_dir=stage.parent / "runtime"))


@pytest.fixture
def stage(tmp_path: Path) -> Path:
    (tmp_path / "stage" / "topics").mkdir(parents=True)
    return tmp_path / "stage"


def test_no_request_waits_past_the_run_deadline_and_the_run_stops_there(stage):
    clock = PinnedClock()
    with ScriptedServer([taking(clock, 40, GLOB)] * 3 + [final()]) as server:
        with pytest.raises(ModelError) as info:
            run_once(server, stage, timeout_seconds=60, run_timeout_seconds=100, clock=clock)
    err = info.value
    assert err.code == ReasonCode.MODEL_TIMEOUT and err.retryable
    assert "run_timeout_seconds" in err.message and "after 3 model request(s)" in err.message
    # requests at 0, 40 and 80 s: the third may wait only the 20 s left; no fourth is sent
    assert read_timeouts(server) == [60.0, 60.0, 20.0]
    assert len(server.requests) == 3


def test_the_default_deadline_is_five_request_timeouts(stage, tmp_path):
    clock = PinnedClock()
    with ScriptedServer([taking(clock, 22, GLOB)] * 3 + [final()]) as server:
        with pytest.raises(ModelError, match=r"deadline \(50 s"):
            run_once(server, stage, timeout_seconds=10, clock=clock)
    assert read_timeouts(server) == [10.0, 10.0, 6.0]
    (tmp_path / "config.toml").write_text("[writer.llm]\ntimeout_seconds = 10\n")
    assert LLMWriter.from_settings(load_settings(tmp_path, environ={})).run_deadline_seconds == 50
    (tmp_path / "config.toml").write_text("[writer.llm]\ntimeout_seconds = 10\n"
                                          "run_timeout_seconds = 90\n")
    assert LLMWriter.from_settings(load_settings(tmp_path, environ={})).run_deadline_seconds == 90
    env = {"SCRIPTORIUM_LLM_RUN_TIMEOUT_SECONDS": "30"}
    assert LLMWriter.from_settings(load_settings(tmp_path, environ=env)).run_deadline_seconds == 30


def test_a_request_cut_by_the_deadline_reports_the_deadline(stage):
    clock = PinnedClock()
    # the answer arrives "after" the deadline as an error: the run says why it really ended
    late = taking(clock, 150, Step(status=504, body={"error": {"message": "gateway"}}))
    with ScriptedServer([late]) as server:
        with pytest.raises(ModelError, match="reached its deadline") as info:
            run_once(server, stage, timeout_seconds=60, run_timeout_seconds=100, clock=clock)
    assert info.value.retryable


def test_a_run_past_its_deadline_installs_and_marks_nothing_and_frees_the_lock(home, key):
    clock = PinnedClock()
    # the model writes a topic into the stage, then dawdles past the deadline
    script = [taking(clock, 30, writes_topic()), taking(clock, 30, GLOB),
              taking(clock, 30, GLOB), final()]
    with ScriptedServer(script) as server:
        mem = memory_with(home, server, run_timeout_seconds=60, clock=clock)
        result = mem.write_session("s")
    assert result.failure is not None
    assert result.failure.reason_code == ReasonCode.MODEL_TIMEOUT and result.failure.retryable
    assert marks(mem) == set() and topics_tree(mem) == {}  # (the batch's evidence is archived)
    assert history(mem)[-1]["outcome"] == ReasonCode.MODEL_TIMEOUT
    # the lock is free and the turns are still owed: the next write takes them
    with ScriptedServer([writes_topic(), final()]) as server:
        mem = Memory(home, settings=load_settings(home), writer=LLMWriter(
            base_url=server.base_url, model="stub-model", api_key_env=KEY_ENV,
            timeout_seconds=5.0))
        assert mem.write_session("s").failure is None
    assert marks(mem) == {"u1", "a1", "u2"}


def test_a_repair_run_gets_only_what_the_first_run_left_of_the_deadline(home, key):
    clock = PinnedClock()
    foreign = "openprogram/other-session/n1"  # not evidence of the batch: the commit is refused
    # the first run spends 70 of its 100 s and is rejected; its repair run may wait 30 s only
    script = [taking(clock, 40, writes_topic(cite=foreign)), taking(clock, 30, final()),
              taking(clock, 20, GLOB), taking(clock, 20, GLOB), final()]
    with ScriptedServer(script) as server:
        mem = memory_with(home, server, timeout_seconds=60, run_timeout_seconds=100,
                          clock=clock)
        result = mem.write_session("s")
        timeouts = read_timeouts(server)
    assert result.failure is not None
    assert result.failure.reason_code == ReasonCode.MODEL_TIMEOUT and result.failure.retryable
    assert timeouts == [60.0, 60.0, 30.0, 10.0]  # one deadline for the job, repair included
    assert marks(mem) == set() and topics_tree(mem) == {}
