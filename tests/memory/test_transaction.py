"""The whole-or-nothing topic transaction: validation rules and what an install leaves behind."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from scriptorium.memory.sources import SourceRecord
from scriptorium.memory.topics import parse_topic
from scriptorium.memory.transaction import TransactionError
from scriptorium.memory.workspace import Workspace

OFFSITE = "topics/projects/lisbon-offsite.md"
PRODUCTION = "topics/infrastructure/production.md"
O1 = "openprogram/offsite/o1"


@pytest.fixture
def ws(written_home: Path) -> Workspace:
    return Workspace.open(written_home / "memory")


def snapshot(ws: Workspace) -> dict[str, bytes]:
    out = {rel: (ws.root / rel).read_bytes() for rel in ws.topic_paths()}
    if ws.runtime_path.exists():
        out["runtime.json"] = ws.runtime_path.read_bytes()
    return out


def commits(ws: Workspace) -> list[str]:
    return [c["message"] for c in ws.git.log()]


def append(tx, rel: str, text: str) -> None:
    path = tx.stage / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text() if path.exists() else "") + text)


NEW_PARAGRAPH = ("\nThe assistant asked about the budget.[^e1] ^invented\n\n"
                 "[^e1]: Time: `2026-08-02`; Sources: [question](openprogram/offsite/o1)\n")


def rejected(ws: Workspace, edit, allowed=(O1,), purpose="write") -> TransactionError:
    before, rev, log = snapshot(ws), ws.revision(), commits(ws)
    with ws.begin(allowed_sources=allowed, purpose=purpose) as tx:
        edit(tx)
        with pytest.raises(TransactionError) as info:
            tx.commit("should not install")
    assert snapshot(ws) == before and ws.revision() == rev and commits(ws) == log
    assert not ws.journal_path.exists()
    assert "\n" not in str(info.value)
    return info.value


# -- a successful install -----------------------------------------------------------------------


def test_a_new_paragraph_citing_this_batchs_evidence_installs_with_runtime_ids(ws):
    rev = ws.revision()
    with ws.begin(allowed_sources=[O1]) as tx:
        append(tx, OFFSITE, NEW_PARAGRAPH)
        result = tx.commit("memory: write 1 turn")
    assert result.changed_files == [OFFSITE] and result.removed_blocks == []
    (created,) = result.created_blocks
    assert re.fullmatch(r"[0-9a-f]{8}", created)
    doc = parse_topic((ws.root / OFFSITE).read_text(), OFFSITE)
    block = doc.block(created)
    assert block.claims[0].text == "The assistant asked about the budget."
    (fid,) = block.citations
    assert re.fullmatch(r"e-[0-9a-f]{10}", fid)
    assert doc.evidence[fid].sources[0].target == \
        "../../sources/openprogram/_v2/offsite.md#source-9bba98d2a761195c"
    assert "invented" not in (ws.root / OFFSITE).read_text()
    assert result.revision == ws.revision() != rev
    assert commits(ws)[0] == "memory: write 1 turn" and result.commit == ws.git.log()[0]["sha"]
    assert created in ws.load_runtime().creation_order
    assert not list(ws.runtime_dir.glob("tx-*")) and not ws.journal_path.exists()


def test_exactly_one_git_commit_per_install_and_archived_evidence_rides_along(ws):
    record = SourceRecord(provider="openprogram", thread="offsite", message="o9", role="user",
                          content="We also need a venue with a projector.",
                          timestamp="2026-08-03T10:00:00+00:00")
    before = len(commits(ws))
    with ws.lock():
        ws.sources.archive([record])
        with ws.begin(allowed_sources=["openprogram/offsite/o9"]) as tx:
            append(tx, OFFSITE, "\nThe venue needs a projector.[^e1]\n\n[^e1]: Time: "
                                "`2026-08-03`; Sources: [venue](openprogram/offsite/o9)\n")
            result = tx.commit("memory: write o9")
    assert len(commits(ws)) == before + 1
    shown = subprocess.run(["git", "show", "--name-only", "--format=", result.commit],
                           cwd=ws.root, capture_output=True, text=True).stdout.split()
    assert sorted(shown) == sorted([OFFSITE, "sources/openprogram/_v2/offsite.md"])


def test_a_transaction_that_changes_nothing_installs_and_commits_nothing(ws):
    rev, log, before = ws.revision(), commits(ws), snapshot(ws)
    with ws.begin(allowed_sources=[O1]) as tx:
        result = tx.commit("nothing")
    assert result.changed_files == [] and result.commit is None and result.revision == rev
    assert commits(ws) == log and snapshot(ws) == before


def test_an_edit_that_normalises_back_to_the_committed_text_is_no_change(ws):
    rev = ws.revision()
    with ws.begin() as tx:
        path = tx.stage / OFFSITE
        path.write_text("\n\n" + path.read_text().replace(" ^ec7521e7", "   ^ec7521e7  ") + "\n\n")
        result = tx.commit("cosmetic")
    assert result.changed_files == [] and ws.revision() == rev


def test_an_existing_block_may_keep_its_citations_without_new_evidence(ws):
    with ws.begin(allowed_sources=[]) as tx:
        path = tx.stage / OFFSITE
        path.write_text(path.read_text().replace("first week of May", "first week of June"))
        result = tx.commit("edit")
    assert result.changed_files == [OFFSITE] and result.created_blocks == []
    assert "first week of June" in (ws.root / OFFSITE).read_text()


def test_a_paragraph_moved_to_another_file_keeps_its_id_and_citations(ws):
    with ws.begin(allowed_sources=[]) as tx:
        text = (tx.stage / PRODUCTION).read_text()
        head, deploy = text.split("\nDeploys happen")
        (tx.stage / PRODUCTION).write_text(head.rstrip("\n") + "\n")
        (tx.stage / "topics" / "deploys.md").write_text("# Deploys\n\nDeploys happen" + deploy)
        result = tx.commit("move")
    assert result.changed_files == ["topics/deploys.md", PRODUCTION]
    assert result.created_blocks == [] and result.removed_blocks == []
    doc = parse_topic((ws.root / "topics" / "deploys.md").read_text(), "topics/deploys.md")
    assert doc.blocks[0].id == "ef3d9036"
    # the stale link (written for topics/infrastructure/) was recovered and re-rendered
    assert doc.evidence["e-28c1e79bfd"].sources[0].target == \
        "../sources/openprogram/_v2/deploy.md#source-001bc42ef9291c34"


def test_merging_two_blocks_keeps_both_ids_and_all_citations(ws):
    with ws.begin(allowed_sources=[], purpose="reorganize") as tx:
        text = (tx.stage / PRODUCTION).read_text()
        merged = text.replace(" ^74c5db67\n\n[^e-82dd4f837c]", " Deploys happen on Tuesdays"
                              "[^e-28c1e79bfd] ^74c5db67 ^ef3d9036\n\n[^e-82dd4f837c]")
        merged = merged.split("\nDeploys happen on Tuesdays after")[0]
        merged += "\n[^e-28c1e79bfd]: Time: `2026-08-01`; Sources: [deploy window](../../sources/" \
                  "openprogram/_v2/deploy.md#source-001bc42ef9291c34)\n"
        (tx.stage / PRODUCTION).write_text(merged)
        result = tx.commit("merge")
    assert result.removed_blocks == [] and result.created_blocks == []
    _, block = ws.find_block("74c5db67")
    assert block.ids == ["74c5db67", "ef3d9036"] and ws.find_block("74c5db67")[1] is not None
    assert ws.find_block("ef3d9036")[1].id == "ef3d9036"


def test_a_writer_may_delete_blocks_and_files_citing_its_batch_and_they_are_reported(ws):
    batch = ["openprogram/offsite/o0", "openprogram/offsite/o2", "openprogram/offsite/o3",
             "openprogram/deploy/d2"]
    with ws.begin(allowed_sources=batch) as tx:
        (tx.stage / OFFSITE).unlink()
        text = (tx.stage / PRODUCTION).read_text()
        (tx.stage / PRODUCTION).write_text(text.split("\nDeploys happen")[0])
        result = tx.commit("forget")
    assert result.changed_files == [PRODUCTION, OFFSITE]
    assert result.removed_blocks == ["ec7521e7", "ef3d9036"]
    assert not (ws.root / OFFSITE).exists() and not (ws.root / "topics" / "projects").exists()
    # the deleted paragraph's definition went with it
    assert list(parse_topic((ws.root / PRODUCTION).read_text(), PRODUCTION).evidence) == [
        "e-82dd4f837c"]


def test_a_writer_may_not_delete_blocks_citing_turns_outside_its_batch(ws):
    err = rejected(ws, lambda tx: (tx.stage / OFFSITE).unlink())
    assert err.code == "FOREIGN_CITATION_REMOVED" and "^ec7521e7" in str(err)
    assert "openprogram/offsite/o0" in str(err) and not err.retryable


def test_a_hand_edit_may_not_delete_blocks(ws):
    err = rejected(ws, lambda tx: (tx.stage / OFFSITE).unlink(), purpose="edit")
    assert err.code == "COMMIT_REJECTED" and "^ec7521e7" in str(err) and not err.retryable


def test_block_links_follow_a_block_that_moved(ws):
    with ws.begin(allowed_sources=[O1]) as tx:
        append(tx, OFFSITE, "\nSee [deploys](../infrastructure/production.md#^ef3d9036) for the "
                            "window, asked here.[^e1]\n\n[^e1]: Time: `2026`; Sources: "
                            "[q](openprogram/offsite/o1)\n")
        tx.commit("link")
    with ws.begin(allowed_sources=[]) as tx:
        text = (tx.stage / PRODUCTION).read_text()
        head, deploy = text.split("\nDeploys happen")
        (tx.stage / PRODUCTION).write_text(head.rstrip("\n") + "\n")
        (tx.stage / "topics" / "deploys.md").write_text("# Deploys\n\nDeploys happen" + deploy)
        result = tx.commit("move")
    assert OFFSITE in result.changed_files
    assert "[deploys](../deploys.md#^ef3d9036)" in (ws.root / OFFSITE).read_text()


def test_install_hooks_see_the_result_and_a_failing_hook_does_not_undo_the_install(ws):
    seen = []
    ws.add_install_hook(lambda w, r: seen.append(r.changed_files))

    def broken(w, r):
        raise RuntimeError("index down")

    ws.add_install_hook(broken)
    with ws.begin(allowed_sources=[O1]) as tx:
        append(tx, OFFSITE, NEW_PARAGRAPH)
        result = tx.commit("hooked")
    assert seen == [[OFFSITE]] and "index down" in result.warnings[0]
    assert "asked about the budget" in (ws.root / OFFSITE).read_text()


def test_leaving_the_with_block_without_commit_discards_the_stage(ws):
    before = snapshot(ws)
    with ws.begin(allowed_sources=[O1]) as tx:
        append(tx, OFFSITE, NEW_PARAGRAPH)
        stage = tx.stage
    assert not stage.exists() and snapshot(ws) == before
    with pytest.raises(TransactionError):
        tx.commit("too late")


def test_the_stage_holds_only_topics(ws):
    with ws.begin() as tx:
        assert sorted(p.name for p in tx.stage.iterdir()) == ["topics"]
        assert (tx.stage / OFFSITE).read_bytes() == (ws.root / OFFSITE).read_bytes()


# -- rejections ------------------------------------------------------------------------------------


def test_a_citation_of_a_source_outside_this_transactions_evidence_is_not_evidence(ws):
    err = rejected(ws, lambda tx: append(tx, OFFSITE, NEW_PARAGRAPH), allowed=[])
    assert err.code == "NOT_EVIDENCE" and not err.retryable
    assert "openprogram/offsite/o1 is not evidence of this transaction" in str(err)
    assert str(err).startswith(f"{OFFSITE}:")


def test_adding_an_old_source_to_an_existing_block_is_not_evidence_either(ws):
    def edit(tx):
        path = tx.stage / OFFSITE
        path.write_text(path.read_text().replace(
            "[^e-b72bb88e5f]: Time: `2026-08-02`; Sources: [offsite plan](",
            "[^e-b72bb88e5f]: Time: `2026-08-02`; Sources: [deploy](openprogram/deploy/d0), "
            "[offsite plan]("))
    assert rejected(ws, edit, allowed=[O1]).code == "NOT_EVIDENCE"


def test_a_pending_source_is_never_evidence_even_when_allowed(ws):
    pending = SourceRecord(provider="channel-x", thread="chat", message="m1", role="user",
                           content="unverified group speech",
                           meta={"authority_tier": None, "principal_id": "p", "speaker_kind":
                                 "member", "trust_state": "pending", "version": 1})
    with ws.lock():
        ws.sources.archive([pending])
    sid = pending.source_id
    err = rejected(ws, lambda tx: append(tx, OFFSITE, "\nSomeone said so.[^e1]\n\n[^e1]: Time: "
                                                      f"`2026`; Sources: [x]({sid})\n"),
                   allowed=[sid])
    assert err.code == "NOT_EVIDENCE" and "not trusted" in str(err)


def test_a_source_that_is_not_archived_is_missing(ws):
    err = rejected(ws, lambda tx: append(tx, OFFSITE, "\nGhost.[^e1]\n\n[^e1]: Time: `2026`; "
                                                      "Sources: [x](openprogram/offsite/nope)\n"),
                   allowed=["openprogram/offsite/nope"])
    assert err.code == "MISSING_SOURCE" and "openprogram/offsite/nope" in str(err)


def test_an_invalid_topic_is_rejected_with_its_path_and_line(ws):
    err = rejected(ws, lambda tx: append(tx, OFFSITE, "\nUncited prose.\n"))
    assert err.code == "INVALID_TOPIC_FORMAT" and str(err).startswith(f"{OFFSITE}:8:")


def test_a_block_id_taken_in_another_file_is_rejected(ws):
    err = rejected(ws, lambda tx: append(tx, OFFSITE, "\nAgain.[^e-aaaaaaaaaa] ^ef3d9036\n\n"
                                                      "[^e-aaaaaaaaaa]: Time: `2026`; Sources: "
                                                      "[q](openprogram/offsite/o1)\n"))
    assert err.code == "INVALID_TOPIC_FORMAT" and "duplicate block id ^ef3d9036" in str(err)


def test_a_dangling_block_link_is_rejected(ws):
    err = rejected(ws, lambda tx: append(tx, OFFSITE, "\nSee [x](../people/a.md#^deadbeef) "
                                                      "asked.[^e1]\n\n[^e1]: Time: `2026`; "
                                                      "Sources: [q](openprogram/offsite/o1)\n"))
    assert err.code == "INVALID_TOPIC_FORMAT" and "dangling block link" in str(err)


@pytest.mark.parametrize("where", ["sources/openprogram/_v2/offsite.md", "core.md",
                                   ".scriptorium/runtime.json", "timeline/2026.md"])
def test_anything_written_outside_topics_is_a_read_only_path(ws, where):
    def edit(tx):
        path = tx.stage / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("tampered\n")
    err = rejected(ws, edit)
    assert err.code == "READ_ONLY_PATH" and where.split("/")[0] in str(err)


def test_a_non_markdown_file_or_a_symlink_in_topics_is_refused(ws):
    assert rejected(ws, lambda tx: (tx.stage / "topics" / "notes.txt").write_text("x")).code \
        == "READ_ONLY_PATH"
    assert rejected(ws, lambda tx: (tx.stage / "topics" / "evil.md").symlink_to(
        ws.root / "sources" / "openprogram" / "_v2" / "offsite.md")).code == "READ_ONLY_PATH"


@pytest.mark.parametrize("linked", ["topics/linked", "topics/people/linked"])
def test_a_declared_edit_reached_through_a_symlinked_directory_is_refused(ws, tmp_path, linked):
    """A writer that declares what it wrote (``commit(only=...)``) has only those files
    looked at: each must be a regular file reached through no symlink, at any depth."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("# X\n\nOutside the stage.\n")
    before, rev = snapshot(ws), ws.revision()
    with ws.begin(allowed_sources=[O1]) as tx:
        link = tx.stage / linked
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(outside, target_is_directory=True)
        with pytest.raises(TransactionError) as info:
            tx.commit("should not install", only=[f"{linked}/x.md"])
    assert info.value.code == "READ_ONLY_PATH" and f"{linked}/x.md" in str(info.value)
    assert snapshot(ws) == before and ws.revision() == rev


def test_removing_the_stages_topics_directory_is_refused_not_taken_as_delete_everything(ws):
    import shutil
    err = rejected(ws, lambda tx: shutil.rmtree(tx.stage / "topics"))
    assert err.code == "READ_ONLY_PATH"


@pytest.mark.parametrize("change", ["topic", "source", "runtime"])
def test_a_workspace_changed_since_begin_is_a_retryable_concurrent_update(ws, change):
    with ws.begin(allowed_sources=[O1]) as tx:
        append(tx, OFFSITE, NEW_PARAGRAPH)
        if change == "topic":
            with ws.begin(allowed_sources=[]) as other:
                path = other.stage / PRODUCTION
                path.write_text(path.read_text().replace("Tuesdays", "Wednesdays"))
                other.commit("someone else")
        elif change == "source":
            with ws.lock():
                ws.sources.archive([SourceRecord(provider="openprogram", thread="offsite",
                                                 message="o8", role="user", content="hi")])
        else:
            state = ws.load_runtime()
            state.local_batches += 1
            ws.save_runtime(state)
        before = snapshot(ws)
        with pytest.raises(TransactionError) as info:
            tx.commit("stale")
    assert info.value.code == "CONCURRENT_UPDATE" and info.value.retryable
    assert snapshot(ws) == before


def test_a_commit_waits_for_a_busy_lock_then_reports_concurrent_update(ws):
    import threading

    with ws.begin(allowed_sources=[O1]) as tx:
        append(tx, OFFSITE, NEW_PARAGRAPH)
        errors = []
        holding, release = threading.Event(), threading.Event()

        def hold():
            with Workspace(ws.root).lock():
                holding.set()
                release.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        holding.wait(10)
        try:
            tx.commit("busy")
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        release.set()
        t.join()
    assert errors and errors[0].code == "CONCURRENT_UPDATE" and errors[0].retryable


def test_the_reference_workspace_opens_without_git_and_accepts_a_transaction(written_home):
    root = written_home / "memory"
    assert not (root / ".git").exists()
    ws = Workspace(root)  # not opened: the transaction starts history itself
    with ws.begin(allowed_sources=[O1]) as tx:
        append(tx, OFFSITE, NEW_PARAGRAPH)
        result = tx.commit("first")
    assert result.commit and commits(ws) == ["first", "memory: initialize history"]
    assert os.path.isdir(root / ".git")
