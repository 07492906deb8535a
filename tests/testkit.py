"""Helpers shared by test modules (import as ``from testkit import …``).

Kept out of conftest.py because several conftest modules exist and only one can be imported
under that name.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Iterator

from click.testing import CliRunner

from scriptorium.memory.workspace import Workspace
from scriptorium.memory.writers.embedded import EmbeddedWriter

DATA = Path(__file__).parent / "data"
CI_MAX_EXAMPLES = 25


def hypothesis_profile() -> str:
    """``ci`` when CI=true (or HYPOTHESIS_PROFILE=ci), else ``dev`` (see conftest.py)."""
    return os.environ.get("HYPOTHESIS_PROFILE") or (
        "ci" if os.environ.get("CI", "").lower() == "true" else "dev")


def examples(n: int) -> int:
    """``n`` Hypothesis examples, capped under the CI profile (an explicit ``max_examples``
    in ``@settings`` wins over the loaded profile, so tests that ask for more say it here)."""
    return min(n, CI_MAX_EXAMPLES) if hypothesis_profile() == "ci" else n
OPENPROGRAM_STATE = DATA / "openprogram-state"


class RecordingWriter(EmbeddedWriter):
    """The embedded writer, remembering every batch (``calls``) and turn (``seen``) it was
    handed."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.seen: list[str] = []

    def write(self, request):
        refs = [r.source_id for r in request.batch]
        self.calls.append(refs)
        self.seen.extend(refs)
        return super().write(request)


class RaisingWriter:
    """A writer that raises ``exc`` (a crashed model, a bad precondition)."""

    name = "raising"
    repair_attempts = 0

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def write(self, request):
        raise self.exc


class RejectedWriter:
    """A writer whose edit the transaction rejects (a claim with no citation)."""

    name = "rejected"
    repair_attempts = 0

    def write(self, request):
        (request.topics_dir / "bad.md").write_text("A claim with no citation at all.\n")


class IdleWriter:
    """A writer that changes nothing and says why."""

    name = "idle"
    repair_attempts = 0

    def write(self, request):
        from scriptorium.memory.writers import WriterAudit

        return WriterAudit(writer=self.name, summary="spent every turn on a rejected edit")


@contextlib.contextmanager
def workspace_lock_held(root: Path) -> Iterator[None]:
    """Hold the workspace write lock at ``root`` from another thread while the block runs
    (the lock is re-entrant per thread, so the test's own thread could not be the holder)."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with Workspace.open(root).lock(timeout=1):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10), "the lock holder never got the lock"
        yield
    finally:
        release.set()
        thread.join()


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


def json_error(result) -> dict:
    """The error document a failed ``--json`` command printed: stdout is exactly
    ``{"error": {"code", "message", "retryable"}}``, plus ``details`` for some errors (and
    stderr one line)."""
    doc = json.loads(result.stdout)
    assert list(doc) == ["error"]
    assert set(doc["error"]) - {"details"} == {"code", "message", "retryable"}  # details: optional
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    return doc["error"]
