"""Homes for the view tests, built and written through the real store and write path, and the
headless Chromium they are looked at with.

``branching_home``: the demo conversation (a retried reply, an edited earlier message, a
sub-agent), plus a tool row, a runtime notice, a compaction summary and a long linear run,
written to memory by the session-boundary write; a second session whose write failed for good
(recorded by the idle watcher).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from scriptorium.config import load_settings
from scriptorium.demo import SESSION, build_session
from scriptorium.memory.watcher import IdleWatcher
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
FAILED = "broken-deploys"
LONG_RUN = 30  # turns in the linear run after the head (collapses into one segment)
DEMO_TRIGGER_TOKENS = 24  # small batches, so the page shows several written steps
REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "benchmarks" / "out"


class FailingWriter(EmbeddedWriter):
    """A writer whose precondition never holds: a non-retryable failure."""

    def write(self, request):
        raise ValueError("the topic template is missing (test writer)")


def branching_home(home: Path) -> dict[str, Any]:
    """Build and write the home; return the names and the Memory it was written with."""
    settings = load_settings(home, {"trigger_tokens": DEMO_TRIGGER_TOKENS})
    store = SessionStore(home / "sessions", git=False)  # per-turn git commits: not under test
    memory = Memory(home, settings=settings, store=store)
    names = build_session(store)
    names["tool-1"] = store.append_message(SESSION, {
        "id": "tool-1", "role": "tool", "caller": "a4", "name": "calendar",
        "content": "held: Alfama Grand meeting room, 14 seats, until Friday"})
    names["notice-1"] = store.append_message(SESSION, {
        "id": "notice-1", "role": "user", "display": "runtime",
        "content": "[runtime] the sub-agent finished"})
    previous = "notice-1"
    for i in range(LONG_RUN):
        role = "user" if i % 2 == 0 else "assistant"
        node = f"run-{i:02d}"
        text = (f"Agenda item {i // 2 + 1}: session on topic {i // 2 + 1}" if role == "user"
                else f"Booked a slot for agenda item {i // 2 + 1}.")
        store.append_message(SESSION, {"id": node, "role": role, "content": text})
        previous = node
    names["run-last"] = previous
    names["summary"] = store.compact(SESSION, ["u1", "a1"], "Lisbon, first week of May.",
                                     node_id="summary_lisbon")
    memory.write_session(SESSION)

    failing = Memory(home, settings=settings, writer=FailingWriter(), store=store)
    failing.store.create_session(FAILED, title="Deploy notes")
    failing.store.append_message(FAILED, {"id": "d1", "role": "user",
                                          "content": "Deploys go out on Tuesdays."})
    failing.store.append_message(FAILED, {"id": "d2", "role": "assistant",
                                          "content": "Noted: Tuesday deploys."})
    report = IdleWatcher(failing, idle_seconds=0).run_once(now=2e10)
    assert [t["session_id"] for t in report.terminal] == [FAILED], report.to_dict()
    # after the watcher pass, so only the failing session carries a recorded failure
    store.append_message(SESSION, {"id": "late-q", "role": "user",
                                   "content": "Can we add a boat trip on the Tagus?"})
    names["late-q"] = "late-q"
    return {"memory": memory, "names": names}


def launch_browser(playwright_module: Any):
    """Headless Chromium from the system package (never `playwright install`)."""
    return playwright_module.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def require_chromium() -> None:
    """Skip (locally) or fail (CI=true) when the browser or its driver is missing."""
    problem = None
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        problem = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the playwright package is missing (pip install -e '.[dev]')"
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"browser tests cannot run in CI: {problem}")
    pytest.skip(f"browser tests skipped: {problem}")


def long_session(home: Path, turns: int, fork_every: int = 100) -> str:
    """A ``turns``-turn session written straight to disk (appending one by one would test the
    append path), with a retried reply every ``fork_every`` turns; nothing written to memory."""
    import json

    sid = "long"
    hist = home / "sessions" / sid / "history"
    hist.mkdir(parents=True)
    seq, prev = 0, "ROOT"

    def put(role: str, text: str, pred: str, **md: Any) -> str:
        nonlocal seq
        node_id = f"t{seq}"
        node = {"id": node_id, "created_at": 1_700_000_000.0 + seq, "seq": seq, "role": role,
                "name": "", "input": None, "output": text, "caller": "", "predecessor": pred,
                "reads": [], "metadata": md}
        (hist / f"{seq:08d}-{role[0]}-{node_id}.json").write_text(json.dumps(node))
        seq += 1
        return node_id

    for i in range(turns):
        role = "user" if i % 2 == 0 else "llm"
        node_id = put(role, f"turn {i} about deploy window {i % 17}", prev)
        if role == "llm" and i % fork_every == 1:
            put("llm", f"retried turn {i}", prev, forked_from=node_id)
        prev = node_id
    (home / "sessions" / sid / "meta.json").write_text(json.dumps(
        {"id": sid, "title": "Long", "head_id": prev, "created_at": 1.0, "updated_at": 2.0}))
    return sid
