"""What a memory worker's mirror holds of the topics: only what its own jobs touch.

A worker's write step (``memory work`` with the embedded writer, which reaches an existing
topic only through the catalog) takes the topics other workers installed as the summaries
their installs stored, and leaves the files themselves in the database: its mirror, its
stage and its fetches follow its own batches, not how much the other workers wrote. When the
catalog finds such a topic for the writer (the batch's subject is another worker's topic),
that one file is fetched and the batch is written again on a fresh stage, appending to the
topic instead of starting it afresh. Outside a write step (verify) the mirror completes."""

from __future__ import annotations

import pytest

from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.work import MemoryJobs
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.postgres.jobs import Job
from test_pg_concurrent_installs import (  # noqa: F401 (homes: a fixture)
    VENUE, db_files, homes, mirror_files, say)


def work(mem, jobs: MemoryJobs, sid: str):
    """Run ``sid``'s session-boundary job as a worker does."""
    with mem.workspace.pg.connection() as conn:
        seq = conn.execute("SELECT last_seq FROM work_queue WHERE session_id = %s",
                           (sid,)).fetchone()[0]
    outcome = jobs(Job(sid, int(seq), boundary=True))
    assert outcome.failure is None
    return outcome


@pytest.mark.parametrize("others", [1, 4])
def test_a_write_step_fetches_only_the_topic_files_its_batch_touches_however_many_others_wrote(
        homes, others):
    first = homes.open(trigger_tokens=1)
    worker = homes.open(trigger_tokens=1)  # its mirror is older than everything below
    jobs = MemoryJobs(worker)
    for k in range(others):
        say(first, f"a{k}", f"Venue {k}", f"{VENUE} Hall {k}.")
        assert first.write_session(f"a{k}").failure is None
    say(worker, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    fetched = worker.workspace.fetched_topics
    work(worker, jobs, "b")
    [own] = mirror_files(worker, "topics")  # its own topic, none of the others'
    assert worker.workspace.fetched_topics == fetched  # not one file of the others' fetched
    rows = db_files(worker, "topics", live_only=True)
    assert len(rows) == others + 1 and own in rows
    # nor their summaries: its catalog holds its own topic; it asks the database the rest
    catalog = TopicCatalog.of(worker.workspace)
    assert catalog.shared == 0 and catalog.paths() == [own]
    # a reader outside a write step sees the whole tree: the mirror completes
    assert worker.verify().ok
    assert mirror_files(worker, "topics") == db_files(worker, "topics", live_only=True)


def test_a_batch_whose_subject_is_another_workers_topic_fetches_that_file_and_appends_to_it(
        homes):
    first = homes.open(trigger_tokens=1)
    worker = homes.open(trigger_tokens=1)
    jobs = MemoryJobs(worker)
    say(first, "a0", "Venue", VENUE)
    say(first, "a1", "Budget", "The budget was raised to 60 thousand euros on Monday.")
    for sid in ("a0", "a1"):
        assert first.write_session(sid).failure is None
    say(worker, "b", "Venue", "Lunch is vegetarian; the caterer confirms on Friday.")
    fetched = worker.workspace.fetched_topics
    outcome = work(worker, jobs, "b")
    assert outcome.detail["marked"] == ["b-0"]
    [venue] = mirror_files(worker, "topics")  # that topic, not "Budget"
    assert outcome.detail["redos"] == 1  # written again once its stage held the topic
    assert worker.workspace.fetched_topics - fetched == 1
    rows = db_files(worker, "topics", live_only=True)
    assert venue in rows and len(rows) == 2
    text = (worker.workspace.root / venue).read_text(encoding="utf-8")
    assert "river hall" in text and "vegetarian" in text  # appended, nothing lost
    reader = homes.open()
    assert reader.pending("a0") == [] and reader.pending("b") == []
    assert reader.verify().ok


def test_a_worker_whose_writer_may_read_any_file_keeps_every_topic_in_its_mirror(homes):
    from scriptorium.memory.writers.base import finds_topics_by_catalog

    class ReadsItsStage(EmbeddedWriter):  # overrides write: its promise is not inherited
        def write(self, request):  # type: ignore[no-untyped-def]
            return super().write(request)

    first = homes.open(trigger_tokens=1)
    worker = homes.open(trigger_tokens=1)
    jobs = MemoryJobs(worker)
    assert worker.workspace.lazy_topics == finds_topics_by_catalog(worker.writer) is True
    worker.workspace.lazy_topics = False  # as for a writer that reads its stage freely
    say(first, "a", "Venue", VENUE)
    assert first.write_session("a").failure is None
    say(worker, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    work(worker, jobs, "b")
    assert mirror_files(worker, "topics") == db_files(worker, "topics", live_only=True)
    assert not finds_topics_by_catalog(object())
    assert not finds_topics_by_catalog(ReadsItsStage())


def test_a_batch_another_worker_installed_but_did_not_mark_is_not_written_twice(
        homes, monkeypatch):
    from scriptorium import faults

    first = homes.open(trigger_tokens=1)
    worker = homes.open(trigger_tokens=1)
    jobs = MemoryJobs(worker)
    say(first, "a", "Venue", VENUE)

    def dies_before_marking(step: str) -> None:
        if step == "before-mark":
            raise RuntimeError("killed between install and mark")

    monkeypatch.setattr(faults, "HOOK", dies_before_marking)
    assert first.write_session("a").failure is not None  # installed, never marked
    monkeypatch.setattr(faults, "HOOK", None)
    with first.workspace.pg.connection() as conn:
        revisions = conn.execute("SELECT count(*) FROM memory_revisions").fetchone()[0]
    fetched = worker.workspace.fetched_topics
    outcome = work(worker, jobs, "a")  # the redo, on a mirror that never held that topic
    assert outcome.detail["marked"] == ["a-0"]
    # the topic citing the batch was found in the database and fetched: nothing rewritten
    assert worker.workspace.fetched_topics - fetched == 1
    with first.workspace.pg.connection() as conn:
        assert conn.execute("SELECT count(*) FROM memory_revisions").fetchone()[0] == revisions
    reader = homes.open()
    assert reader.pending("a") == [] and reader.verify().ok


class LinksToAnotherTopic(EmbeddedWriter):
    """The embedded writer, except that its paragraph links a block of another topic."""

    declares_edits = True
    finds_topics_by_catalog = True  # reads no file beyond what the catalog names
    target = ""  # "venue.md#^<id>"

    def write(self, request):
        real = request.write_topic

        def linked(rel: str, text: str) -> None:
            real(rel, text.replace("Lunch is vegetarian",
                                   f"Lunch is vegetarian ([venue]({self.target}))", 1))

        object.__setattr__(request, "write_topic", linked)
        return super().write(request)


def test_a_block_link_to_a_topic_the_mirror_left_in_the_database_is_checked_against_it(homes):
    first = homes.open(trigger_tokens=1)
    writer = LinksToAnotherTopic()
    worker = homes.open(writer, trigger_tokens=1)
    jobs = MemoryJobs(worker)
    say(first, "a", "Venue", VENUE)
    assert first.write_session("a").failure is None
    [venue] = TopicCatalog.of(first.workspace).refresh().paths()
    block = TopicCatalog.of(first.workspace).summary(venue).blocks[0].id
    writer.target = f"{venue.removeprefix('topics/')}#^{block}"
    say(worker, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    outcome = work(worker, jobs, "b")  # not refused as a dangling link: the venue is fetched
    assert outcome.detail["redos"] == 1 and worker.workspace.fetched_topics >= 1
    assert venue in mirror_files(worker, "topics")
    reader = homes.open()
    assert reader.pending("b") == [] and reader.verify().ok
    assert any(rel != venue and "#^" + block in
               (reader.workspace.root / rel).read_text(encoding="utf-8")
               for rel in reader.workspace.topic_paths())


class CollidesThreeTimes(EmbeddedWriter):
    """The embedded writer, except that on each of its first three runs another writer
    installs into the same topic before this one commits (a topic many workers write)."""

    def __init__(self, others) -> None:
        super().__init__()
        self.others = list(others)

    def write(self, request):
        audit = super().write(request)
        if self.others:
            self.others.pop(0)()
        return audit


def test_a_job_whose_installs_collided_on_every_try_is_run_once_more_before_it_is_reported(
        homes):
    other = homes.open(trigger_tokens=1)
    for k in range(3):
        say(other, f"o{k}", "Venue", f"The caterer confirms lunch number {k} on Friday.")
    worker = homes.open(CollidesThreeTimes(
        [lambda k=k: other.write_session(f"o{k}") for k in range(3)]), trigger_tokens=1)
    say(worker, "a", "Venue", VENUE)
    outcome = work(worker, MemoryJobs(worker), "a")  # three refusals, then written at once
    assert outcome.detail["redos"] == 3 and outcome.detail["marked"] == ["a-0"]
    reader = homes.open()
    assert all(reader.pending(s) == [] for s in ("a", "o0", "o1", "o2"))
    assert reader.verify().ok
