"""A batch taken before a repair must not be marked after it: the write step re-checks, under
the workspace lock, that marking the batch strands no unwritten turn before it."""

from __future__ import annotations

from scriptorium.memory.records import MARK_KEY, first_batch
from scriptorium.memory.verify import verify
from scriptorium.memory.writers.embedded import EmbeddedWriter


def build(homes):
    mem = homes.open(EmbeddedWriter(), trigger_tokens=1)
    mem.store.create_session("s", title="Planning")
    prev = None
    for i in range(6):
        msg = {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
               "content": f"turn m{i} about the plan number {i}"}
        if prev:
            msg["predecessor"] = prev
        mem.store.append_message("s", msg)
        prev = f"m{i}"
    assert mem.write_session("s").failure is None
    return mem


def test_a_batch_taken_before_a_repair_is_refused_retryably_instead_of_opening_a_gap(homes):
    mem = build(homes)
    mem.store.merge_node_metadata_batch("s", {"m2": {MARK_KEY: None}})  # a lost mark
    mem.store.append_message("s", {"id": "m6", "role": "user", "content": "one more thing"})
    batch = first_batch(mem.pending("s"), 10_000)  # a writer takes [m6] ...
    assert [r.node_id for r in batch] == ["m6"]
    assert verify(mem, repair=True).ok  # ... a repair takes m2..m5 back meanwhile ...
    step = mem.write_batch("s", batch, "m6")  # ... and the writer goes on with [m6]
    assert step.failure is not None and step.failure.reason_code == "STALE_BATCH"
    assert step.failure.retryable and step.marked == []
    assert verify(mem).ok, "the stale batch opened a gap"
    assert mem.write_session("s").failure is None  # the next write takes m2..m6 in order
    assert mem.pending("s") == [] and verify(mem).problems == []


def test_a_redo_of_a_batch_that_is_already_marked_still_goes_through(homes):
    mem = build(homes)
    batch = mem.branch_records("s")[:2]
    step = mem.write_batch("s", batch)
    assert step.failure is None and step.marked == ["m0", "m1"]


def test_a_gap_deeper_in_the_branch_does_not_hold_later_writes_back(homes):
    mem = build(homes)
    mem.store.merge_node_metadata_batch("s", {"m2": {MARK_KEY: None}})  # a lost mark, no repair
    mem.store.append_message("s", {"id": "m6", "role": "user", "content": "one more thing"})
    result = mem.write_session("s")
    assert result.failure is None and result.marked == ["m6"]
    problems = verify(mem).problems
    assert [(p.kind, p.node_id) for p in problems if p.kind == "gap"] == [("gap", "m2")]
