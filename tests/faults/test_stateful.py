"""A hypothesis state machine over the whole system: any interleaving of append, retry, edit,
rewind, spawn, compaction, per-turn write, forced write and crash (faults.HOOK raising at a
named step during a write, then Memory reopened, as a restarted process would) keeps the
marks a prefix of every live branch, and ends, after a final forced write, with every eligible
turn of every live branch marked for this workspace and cited; when no crash happened, every
such turn was handed to the writer exactly once.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from testkit import examples

from scriptorium import faults
from scriptorium.config import load_settings
from scriptorium.memory.citations import citation_map
from scriptorium.memory.verify import verify
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore

from faultkit import STEPS, written_twice

SESSIONS = ("alpha", "beta")
WORDS = ("deploy budget hotel flight backup replica invoice agenda keynote dinner ticket "
         "museum report review latency release canary schema search citation").split()


class SimulatedCrash(BaseException):
    """Not an Exception: nothing on the write path may catch it, as nothing catches SIGKILL."""


class CountingWriter(EmbeddedWriter):
    """The embedded writer, counting how often each turn is handed to it."""

    def __init__(self) -> None:
        self.handed: Counter = Counter()

    def write(self, request):
        self.handed.update(r.source_id for r in request.batch)
        return super().write(request)


def pick(items: list, index: int):
    return items[index % len(items)] if items else None


class MemoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="scriptorium-model-"))
        self.home = self.dir / "home"
        self.writer = CountingWriter()
        self.crashes = 0
        self.counter = 0
        self.mem = self._open()

    def _open(self, trigger: int = 24) -> Memory:
        """A fresh Memory, as a restarted process gets (Workspace.open recovers installs)."""
        return Memory(self.home, settings=load_settings(self.home, {"trigger_tokens": trigger}),
                      writer=self.writer, store=SessionStore(self.home / "sessions", git=False))

    @property
    def store(self) -> SessionStore:
        return self.mem.store

    def _id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _text(self, seed: int) -> str:
        return " ".join(WORDS[(seed * 7 + k * 3) % len(WORDS)] for k in range(3 + seed % 9))

    def _branch(self, sid: str) -> list[dict]:
        return self.store.get_branch(sid)

    @initialize()
    def sessions(self) -> None:
        for sid in SESSIONS:
            self.store.create_session(sid, title=f"Project {sid}")

    # -- the conversation -------------------------------------------------------------------

    @rule(sid=st.sampled_from(SESSIONS), seed=st.integers(0, 50))
    def append(self, sid: str, seed: int) -> None:
        self.store.append_message(sid, {"id": self._id("u"), "role": "user",
                                        "content": self._text(seed)})
        self.store.append_message(sid, {"id": self._id("a"), "role": "assistant",
                                        "content": self._text(seed + 1)})

    def retry(self, sid: str, index: int, seed: int) -> None:
        reply = pick([m for m in self._branch(sid) if m["role"] == "assistant"
                      and not m.get("caller")], index)
        if reply:
            self.store.retry(sid, reply["id"], self._text(seed), node_id=self._id("r"))

    def edit(self, sid: str, index: int, seed: int) -> None:
        user = pick([m for m in self._branch(sid) if m["role"] == "user"
                     and not m.get("caller") and not m.get("spawn_branch_root")], index)
        if user:
            self.store.edit(sid, user["id"], self._text(seed), node_id=self._id("e"))

    def rewind(self, sid: str, index: int) -> None:
        turns = [m for m in self._branch(sid) if not m.get("caller")]
        if len(turns) >= 2:
            self.store.rewind(sid, turns[-1 - index % 2]["id"])

    def spawn(self, sid: str, index: int, seed: int, replies: int) -> None:
        caller = pick(self._branch(sid), index)
        if not caller:
            return
        prev = self.store.spawn(sid, caller["id"], self._text(seed), node_id=self._id("s"))
        for k in range(replies):
            nid = self._id("sa")
            self.store.append_message(sid, {"id": nid, "role": "assistant", "predecessor": prev,
                                            "content": self._text(seed + k + 1)})
            prev = nid

    def compaction(self, sid: str, index: int, length: int) -> None:
        turns = [m for m in self._branch(sid) if not m.get("caller")
                 and not m.get("spawn_branch_root")]
        if len(turns) < length:
            return
        start = index % (len(turns) - length + 1)
        segment = turns[start:start + length]
        if all(b["predecessor"] == a["id"] for a, b in zip(segment, segment[1:])):
            self.store.compact(sid, [m["id"] for m in segment], "summary",
                               node_id=f"summary_{self._id('c')}")

    def switch(self, sid: str, index: int) -> None:
        tip = pick([r["tip"] for r in self.store.list_branches(sid)], index)
        if tip:
            self.store.set_head(sid, tip)

    @rule(kind=st.sampled_from(["retry", "edit", "rewind", "spawn", "compaction", "switch"]),
          sid=st.sampled_from(SESSIONS), index=st.integers(0, 99), seed=st.integers(0, 50),
          size=st.integers(0, 3))
    def reshape(self, kind: str, sid: str, index: int, seed: int, size: int) -> None:
        """One fork-shaped operation (one rule for all of them, so that appends, writes and
        crashes are drawn as often as reshapes together)."""
        if kind in ("retry", "edit"):
            getattr(self, kind)(sid, index, seed)
        elif kind == "spawn":
            self.spawn(sid, index, seed, size % 3)
        elif kind == "compaction":
            self.compaction(sid, index, 2 + size % 2)
        else:
            getattr(self, kind)(sid, index)

    # -- memory -------------------------------------------------------------------------------

    @rule(sid=st.sampled_from(SESSIONS))
    def write(self, sid: str) -> None:
        assert self.mem.write_turn(sid).failure is None

    @rule(sid=st.sampled_from(SESSIONS))
    def forced_write(self, sid: str) -> None:
        assert self.mem.write_session(sid).failure is None

    @rule(sid=st.sampled_from(SESSIONS), step=st.sampled_from(STEPS), nth=st.integers(1, 3),
          forced=st.sampled_from([True, True, False]))
    def crash(self, sid: str, step: str, nth: int, forced: bool) -> None:
        seen = [0]

        def hook(name: str) -> None:
            if name == step:
                seen[0] += 1
                if seen[0] == nth:
                    raise SimulatedCrash(step)

        faults.HOOK = hook
        try:
            (self.mem.write_session if forced else self.mem.write_turn)(sid)
        except SimulatedCrash:
            self.crashes += 1
            self.mem = self._open()  # the restart
        finally:
            faults.HOOK = None

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def marks_form_a_prefix_of_every_live_branch(self) -> None:
        report = verify(self.mem)
        assert not [p for p in report.problems if p.kind in ("gap", "marked_not_archived")], \
            [p.to_dict() for p in report.problems]

    def teardown(self) -> None:
        try:
            mem = self._open(trigger=1)
            for sid in SESSIONS:
                assert mem.write_session(sid).failure is None
            cited = citation_map(mem.workspace)
            eligible: set[str] = set()
            for sid in SESSIONS:
                for tip in mem.live_tips(sid):
                    if tip is None:
                        continue
                    for rec in mem.branch_records(sid, tip):
                        eligible.add(rec.source_id)
                        assert rec.marked_for(mem.workspace_id), f"{rec.source_id} unmarked"
                        assert rec.source_id in cited, f"{rec.source_id} marked, never cited"
            # no turn written twice (two blocks saying the same thing from it; a fact and the
            # current-state line summing it up both cite their turn)
            assert written_twice(mem.workspace) == [], "a turn cited twice"
            if self.crashes == 0:
                assert all(self.writer.handed[ref] == 1 for ref in eligible), \
                    {ref: self.writer.handed[ref] for ref in eligible if self.writer.handed[ref] != 1}
                assert max(self.writer.handed.values(), default=1) == 1
            assert verify(mem).problems == []
        finally:
            faults.HOOK = None
            shutil.rmtree(self.dir, ignore_errors=True)


MemoryMachine.TestCase.settings = settings(
    max_examples=examples(50), stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_any_interleaving_with_crashes_ends_with_every_live_turn_marked_once = pytest.mark.slow(
    MemoryMachine.TestCase)
