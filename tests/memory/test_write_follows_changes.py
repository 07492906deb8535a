"""A write looks at what changed, not at all of memory, and still sees what a user did by hand
between two writes. Counted (walks of topics/, scans of the stage, files copied), never timed."""

from __future__ import annotations

from pathlib import Path

from scriptorium.config import load_settings
from scriptorium.memory import stage as stage_mod
from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.writers.base import declares_edits
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory

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
