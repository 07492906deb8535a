"""What opening a PostgreSQL home costs a worker: not the size of memory.

A worker that starts (or replaces one SIGKILLed mid-job) opens memory and runs its first
job. The open notes which topic files the database holds and fetches none of them, nor their
stored summaries; a worker whose writer finds topics through the catalog then fetches only
what its batches touch (:mod:`scriptorium.memory.pg_mirror`). A writer that may read any
file of its stage, or a reader outside a write step, still gets the whole tree."""

from __future__ import annotations

import pytest

from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.work import MemoryJobs
from test_pg_concurrent_installs import (  # noqa: F401 (homes: a fixture)
    VENUE, db_files, homes, mirror_files, say)
from test_pg_worker_topics import work


def fill(homes, topics: int) -> None:
    """``topics`` topic files in the home, each written (with its summary) by another
    process's memory."""
    other = homes.open(trigger_tokens=1)
    for k in range(topics):
        say(other, f"a{k}", f"Venue {k}", f"{VENUE} Hall {k}.")
        assert other.write_session(f"a{k}").failure is None
    assert len(db_files(other, "topics", live_only=True)) == topics


@pytest.mark.parametrize("topics", [1, 6])
def test_a_worker_opened_on_a_full_home_fetches_no_topic_nor_summary_beyond_its_jobs(
        homes, topics):
    from scriptorium.memory.pg_parts import PgBlockOrder

    fill(homes, topics)
    assembled: list[int] = []
    real = PgBlockOrder.file

    def counting(order, conn):
        assembled.append(1)
        return real(order, conn)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PgBlockOrder, "file", counting)
        # a replacement worker: memory is already there
        worker = homes.open(trigger_tokens=1)
    ws = worker.workspace
    jobs = MemoryJobs(worker)
    opened = (ws.fetched_topics, ws.fetched_summaries)
    say(worker, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    work(worker, jobs, "b")
    # the same, whatever the number of topics in the home: nothing of the others' topics,
    # nor the creation order of their blocks (the counters file a step never reads)
    assert opened == (0, 0) and assembled == []
    assert (ws.fetched_topics, ws.fetched_summaries) == (0, 0)
    [own] = mirror_files(worker, "topics")
    catalog = TopicCatalog.of(ws)
    assert catalog.shared == 0 and catalog.paths() == [own]
    # a reader outside a write step sees the whole tree
    assert worker.verify().ok
    assert mirror_files(worker, "topics") == db_files(worker, "topics", live_only=True)
    assert ws.fetched_topics == topics


def test_a_worker_opened_on_a_full_home_still_appends_to_the_topic_its_batch_names(homes):
    fill(homes, 3)
    worker = homes.open(trigger_tokens=1)
    say(worker, "b", "Venue 1", "Lunch is vegetarian; the caterer confirms on Friday.")
    outcome = work(worker, MemoryJobs(worker), "b")
    assert outcome.detail["marked"] == ["b-0"]
    [venue] = mirror_files(worker, "topics")  # that topic alone was fetched
    assert worker.workspace.fetched_topics == 1
    assert len(db_files(worker, "topics", live_only=True)) == 3
    text = (worker.workspace.root / venue).read_text(encoding="utf-8")
    assert "Hall 1" in text and "vegetarian" in text  # appended, nothing lost
    assert homes.open().verify().ok


@pytest.mark.parametrize("as_worker", [True, False])
def test_a_writer_that_may_read_any_file_has_every_topic_in_its_mirror_after_a_lazy_open(
        homes, as_worker):
    fill(homes, 3)
    mem = homes.open(trigger_tokens=1)
    say(mem, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    if as_worker:
        jobs = MemoryJobs(mem)
        mem.workspace.lazy_topics = False  # as for a writer that reads its stage freely
        work(mem, jobs, "b")
    else:  # `memory write`: no worker, whatever its writer
        assert mem.write_session("b").failure is None
    assert mem.workspace.fetched_topics == 3  # pulled by its write step, not by a reader
    assert mirror_files(mem, "topics") == db_files(mem, "topics", live_only=True)


WOODS = "oak pine birch maple cedar elm ash walnut cherry spruce larch alder hazel".split()


def long_topic_written_by(worker, jobs: MemoryJobs) -> str:
    """topics/kiln.md, 24 notes long, written by ``worker``'s job (so normalisation wrote
    it); returns its path."""
    say(worker, "long", "Kiln", *[
        f"The celadon glaze looked glossy beside the {WOODS[i % 13]} {WOODS[i * 7 % 13]} "
        f"shelf." for i in range(24)])
    work(worker, jobs, "long")
    return "topics/kiln.md"


def normalised_on_next_job(worker, jobs, sid: str, text: str, monkeypatch) -> tuple[int, int]:
    """(characters parsed, whole-file normalisations) of ``worker``'s job adding ``text`` to
    the kiln topic."""
    from scriptorium.memory import commit_plan, topics

    whole: list[str] = []
    parsed: list[int] = []
    real_normalize, real_parse = commit_plan.normalize_topic, topics.Parser.read

    def normalizing(text, rel, **kw):
        whole.append(rel)
        return real_normalize(text, rel, **kw)

    def parsing(self, text):
        parsed.append(len(text))
        return real_parse(self, text)

    with monkeypatch.context() as mp:
        mp.setattr(commit_plan, "normalize_topic", normalizing)
        mp.setattr(topics.Parser, "read", parsing)
        say(worker, sid, "Kiln", text)
        assert work(worker, jobs, sid).detail["marked"] == [f"{sid}-0"]
    return sum(parsed), len(whole)


def test_a_workers_writes_to_a_long_topic_another_worker_wrote_normalise_only_what_they_add(
        homes, monkeypatch):
    first = homes.open(trigger_tokens=1)
    first_jobs = MemoryJobs(first)
    rel = long_topic_written_by(first, first_jobs)
    second = homes.open(trigger_tokens=1)  # learns the topic from the database
    parsed, whole = normalised_on_next_job(
        second, MemoryJobs(second), "b", "The kiln room smelled of cedar smoke.", monkeypatch)
    size = len((second.workspace.root / rel).read_bytes())
    # the result parsed by the commit and by the search index: never the old file again
    assert whole == 0 and parsed < 2 * size + 2_000
    # the first worker's second write: its mirror pulled the topic the second one moved
    parsed, whole = normalised_on_next_job(
        first, first_jobs, "c", "The kiln lid creaked beside the rowan bench.", monkeypatch)
    assert whole == 0 and parsed < 2 * size + 2_000
    text = (first.workspace.root / rel).read_text(encoding="utf-8")
    assert "cedar smoke" in text and "rowan bench" in text
    assert homes.open().verify().ok


def test_a_summary_stored_before_the_flag_existed_is_normalised_whole_once(homes, monkeypatch):
    first = homes.open(trigger_tokens=1)
    rel = long_topic_written_by(first, MemoryJobs(first))
    with first.workspace.pg.connection() as conn:  # as an older program stored it
        conn.execute("UPDATE memory_topic_summaries SET normal = false")
    second = homes.open(trigger_tokens=1)
    jobs = MemoryJobs(second)
    assert normalised_on_next_job(second, jobs, "b", "The kiln room smelled of cedar smoke.",
                                  monkeypatch)[1] == 1
    # that install stored its summary as normalised: the next worker takes the short way
    third = homes.open(trigger_tokens=1)
    assert normalised_on_next_job(third, MemoryJobs(third), "c",
                                  "The kiln lid creaked beside the rowan bench.",
                                  monkeypatch)[1] == 0
    with third.workspace.pg.connection() as conn:
        assert conn.execute("SELECT normal FROM memory_topic_summaries WHERE path = %s",
                            (rel,)).fetchone() == (True,)
