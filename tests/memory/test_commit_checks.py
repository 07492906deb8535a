"""A commit's "did memory move since begin?" check follows the files it replaces, not the size
of memory, when the write lock was held from begin to commit (as the write path holds it);
what it must refuse it still refuses. Counted, never timed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.citations import cited_sources
from scriptorium.memory.transaction import TransactionError
from scriptorium.memory.workspace import Workspace

from search_support import archive, open_ws, render

TS = "2026-08-01T10:00:00+00:00"
FILES = 8


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    ws = open_ws(tmp_path / "memory")
    ids = archive(ws, [(f"s{i}", "n0", "user", f"turn {i}", TS) for i in range(FILES + 4)])
    with ws.begin(allowed_sources=ids) as tx:
        for i in range(FILES):
            path = tx.stage / f"topics/t{i}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render([[(f"Subject {i} kiln glaze.", [ids[i]], "2026-08-01")]]))
        tx.commit("seed")
    ws.ids = ids  # type: ignore[attr-defined]
    return ws


def add_paragraph(tx, rel: str, ref: str) -> None:
    path = tx.stage / rel
    path.write_text(path.read_text() + f"\nA new fact.[^e9]\n\n[^e9]: Time: `2026-08-02`; "
                    f"Sources: [t]({ref})\n")


def hand_edit(ws: Workspace, rel: str) -> None:
    path = ws.root / rel
    path.write_text(path.read_text().replace("kiln", "furnace"))


def test_a_commit_under_one_lock_hold_stats_only_the_file_it_replaces(ws, monkeypatch):
    stated: list[str] = []
    real = os.lstat
    with ws.lock():
        with ws.begin(allowed_sources=[ws.ids[FILES]]) as tx:
            add_paragraph(tx, "topics/t0.md", ws.ids[FILES])
            monkeypatch.setattr(os, "lstat", lambda p, *a, **k: stated.append(os.fspath(p))
                                or real(p, *a, **k))
            result = tx.commit("one file")
            monkeypatch.setattr(os, "lstat", real)
    assert result.changed_files == ["topics/t0.md"]
    topics = {Path(p).name for p in stated if f"{os.sep}topics{os.sep}" in p}
    assert topics == {"t0.md"}  # not the other FILES - 1 topic files
    sources = {Path(p).name for p in stated if f"{os.sep}sources{os.sep}" in p
               and p.endswith(".md")}
    assert sources <= {"s0.md", f"s{FILES}.md"}  # what t0 and the new paragraph cite


def test_a_hand_edit_of_the_file_a_commit_replaces_is_a_concurrent_update_under_one_hold(ws):
    with ws.lock():
        with ws.begin(allowed_sources=[ws.ids[FILES]]) as tx:
            add_paragraph(tx, "topics/t0.md", ws.ids[FILES])
            hand_edit(ws, "topics/t0.md")
            with pytest.raises(TransactionError) as info:
                tx.commit("would lose the hand edit")
    assert info.value.code == "CONCURRENT_UPDATE" and info.value.retryable
    assert "furnace" in (ws.root / "topics/t0.md").read_text()


def test_a_hand_edit_of_another_file_under_one_hold_is_kept_beside_the_install(ws):
    with ws.lock():
        with ws.begin(allowed_sources=[ws.ids[FILES]]) as tx:
            add_paragraph(tx, "topics/t0.md", ws.ids[FILES])
            hand_edit(ws, "topics/t1.md")
            result = tx.commit("beside a hand edit")
    assert result.changed_files == ["topics/t0.md"]
    assert "A new fact." in (ws.root / "topics/t0.md").read_text()
    assert "furnace" in (ws.root / "topics/t1.md").read_text()


def test_a_hand_edit_of_any_topic_after_the_lock_was_released_is_a_concurrent_update(ws):
    with ws.begin(allowed_sources=[ws.ids[FILES]]) as tx:  # begin releases the lock
        add_paragraph(tx, "topics/t0.md", ws.ids[FILES])
        hand_edit(ws, "topics/t5.md")
        with pytest.raises(TransactionError) as info:
            tx.commit("stale")
    assert info.value.code == "CONCURRENT_UPDATE"
    assert "A new fact." not in (ws.root / "topics/t0.md").read_text()


def test_another_writers_install_between_two_holds_is_a_concurrent_update(ws):
    with ws.lock():
        tx = ws.begin(allowed_sources=[ws.ids[FILES]])
        add_paragraph(tx, "topics/t0.md", ws.ids[FILES])
    with Workspace(ws.root).begin(allowed_sources=[ws.ids[FILES + 1]]) as other:
        add_paragraph(other, "topics/t3.md", ws.ids[FILES + 1])
        other.commit("someone else")
    with ws.lock(), pytest.raises(TransactionError) as info:
        tx.commit("stale")
    tx.discard()
    assert info.value.code == "CONCURRENT_UPDATE"


def git_calls(monkeypatch) -> list[list[str]]:
    from scriptorium.gitrepo import GitRepo

    calls: list[list[str]] = []
    real = GitRepo._run
    monkeypatch.setattr(GitRepo, "_run", lambda self, args, check=True, gitdir=None: (
        calls.append(list(args)), real(self, args, check, gitdir))[1])
    return calls


def git_status(ws: Workspace) -> str:
    return ws.git._run(["status", "--porcelain", "--", "topics", "sources"]).stdout


def test_an_install_commits_by_name_the_files_it_changed_and_the_evidence_it_archived(
        ws, monkeypatch):
    ref = archive(ws, [("s9", "n1", "user", "late turn", TS)])[0]  # after the seed commit
    calls = git_calls(monkeypatch)
    with ws.begin(allowed_sources=[ref]) as tx:
        add_paragraph(tx, "topics/t2.md", ref)
        assert tx.commit("by name").commit
    staged = [c for c in calls if "update-index" in c or "add" in c]
    assert len(staged) == 1 and "update-index" in staged[0]
    assert sorted(staged[0][staged[0].index("--") + 1:]) == [
        "sources/openprogram/_v2/s9.md", "topics/t2.md"]
    assert git_status(ws) == ""


def test_a_hand_edit_joins_the_history_by_name_at_the_next_commit(ws, monkeypatch):
    hand_edit(ws, "topics/t7.md")  # outside any transaction: the next begin's refresh sees it
    (ws.root / "topics/t6.md").unlink()
    calls = git_calls(monkeypatch)
    with ws.begin(allowed_sources=[ws.ids[4]]) as tx:
        add_paragraph(tx, "topics/t4.md", ws.ids[4])
        tx.commit("write")
    staged = [c for c in calls if "update-index" in c or "add" in c]
    assert len(staged) == 1 and "update-index" in staged[0]  # by name, no add -A
    assert sorted(staged[0][staged[0].index("--") + 1:]) == [
        "topics/t4.md", "topics/t6.md", "topics/t7.md"]
    assert git_status(ws) == ""


def test_what_no_commit_named_joins_the_history_at_the_next_full_stage(ws, monkeypatch):
    from scriptorium.memory import directory as directory_mod

    monkeypatch.setattr(directory_mod, "FULL_STAGE_EVERY", 3)
    (ws.root / "topics/notes.txt").write_text("not a topic: the catalog does not track it\n")
    for n, i in enumerate((4, 5, 6)):
        with ws.begin(allowed_sources=[ws.ids[i]]) as tx:
            add_paragraph(tx, f"topics/t{i}.md", ws.ids[i])
            tx.commit(f"write {n}")
        if n == 0:
            assert "notes.txt" in git_status(ws)  # named files only: it waits
    assert git_status(ws) == ""  # the third commit staged everything
    assert ws.git.log()[0]["message"] == "write 2"


def test_a_new_workspace_object_stages_everything_on_its_first_commit(ws):
    hand_edit(ws, "topics/t7.md")
    other = open_ws(ws.root)
    with other.begin(allowed_sources=[ws.ids[4]]) as tx:
        add_paragraph(tx, "topics/t4.md", ws.ids[4])
        tx.commit("first of this object")
    assert git_status(ws) == ""


def test_a_retry_in_the_same_lock_hold_sees_the_hand_edit_that_made_it_stale(ws):
    rel = "topics/t0.md"
    with ws.lock():
        cited_sources(ws, ws.ids)  # the write step's first look, which begin then reuses
        (ws.root / rel).write_text((ws.root / rel).read_text().replace("kiln", "furnace"))
        with ws.begin(allowed_sources=[ws.ids[FILES]]) as tx:
            add_paragraph(tx, rel, ws.ids[FILES])
            with pytest.raises(TransactionError) as info:
                tx.commit("would lose the hand edit")
        assert info.value.code == "CONCURRENT_UPDATE"
        with ws.begin(allowed_sources=[ws.ids[FILES]]) as tx:  # the write step's retry
            assert "furnace" in (tx.stage / rel).read_text()
            add_paragraph(tx, rel, ws.ids[FILES])
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
