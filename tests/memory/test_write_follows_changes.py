"""A write looks at what changed, not at all of memory, and still sees what a user did by hand
between two writes. Counted (walks of topics/, scans of the stage, files copied), never timed."""

from __future__ import annotations

from pathlib import Path

import pytest

from scriptorium.config import load_settings
from scriptorium.memory import stage as stage_mod
from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.citations import cited_sources
from scriptorium.memory.transaction import TransactionError
from scriptorium.memory.writers.base import declares_edits
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory

from search_support import archive, open_ws, render

TS = "2026-08-01T10:00:00+00:00"
TITLE = "Kiln firing plan"
TOPIC = "topics/kiln-firing-plan.md"


def memory(home: Path, writer=None) -> Memory:
    return Memory(home, settings=load_settings(home, {"trigger_tokens": 40}),
                  writer=writer or EmbeddedWriter())


def say(mem: Memory, *texts: str) -> None:
    for i, text in enumerate(texts):
        mem.record_turn("s", "user" if i % 2 == 0 else "assistant", text, title=TITLE)


def test_a_topic_edited_by_hand_between_two_writes_is_extended_not_clobbered(tmp_path):
    mem = memory(tmp_path)
    say(mem, "The kiln firing is set for Tuesday at cone 6.", "Noted: Tuesday, cone 6.")
    assert mem.write_session("s").failure is None
    path = mem.workspace.root / TOPIC
    text = path.read_text()
    assert "Tuesday" in text
    path.write_text(text.replace("Tuesday", "Wednesday"))  # by hand, outside any write
    say(mem, "The glaze budget is 120 euros.", "Glaze budget: 120 euros.")
    result = mem.write_session("s")
    assert result.failure is None and result.marked
    after = path.read_text()
    assert "Wednesday" in after and "Tuesday" not in after  # the hand edit stands
    assert "120" in after  # and the new batch extended the same file
    assert mem.verify().ok


def test_a_topic_created_by_hand_on_the_subject_is_the_one_a_write_extends(tmp_path):
    mem = memory(tmp_path)
    say(mem, "Let us start the kiln log.", "Started.")
    assert mem.write_session("s").failure is None
    first = (mem.workspace.root / TOPIC).read_text()
    # the user renames the topic (same folder: its relative source links still hold)
    (mem.workspace.root / "topics/firing-notes.md").write_text(first)
    (mem.workspace.root / TOPIC).unlink()
    say(mem, "The kiln firing is set for Tuesday at cone 6.", "Noted: Tuesday, cone 6.")
    assert mem.write_session("s").failure is None
    assert not (mem.workspace.root / TOPIC).exists()  # found by its title, not re-created
    assert "Tuesday" in (mem.workspace.root / "topics/firing-notes.md").read_text()


def test_a_write_walks_topics_once_per_batch_and_never_scans_the_stage(tmp_path,
                                                                       monkeypatch):
    mem = memory(tmp_path)
    say(mem, "Warm up the kiln slowly.", "Slowly, yes.")
    assert mem.write_session("s").failure is None
    catalog = TopicCatalog.of(mem.workspace)
    scans = catalog.scans
    full_stage_scans = []
    real = stage_mod.Stage.changes

    def counting(self, only=None):
        if only is None:
            full_stage_scans.append(self.dir)
        return real(self, only)

    monkeypatch.setattr(stage_mod.Stage, "changes", counting)
    say(mem, *[f"Firing {n} reached cone {n % 4 + 5} after {n + 6} hours."
               for n in range(12)])
    result = mem.write_session("s")
    batches = [step for step in result.steps if step.marked]
    assert result.failure is None and len(batches) > 1
    assert catalog.scans - scans == len(batches)  # one stat pass per batch, not two
    assert full_stage_scans == []  # the embedded writer declared the one file it wrote


@pytest.fixture
def ws(tmp_path: Path):
    ws = open_ws(tmp_path / "memory")
    ids = archive(ws, [(f"s{i}", "n0", "user", f"turn {i}", TS) for i in range(6)])
    with ws.begin(allowed_sources=ids) as tx:
        for i in range(3):
            (tx.stage / f"topics/t{i}.md").write_text(
                render([[(f"Subject {i} kiln glaze.", [ids[i]], "2026-08-01")]]))
        tx.commit("seed")
    ws.ids = ids  # type: ignore[attr-defined]
    return ws


def add_paragraph(tx, rel: str, ref: str) -> None:
    path = tx.stage / rel
    path.write_text(path.read_text() + f"\nA new fact.[^e9]\n\n[^e9]: Time: `2026-08-02`; "
                    f"Sources: [t]({ref})\n")


def test_a_retry_in_the_same_lock_hold_sees_the_hand_edit_that_made_it_stale(ws):
    rel = "topics/t0.md"
    with ws.lock():
        cited_sources(ws, ws.ids)  # the write step's first look, which begin then reuses
        (ws.root / rel).write_text((ws.root / rel).read_text().replace("kiln", "furnace"))
        with ws.begin(allowed_sources=[ws.ids[4]]) as tx:
            add_paragraph(tx, rel, ws.ids[4])
            with pytest.raises(TransactionError) as info:
                tx.commit("would lose the hand edit")
        assert info.value.code == "CONCURRENT_UPDATE"
        with ws.begin(allowed_sources=[ws.ids[4]]) as tx:  # the write step's retry
            assert "furnace" in (tx.stage / rel).read_text()
            add_paragraph(tx, rel, ws.ids[4])
            assert tx.commit("on top of the hand edit").changed_files == [rel]
    text = (ws.root / rel).read_text()
    assert "furnace" in text and "A new fact." in text


def test_the_catalog_logs_which_files_changed_and_finds_topics_by_name_or_title(ws):
    catalog = TopicCatalog.of(ws).refresh()
    seq = catalog.seq
    assert catalog.changed_since(seq) == set()
    (ws.root / "topics/t1.md").write_text(
        "# Glaze recipes\n\n" + (ws.root / "topics/t1.md").read_text())
    (ws.root / "topics/t2.md").unlink()
    catalog.refresh()
    assert catalog.changed_since(seq) == {"topics/t1.md", "topics/t2.md"}
    assert catalog.named("t1", "") == ["topics/t1.md"]
    assert catalog.named("nothing", "glaze-recipes") == ["topics/t1.md"]
    assert catalog.named("t2", "") == []
    assert catalog.changed_since(catalog.seq + 1) is None  # a state it never had


def test_only_the_class_that_defines_write_can_declare_its_edits():
    class Wrapping(EmbeddedWriter):
        def write(self, request):
            return super().write(request)

    class Declaring(Wrapping):
        declares_edits = True

    assert declares_edits(EmbeddedWriter())
    assert not declares_edits(Wrapping())  # may write in other ways: looked at in full
    assert not declares_edits(Declaring())  # says so, but its write is not its own
    assert not declares_edits(object())


class MovingWriter(EmbeddedWriter):
    """Writes through the embedded writer, then moves the file elsewhere by hand."""

    def write(self, request):
        audit = super().write(request)
        for path in list(request.topics_dir.glob("*.md")):
            (request.topics_dir / "moved").mkdir(exist_ok=True)
            path.rename(request.topics_dir / "moved" / path.name)
        return audit


def test_a_subclass_writing_past_write_topic_has_every_edit_installed(tmp_path):
    mem = memory(tmp_path, MovingWriter())
    say(mem, "The kiln firing is set for Tuesday at cone 6.", "Noted: Tuesday, cone 6.")
    result = mem.write_session("s")
    assert result.failure is None and result.marked
    assert not (mem.workspace.root / TOPIC).exists()
    assert "Tuesday" in (mem.workspace.root / "topics/moved/kiln-firing-plan.md").read_text()
