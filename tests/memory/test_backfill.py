"""Backfill: archived trusted sources no topic cites are written, batch by batch, from memory's
own files alone (memory reference §4.3)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from scriptorium.errors import ConcurrentUpdate, InvalidInput
from scriptorium.memory.backfill import Candidate, backfill, candidates, next_batch, to_record
from scriptorium.memory.citations import cited_sources
from scriptorium.memory.sources import Frame
from scriptorium.memory.workspace import Workspace
from scriptorium.memory.writers import WriteRequest
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory
from scriptorium.tokens import count_tokens
from testkit import workspace_lock_held, examples

from upgrade_support import legacy_text, tree_bytes, v2_text, write_legacy, write_v2


class RecordingWriter(EmbeddedWriter):
    """The embedded writer, remembering each batch and what its stage looked like."""

    def __init__(self, fail_on_call: int | None = None):
        self.calls: list[list[str]] = []
        self.stage_had_sources: list[bool] = []
        self.fail_on_call = fail_on_call

    def write(self, request: WriteRequest):
        self.calls.append([r.source_id for r in request.batch])
        self.stage_had_sources.append((request.stage / "sources").exists())
        assert request.purpose == "backfill"
        if self.fail_on_call == len(self.calls):
            raise RuntimeError("model went away")
        return super().write(request)

    @property
    def seen(self) -> list[str]:
        return [ref for call in self.calls for ref in call]


class CitingWriter:
    """Cites a fixed source whatever the batch is (an over-reaching model)."""

    name = "citing"
    repair_attempts = 0

    def __init__(self, ref: str):
        self.ref = ref
        self.calls = 0

    def write(self, request: WriteRequest):
        self.calls += 1
        topic = request.topics_dir / "stolen.md"
        topic.parent.mkdir(parents=True, exist_ok=True)
        topic.write_text(f"# Stolen\n\nA claim.[^e1]\n\n[^e1]: Time: `2026-01-02`; "
                         f"Sources: [claim]({self.ref})\n")


class IdleWriter:
    """Returns without editing anything."""

    name = "idle"
    repair_attempts = 0

    def __init__(self):
        self.calls = 0

    def write(self, request: WriteRequest):
        self.calls += 1


class ExplodingStore:
    """A session store that fails the test if anything touches it."""

    def __getattr__(self, name):
        raise AssertionError(f"backfill touched the session store ({name})")


def workspace_with_sources(root: Path) -> Workspace:
    """s: m1, m2 trusted + p1 pending (v2); old: l1, l2 legacy, l1 also in v2; t: c1 cited."""
    write_v2(root, "s", v2_text("s", [("m1", "the budget is fifty thousand euros"),
                                      ("m2", "flights stay under six hundred")]))
    pending = v2_text("q", [("p1", "an unpaired stranger said something")], trust="pending")
    write_v2(root, "q", pending)
    write_legacy(root, "old", legacy_text("old", [("l1", "we deploy on tuesdays"),
                                                  ("l2", "the database is postgres")]))
    write_v2(root, "old", v2_text("old", [("l1", "we deploy on tuesdays")]))
    write_v2(root, "t", v2_text("t", [("c1", "the venue is a palace")]))
    ws = Workspace.open(root)
    seed_citation(ws, "openprogram/t/c1")
    return ws


def seed_citation(ws: Workspace, ref: str) -> None:
    """Commit a topic citing ``ref`` through the normal write transaction."""
    frame = ws.sources.lookup(ref)
    with ws.begin(allowed_sources=[ref], purpose="write") as tx:
        EmbeddedWriter().write(WriteRequest(batch=[to_record(frame)], stage=tx.stage))
        assert tx.commit("seed").changed_files


ALL_UNCITED = {"openprogram/s/m1", "openprogram/s/m2", "openprogram/old/l1", "openprogram/old/l2"}


# -- what is a candidate ---------------------------------------------------------------------


def test_candidates_are_trusted_uncited_sources_once_each_in_file_order(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    found = candidates(ws)
    assert {c.source_id for c in found} == ALL_UNCITED
    assert len(found) == len(ALL_UNCITED)
    assert [c.frame.path for c in found] == sorted(c.frame.path for c in found)
    # the v2 copy of l1 wins over its legacy copy
    assert next(c for c in found if c.source_id.endswith("/l1")).frame.version == "v2"


def test_backfill_sends_only_uncited_trusted_sources_and_never_opens_the_session_store(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    writer = RecordingWriter()
    mem = Memory(tmp_path, store=ExplodingStore(), workspace=ws, writer=writer)
    report = mem.backfill()
    assert sorted(writer.seen) == sorted(ALL_UNCITED)
    assert (report.status, report.candidates, report.processed, report.remaining) == \
        ("ok", 4, 4, 0)
    assert cited_sources(ws) >= ALL_UNCITED | {"openprogram/t/c1"}
    assert "openprogram/q/p1" not in cited_sources(ws)
    assert report.revision == ws.revision()
    assert not (tmp_path / "sessions").exists()


def test_the_writer_stage_holds_no_sources_to_read_beyond_its_batch(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    writer = RecordingWriter()
    backfill(ws, writer, budget_tokens=1)
    assert writer.stage_had_sources and not any(writer.stage_had_sources)


def test_backfill_never_adds_or_removes_marks(legacy_home):
    sessions = tree_bytes(legacy_home / "sessions")
    ws = Workspace.open(legacy_home / "memory")
    report = backfill(ws, RecordingWriter())
    assert report.status == "ok" and report.processed == 8
    assert tree_bytes(legacy_home / "sessions") == sessions


def test_a_second_run_finds_nothing_and_leaves_the_revision_unchanged(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    first = backfill(ws, RecordingWriter())
    before = tree_bytes(tmp_path / "memory")
    writer = RecordingWriter()
    second = backfill(ws, writer)
    assert writer.calls == []
    assert (second.status, second.candidates, second.processed, second.remaining) == \
        ("ok", 0, 0, 0)
    assert second.revision == first.revision == ws.revision()
    derived = f"{ws.runtime_name}/topic-catalog.sqlite"  # a cache: may note what it checked
    assert {k: v for k, v in tree_bytes(tmp_path / "memory").items()
            if not k.startswith(derived)} == {k: v for k, v in before.items()
                                              if not k.startswith(derived)}


# -- batches ---------------------------------------------------------------------------------


def test_batches_are_greedy_prefixes_within_the_budget(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    order = [c.source_id for c in candidates(ws)]
    tokens = {c.source_id: c.tokens for c in candidates(ws)}
    budget = tokens[order[0]] + tokens[order[1]]
    writer = RecordingWriter()
    report = backfill(ws, writer, budget_tokens=budget)
    assert writer.seen == order  # in order, each once
    same_thread = order[0].split("/")[1] == order[1].split("/")[1]
    assert writer.calls[0] == (order[:2] if same_thread else order[:1])
    for call in writer.calls:
        assert len(call) == 1 or sum(tokens[r] for r in call) <= budget
        assert len({ref.split("/")[1] for ref in call}) == 1  # one conversation per batch
    assert report.batches == len(writer.calls) >= 2


def test_a_source_larger_than_the_budget_still_goes_alone(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    writer = RecordingWriter()
    report = backfill(ws, writer, budget_tokens=1)
    assert [len(call) for call in writer.calls] == [1, 1, 1, 1]
    assert report.status == "ok"


def test_item_tokens_count_the_whole_record_line(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    for c in candidates(ws):
        assert c.tokens == max(1, count_tokens(c.frame.text)) > count_tokens(c.frame.content)


def test_each_conversation_is_filed_under_its_own_subject_never_another_conversations(tmp_path):
    root = tmp_path / "memory"
    write_v2(root, "pg", v2_text("pg", [("p1", "Production PostgreSQL runs version 16"),
                                        ("p2", "PostgreSQL replicas lag under 5 seconds")]))
    write_v2(root, "lis", v2_text("lis", [("o1", "Lisbon offsite planning for the team"),
                                          ("o2", "The offsite budget is 4000 euros")]))
    ws = Workspace.open(root)
    writer = RecordingWriter()
    report = backfill(ws, writer, budget_tokens=10_000)  # room for everything in one batch
    assert report.status == "ok" and report.batches == 2
    topics = {p.relative_to(root / "topics").as_posix(): p.read_text()
              for p in (root / "topics").rglob("*.md")}
    assert len(topics) == 2
    lisbon = next(t for name, t in topics.items() if "lisbon" in name or "offsite" in name)
    postgres = next(t for name, t in topics.items() if "postgresql" in name)
    assert "4000 euros" in lisbon and "PostgreSQL" not in lisbon
    assert "4000" not in postgres and "replicas" in postgres


def _cand(n: int, tokens: int) -> Candidate:
    frame = Frame(source_id=f"openprogram/s/m{n}", anchor="", path="p", line=n, timestamp="",
                  label="user", content="x", speaker_id=None, meta=None, trusted=True,
                  version="v2")
    return Candidate(frame, tokens)


@settings(max_examples=examples(200), deadline=None)
@given(sizes=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=20),
       budget=st.integers(min_value=1, max_value=120))
def test_next_batch_is_the_longest_prefix_that_fits_and_never_empty(sizes, budget):
    items = [_cand(k, t) for k, t in enumerate(sizes)]
    batch = next_batch(items, budget)
    assert batch == items[: len(batch)] and len(batch) >= 1
    total = sum(c.tokens for c in batch)
    assert len(batch) == 1 or total <= budget
    if len(batch) < len(items):
        assert total + items[len(batch)].tokens > budget


def test_records_built_from_sources_keep_provider_thread_and_role(tmp_path):
    root = tmp_path / "memory"
    write_v2(root, "thr", v2_text("thr", [("a/b", "hi")], provider="claude-code"),
             provider="claude-code")
    ws = Workspace.open(root)
    (cand,) = candidates(ws)
    record = to_record(cand.frame)
    assert record.source_id == "claude-code/thr/a/b"
    assert (record.session_id, record.node_id, record.role, record.content) == \
        ("thr", "a/b", "user", "hi")
    assert record.timestamp == "2026-01-02T10:00:00+00:00"


# -- failures --------------------------------------------------------------------------------


def test_a_failed_batch_installs_nothing_and_a_rerun_resumes_at_the_first_uncited_source(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    order = [c.source_id for c in candidates(ws)]
    failing = RecordingWriter(fail_on_call=2)
    report = backfill(ws, failing, budget_tokens=1)
    assert report.status == "failed" and report.failure["message"].endswith("model went away")
    assert (report.processed, report.remaining, report.batches) == (1, 3, 1)
    cited = cited_sources(ws)
    assert order[0] in cited and not set(order[1:]) & cited
    assert report.revision == ws.revision()
    assert not list(ws.runtime_dir.glob("tx-*")), "a failed batch leaves no stage behind"
    retry = RecordingWriter()
    again = backfill(ws, retry, budget_tokens=1)
    assert retry.calls == [[ref] for ref in order[1:]]
    assert again.status == "ok" and again.remaining == 0


def test_a_writer_citing_a_source_outside_its_batch_is_rejected(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    order = [c.source_id for c in candidates(ws)]
    before = tree_bytes(ws.topics_dir)
    writer = CitingWriter(order[-1])  # a real, trusted, uncited source, but not in batch 1
    report = backfill(ws, writer, budget_tokens=1)
    assert report.status == "failed" and report.failure["reason_code"] == "NOT_EVIDENCE"
    assert writer.calls == 1 and report.remaining == 4
    assert tree_bytes(ws.topics_dir) == before


def test_a_writer_citing_a_pending_source_is_rejected(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    report = backfill(ws, CitingWriter("openprogram/q/p1"))
    assert report.status == "failed" and report.failure["reason_code"] == "NOT_EVIDENCE"
    assert "openprogram/q/p1" not in cited_sources(ws)


def test_a_batch_that_makes_no_progress_stops_the_run(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    writer = IdleWriter()
    report = backfill(ws, writer, budget_tokens=1)
    assert writer.calls == 1
    assert (report.status, report.processed, report.remaining) == ("incomplete", 0, 4)


def test_backfill_holds_the_workspace_lock_for_the_whole_run(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    outcomes: list[str] = []

    class Probe(RecordingWriter):
        def write(self, request):
            def other_thread():
                try:
                    with Workspace.open(ws.root).lock(timeout=0.05):
                        outcomes.append("acquired")
                except ConcurrentUpdate:
                    outcomes.append("busy")

            t = threading.Thread(target=other_thread)
            t.start()
            t.join()
            return super().write(request)

    backfill(ws, Probe(), budget_tokens=1)
    assert outcomes == ["busy"] * 4


def test_a_busy_workspace_refuses_to_start(tmp_path, monkeypatch):
    ws = workspace_with_sources(tmp_path / "memory")
    monkeypatch.setattr("scriptorium.memory.backfill.BACKFILL_LOCK_TIMEOUT", 0.1)
    writer = RecordingWriter()
    with workspace_lock_held(ws.root), pytest.raises(ConcurrentUpdate):
        backfill(ws, writer)
    assert writer.calls == []


def test_a_budget_below_one_token_is_refused(tmp_path):
    ws = Workspace.open(tmp_path / "memory")
    with pytest.raises(InvalidInput, match="budget"):
        backfill(ws, RecordingWriter(), budget_tokens=0)


def test_a_rejected_batch_earns_the_writers_repair_run_and_is_told_why(tmp_path):
    ws = workspace_with_sources(tmp_path / "memory")
    order = [c.source_id for c in candidates(ws)]

    class Repairing(RecordingWriter):
        repair_attempts = 1

        def __init__(self):
            super().__init__()
            self.rejections: list[str | None] = []

        def write(self, request):
            self.rejections.append(request.rejection)
            if request.rejection is None:  # first attempt over-reaches
                CitingWriter(order[-1]).write(request)
                return None
            return super().write(request)

    writer = Repairing()
    report = backfill(ws, writer, budget_tokens=1)
    assert report.status == "ok" and report.remaining == 0
    assert writer.rejections[1].startswith("NOT_EVIDENCE")
    # batches 1-3: a rejected try, then the repair; batch 4 is the cited source itself, so
    # its first try is legitimate evidence and is accepted
    assert [r is None for r in writer.rejections] == [True, False] * 3 + [True]
