"""memory verify: the marks of this workspace form a prefix of every live branch; every marked
turn is archived; marked-but-uncited turns are listed; --repair re-offers stranded turns."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from scriptorium import faults
from scriptorium.config import load_settings
from scriptorium.errors import NotFound
from scriptorium.memory.citations import citation_map
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.verify import branch_gap, marks_to_take_back, verify
from scriptorium.memory.workspace import Workspace
from scriptorium.memory.writers.base import WriteRequest
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore

from pgmemkit import Homes
from storekit import damage
from testkit import Cli, RecordingWriter



class FoldingWriter(EmbeddedWriter):
    """Cites only the first turn of each batch, as a writer that folds a batch into one
    paragraph may: the whole batch is still marked."""

    def write(self, request):
        return super().write(WriteRequest(
            batch=list(request.batch)[:1], stage=request.stage, cited=request.cited,
            session_title=request.session_title))


def open_memory(home: Path | Homes, writer=None, trigger_tokens: int = 1) -> Memory:
    """Memory on either kind of home (``Homes``), or on a home directory (for the tests that
    look at or damage its files)."""
    if isinstance(home, Homes):
        return home.open(writer or EmbeddedWriter(), trigger_tokens=trigger_tokens)
    return Memory(home, settings=load_settings(home, {"trigger_tokens": trigger_tokens}),
                  writer=writer or EmbeddedWriter())


def chain(store: SessionStore, sid: str, names: list[str], after: str | None = None) -> None:
    prev = after
    for i, name in enumerate(names):
        msg = {"id": name, "role": "user" if i % 2 == 0 else "assistant",
               "content": f"turn {name} says something about topic {name}"}
        if prev is not None:
            msg["predecessor"] = prev
        store.append_message(sid, msg)
        prev = name


def written(home: Path | Homes, writer=None) -> Memory:
    """A session with a fork at m3 (branch b4, b5), fully written and marked."""
    mem = open_memory(home, writer)
    mem.store.create_session("s", title="Planning")
    chain(mem.store, "s", [f"m{i}" for i in range(6)])
    chain(mem.store, "s", ["b4", "b5"], after="m3")
    mem.store.set_head("s", "m5")
    result = mem.write_session("s")
    assert result.failure is None
    assert not mem.pending("s", "m5") and not mem.pending("s", "b5")
    return mem


def lose_marks(mem: Memory, sid: str, *nodes: str) -> None:
    mem.store.merge_node_metadata_batch(sid, {n: {MARK_KEY: None} for n in nodes})


def marked(mem: Memory, sid: str) -> set[str]:
    return {n.id for n in mem.store.get_nodes(sid) if n.metadata.get(MARK_KEY) == mem.workspace_id}


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_dir()):
        rel = str(path.relative_to(root)).encode()
        h.update(rel + b"\0" + (path.read_bytes() if path.is_file() else b"<dir>") + b"\0")
    return h.hexdigest()


# -- ok ----------------------------------------------------------------------------------------


def test_a_fully_written_session_verifies_ok_with_nothing_to_report(homes):
    mem = written(homes)
    report = verify(mem)
    assert report.ok and report.problems == []
    assert report.to_dict()["checked"] == {"sessions": 1, "branches": 2, "marked_turns": 8}


def test_an_unwritten_tail_is_pending_work_not_a_problem(homes):
    mem = written(homes)
    chain(mem.store, "s", ["m6", "m7"], after="m5")
    assert [r.node_id for r in mem.pending("s")] == ["m6", "m7"]
    assert verify(mem).ok and verify(mem).problems == []


def test_a_mark_naming_another_workspace_is_no_mark_and_no_problem(homes):
    mem = open_memory(homes)
    mem.store.create_session("s")
    chain(mem.store, "s", ["m0", "m1", "m2", "m3"])
    mem.store.merge_node_metadata_batch("s", {"m2": {MARK_KEY: "w-0000beef"}})
    report = verify(mem)
    assert report.ok and report.problems == []


# -- gap -----------------------------------------------------------------------------------------


def test_a_lost_mark_is_a_gap_that_names_the_stranded_turn(homes):
    mem = written(homes)
    lose_marks(mem, "s", "m4")
    assert mem.pending("s", "m5") == []  # the walk stops at m5's mark: m4 is stranded
    report = verify(mem)
    assert not report.ok
    gaps = report.kinds("gap")
    assert [(g.session_id, g.node_id) for g in gaps] == [("s", "m4")]
    assert gaps[0].extra["stranded"] == ["m4"] and gaps[0].extra["tips"] == ["m5"]


def test_a_gap_on_a_shared_prefix_is_reported_once_for_every_branch_it_strands(homes):
    mem = written(homes)
    lose_marks(mem, "s", "m1", "m2")
    gaps = verify(mem).kinds("gap")
    assert len(gaps) == 1 and gaps[0].node_id == "m1"
    assert sorted(gaps[0].extra["tips"]) == ["b5", "m5"]
    assert gaps[0].extra["stranded"] == ["m1", "m2"]
    assert gaps[0].to_dict()["kind"] == "gap" and gaps[0].to_dict()["severity"] == "error"


def test_marks_on_a_later_turn_without_the_earlier_ones_strand_the_earlier_ones(homes):
    mem = open_memory(homes)
    mem.store.create_session("s", title="Planning")
    chain(mem.store, "s", [f"m{i}" for i in range(6)])
    # what the old ordinal bug produced: the tail marked, the middle never written
    mem.store.merge_node_metadata_batch(
        "s", {n: {MARK_KEY: mem.workspace_id} for n in ("m0", "m1", "m4", "m5")})
    gap = verify(mem).kinds("gap")[0]
    assert gap.node_id == "m2" and gap.extra["stranded"] == ["m2", "m3"]


def test_branch_gap_and_take_back_agree_on_the_prefix_rule():
    from scriptorium.memory.records import Record

    def recs(names):
        return [Record("s", n, "user", n, None, i, None, 1) for i, n in enumerate(names)]

    trunk, fork = recs(["x0", "x1", "x2", "a3"]), recs(["x0", "x1", "x2", "b3"])
    marked = {"x0", "x2", "a3", "b3"}
    assert branch_gap(trunk, lambda r: r.node_id in marked)[0] == 1
    assert branch_gap(trunk, lambda r: r.node_id in {"x0", "x1"}) is None
    assert branch_gap(trunk, lambda r: False) is None
    taken = marks_to_take_back([trunk, fork], marked)
    assert set(taken) == {"x2", "a3", "b3"} and taken[-1] == "x2"  # newest first
    remaining = marked - set(taken)
    assert all(branch_gap(b, lambda r: r.node_id in remaining) is None for b in (trunk, fork))


# -- repair ---------------------------------------------------------------------------------------


def test_repair_reoffers_a_lost_mark_and_the_next_write_marks_it_without_writing_twice(homes):
    writer = RecordingWriter()
    mem = written(homes, writer)
    revision, installs = mem.workspace.revision(), len(mem.workspace.history())
    lose_marks(mem, "s", "m2")
    report = verify(mem, repair=True)
    assert report.ok and report.kinds("gap") == []
    assert [p.kind for p in report.found] == ["gap"]
    assert report.repaired == [{"kind": "unmarked", "session_id": "s",
                                "node_ids": ["b5", "m5", "b4", "m4", "m3"]}]
    assert [r.node_id for r in mem.pending("s", "m5")] == ["m2", "m3", "m4", "m5"]
    assert [r.node_id for r in mem.pending("s", "b5")] == ["m2", "m3", "b4", "b5"]
    writer.seen.clear()
    assert mem.write_session("s").failure is None
    assert marked(mem, "s") == {f"m{i}" for i in range(6)} | {"b4", "b5"}
    # every re-offered turn was already cited: marked again, nothing written twice
    assert mem.workspace.revision() == revision and len(mem.workspace.history()) == installs
    assert all(len(where) == 1 for where in citation_map(mem.workspace).values())
    assert verify(mem).problems == []


def test_repair_gets_stranded_turns_that_were_never_written_into_memory(homes):
    mem = open_memory(homes)
    mem.store.create_session("s", title="Planning")
    chain(mem.store, "s", [f"m{i}" for i in range(4)])
    assert mem.write_session("s").failure is None
    chain(mem.store, "s", ["m4", "m5", "m6"], after="m3")
    mem.store.merge_node_metadata_batch("s", {"m6": {MARK_KEY: mem.workspace_id}})
    assert mem.pending("s") == []  # m4, m5 would never be written
    report = verify(mem, repair=True)
    assert report.ok
    # m6 was marked but never archived: its mark goes too, so it is written for real
    assert {p.kind for p in report.found} == {"gap", "marked_not_archived"}
    assert mem.write_session("s").failure is None
    cited = citation_map(mem.workspace)
    assert {f"openprogram/s/m{i}" for i in range(7)} <= set(cited)
    assert verify(mem).problems == []


def test_repair_of_a_clean_workspace_changes_nothing(home):
    mem = written(home)
    before = tree_digest(home)
    report = verify(mem, repair=True)
    assert report.ok and report.repaired == [] and report.found == []
    assert tree_digest(home) == before


# -- marked_not_archived ---------------------------------------------------------------------------


def test_a_marked_turn_with_no_archived_evidence_is_an_error_and_repair_reoffers_it(home):
    mem = written(home)
    gone = [*mem.workspace.sources_dir.rglob("*.md"), *mem.workspace.topics_dir.rglob("*.md")]
    for path in gone:
        path.unlink()  # a restored workspace: the evidence and the topics citing it are gone
    report = verify(mem)
    assert not report.ok
    assert {p.node_id for p in report.kinds("marked_not_archived")} == \
        {f"m{i}" for i in range(6)} | {"b4", "b5"}
    repaired = verify(mem, repair=True)
    assert repaired.kinds("marked_not_archived") == [] and repaired.kinds("gap") == []
    assert marked(mem, "s") == set()
    assert len(mem.pending("s", "m5")) == 6


def test_evidence_deleted_under_topics_that_cite_it_is_archived_again_and_marks_stay(home):
    mem = written(home)
    for path in mem.workspace.sources_dir.rglob("*.md"):
        path.unlink()  # the archive alone is gone; the topics still cite every turn
    assert {p.kind for p in verify(mem).problems} >= {"source_missing", "marked_not_archived"}
    repaired = verify(mem, repair=True)
    assert repaired.ok and repaired.problems == []
    assert marked(mem, "s") == {f"m{i}" for i in range(6)} | {"b4", "b5"}


# -- marked_not_cited --------------------------------------------------------------------------------


def test_marked_but_uncited_turns_are_listed_as_information_and_ok_stays_true(homes):
    mem = open_memory(homes, FoldingWriter(), trigger_tokens=10_000)
    mem.store.create_session("s", title="Planning")
    chain(mem.store, "s", ["m0", "m1", "m2", "m3"])
    assert mem.write_session("s").marked == ["m0", "m1", "m2", "m3"]
    report = verify(mem)
    assert report.ok
    uncited = report.kinds("marked_not_cited")
    assert [p.node_id for p in uncited] == ["m1", "m2", "m3"]
    assert {p.severity for p in uncited} == {"info"}
    repaired = verify(mem, repair=True)
    assert repaired.repaired == [] and marked(mem, "s") == {"m0", "m1", "m2", "m3"}


# -- other damage is reported, never fatal -------------------------------------------------------------


def test_a_broken_topic_file_is_reported_and_its_citations_still_count_elsewhere(home):
    mem = written(home)
    topic = next(mem.workspace.topics_dir.rglob("*.md"))
    topic.write_text(topic.read_text() + "\n[^zz]: not a footnote at all\n")
    report = verify(mem)
    assert [p.kind for p in report.problems if p.severity == "error"] == ["topic_invalid"]
    assert report.kinds("topic_invalid")[0].extra["path"].startswith("topics/")


def test_an_unreadable_session_is_reported_and_the_others_are_still_checked(homes):
    mem = written(homes)
    mem.store.create_session("t")
    chain(mem.store, "t", ["t0", "t1", "t2"])
    damage(mem.store, "t", "t1", delete=True)
    report = verify(open_memory(homes))  # a fresh process's view
    assert [(p.kind, p.session_id) for p in report.problems] == [("session_unreadable", "t")]
    assert report.to_dict()["checked"]["marked_turns"] == 8


def test_an_unknown_session_is_not_found(homes):
    mem = written(homes)
    with pytest.raises(NotFound):
        verify(mem, ["nope"])


def test_an_interrupted_install_is_reported_and_repair_finishes_it(home):
    mem = written(home)
    chain(mem.store, "s", ["m6", "m7"], after="m5")

    class Crash(BaseException):
        pass

    def hook(step):
        if step == "committed":
            raise Crash(step)

    faults.HOOK = hook
    try:
        with pytest.raises(Crash):
            mem.write_session("s")
    finally:
        faults.HOOK = None
    untouched = Memory(home, settings=mem.settings, workspace=Workspace(home / "memory"))
    report = verify(untouched)
    assert [p.kind for p in report.problems if p.severity == "error"] == ["interrupted_install"]
    fixed = verify(untouched, repair=True)
    assert fixed.ok and fixed.repaired[0] == {"kind": "interrupted_install", "done": "finished"}
    assert not untouched.workspace.journal_path.exists()


# -- the command -------------------------------------------------------------------------------------


def test_verify_without_repair_changes_no_file_and_exits_non_zero_on_a_gap(home):
    mem = written(home)
    lose_marks(mem, "s", "m3")
    before = tree_digest(home)
    result = Cli(home)("memory", "verify", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False and [p["kind"] for p in data["problems"]] == ["gap"]
    assert set(data["problems"][0]) >= {"kind", "session_id", "node_id", "detail"}
    human = Cli(home)("memory", "verify")
    assert human.exit_code == 1 and "gap s/m3" in human.stdout
    assert tree_digest(home) == before


def test_verify_of_a_home_with_no_memory_creates_nothing(home):
    store = SessionStore(home / "sessions")
    store.create_session("s")
    chain(store, "s", ["m0", "m1"])
    before = tree_digest(home)
    data = Cli(home).json("memory", "verify")
    assert data["ok"] is True and data["workspace_id"] is None
    assert not (home / "memory").exists() and tree_digest(home) == before


def test_verify_repair_from_the_command_line_then_verify_is_clean(homes):
    mem = written(homes)
    lose_marks(mem, "s", "m3")
    data = homes.cli().json("memory", "verify", "--repair")
    assert data["ok"] is True and data["found"][0]["kind"] == "gap"
    assert data["repaired"][0]["node_ids"] == ["b5", "m5", "b4", "m4"]
    assert homes.cli().json("memory", "verify")["problems"] == []
    text = homes.cli()("memory", "verify", "--repair")
    assert text.exit_code == 0 and text.stdout.startswith("ok:")


def test_verify_of_an_unknown_session_is_a_one_line_error(homes):
    written(homes)
    result = homes.cli()("memory", "verify", "nope")
    assert result.exit_code == 3
    assert result.stderr.count("\n") == 1 and "nope" in result.stderr


def test_verify_names_only_the_sessions_asked_for(homes):
    mem = written(homes)
    mem.store.create_session("t")
    chain(mem.store, "t", ["t0", "t1"])
    mem.store.merge_node_metadata_batch("t", {"t1": {MARK_KEY: mem.workspace_id}})
    assert homes.cli().json("memory", "verify", "s")["ok"] is True
    assert homes.cli()("memory", "verify", "t").exit_code == 1
