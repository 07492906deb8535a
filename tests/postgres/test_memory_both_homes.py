"""The memory behaviour a user can observe, on a directory home and on a PostgreSQL home: the
same sessions written the same way give the same marks, the same topics, the same pending
work and the same failures. Nothing here looks at files; what differs between the homes
(where the bytes live) is tested in test_pg_memory.py."""

from __future__ import annotations

import re

import pytest

from scriptorium.memory.citations import cited_sources
from scriptorium.errors import ReasonCode, ScriptoriumError
from scriptorium.memory.records import MARK_KEY
from testkit import IdleWriter, RaisingWriter, RecordingWriter, RejectedWriter


def chain(store, sid: str, names: list[str], after: str | None = None) -> None:
    prev = after
    for i, name in enumerate(names):
        msg = {"id": name, "role": "user" if i % 2 == 0 else "assistant",
               "content": " ".join(f"{name}w{k}" for k in range(4))}
        if prev is not None:
            msg["predecessor"] = prev
        store.append_message(sid, msg)
        prev = name


def marked(mem, sid: str) -> set[str]:
    return {n.id for n in mem.store.get_nodes(sid) if n.metadata.get(MARK_KEY) == mem.workspace_id}


def topic_text(mem) -> dict[str, str]:
    """Every topic as show() returns it (no file access)."""
    return {rel: mem.show(rel)["text"] for rel in mem.workspace.topic_paths()}


def test_a_forced_write_marks_every_live_branch_and_writes_shared_turns_once(homes):
    writer = RecordingWriter()
    mem = homes.open(writer, trigger_tokens=1)
    mem.store.create_session("s", title="Planning")
    chain(mem.store, "s", [f"m{i}" for i in range(6)])
    mem.store.retry("s", "m5", "a different answer", node_id="r5")
    mem.store.spawn("s", "m3", "a sub agent task", node_id="sub0")
    result = mem.write_session("s")
    assert result.failure is None
    assert len(writer.seen) == len(set(writer.seen)), "a shared turn reached the writer twice"
    for row in mem.store.list_branches("s"):
        assert mem.pending("s", row["tip"]) == []
    assert marked(mem, "s") >= {f"m{i}" for i in range(6)} | {"r5", "sub0"}


def test_a_branch_forked_after_a_write_owes_only_its_own_turns(homes):
    mem = homes.open(trigger_tokens=10_000)
    mem.store.create_session("s")
    chain(mem.store, "s", [f"m{i}" for i in range(6)])
    assert mem.write_session("s").failure is None
    chain(mem.store, "s", ["b0", "b1"], after="m3")
    assert [r.node_id for r in mem.pending("s", "b1")] == ["b0", "b1"]
    status = mem.status(["s"])
    rows = {b["tip"]: b for b in status["sessions"][0]["branches"]}
    assert rows["b1"]["pending_ids"] == ["b0", "b1"]


@pytest.mark.parametrize("writer, code", [
    (RaisingWriter(RuntimeError("model crashed")), "WRITER_FAILURE_UNKNOWN"),
    (RejectedWriter(), "INVALID_TOPIC_FORMAT"),
    (IdleWriter(), "WRITER_NO_PROGRESS"),
])
def test_a_failed_rejected_or_unchanged_batch_marks_nothing_and_blocks_the_branch(
        homes, writer, code):
    mem = homes.open(writer, trigger_tokens=1)
    mem.store.create_session("s")
    chain(mem.store, "s", ["m0", "m1"])
    result = mem.write_session("s")
    assert result.failure is not None and result.failure.reason_code == code
    assert marked(mem, "s") == set()
    assert mem.workspace.topic_paths() == []
    # the evidence was archived first (replayable, harmless); only the mark is withheld
    assert mem.workspace.sources.lookup("openprogram/s/m0") is not None
    again = homes.open()  # another process sees the same pending work and the same block
    (branch,) = again.status(["s"])["sessions"][0]["branches"]
    assert branch["pending_ids"] == ["m0", "m1"]
    assert branch["blocked"]["reason_code"] == code


def test_a_redo_after_a_failed_mark_marks_without_writing_twice(homes):
    mem = homes.open(trigger_tokens=10_000)
    mem.store.create_session("s", title="Deploys")
    chain(mem.store, "s", ["m0", "m1"])
    real_merge = mem.store.merge_node_metadata_batch

    def crash(*_a, **_k):
        raise OSError("killed before the mark")

    mem.store.merge_node_metadata_batch = crash
    assert mem.write_session("s").failure is not None
    before = topic_text(mem)
    assert before and marked(mem, "s") == set()
    mem.store.merge_node_metadata_batch = real_merge
    redo = homes.open(trigger_tokens=10_000)
    result = redo.write_session("s")
    assert result.failure is None and result.steps[0].marked == ["m0", "m1"]
    assert topic_text(redo) == before  # nothing written twice


def test_writing_an_already_written_batch_again_changes_nothing(homes):
    mem = homes.open(trigger_tokens=1)
    mem.store.create_session("s", title="Offsite")
    chain(mem.store, "s", ["m0", "m1"])
    mem.write_session("s")
    revision = mem.status()["revision"]
    step = mem.write_batch("s", mem.branch_records("s"))
    assert step.failure is None and step.changed_files == []
    assert homes.open().status()["revision"] == revision


def test_the_workspace_id_is_one_durable_value_for_every_opener(homes):
    first = homes.open().workspace_id
    assert homes.open().workspace_id == first
    assert homes.open().status()["workspace_id"] == first


def test_status_is_read_only(homes):
    mem = homes.open(trigger_tokens=1)
    mem.store.create_session("s", title="Offsite")
    chain(mem.store, "s", ["m0", "m1"])
    mem.write_session("s")
    chain(mem.store, "s", ["m2"])
    revision = mem.status()["revision"]
    for _ in range(2):
        data = homes.open().status(["s"])
        assert data["revision"] == revision
        assert data["sessions"][0]["branches"][0]["pending_ids"] == ["m2"]


def test_show_and_follow_read_back_what_was_written(homes):
    mem = homes.open(trigger_tokens=1)
    mem.store.create_session("s", title="Deploys")
    mem.store.append_message("s", {"id": "m0", "role": "user",
                                   "content": "Deploys happen on Tuesdays after 14:00 UTC."})
    assert mem.write_session("s").failure is None
    reader = homes.open()
    (path,) = reader.workspace.topic_paths()
    shown = reader.show(path)
    assert "Tuesdays" in shown["text"]
    followed = reader.follow("openprogram/s/m0")
    assert followed["archived"] and followed["in_session_store"]
    with pytest.raises(ScriptoriumError):
        reader.follow("openprogram/s/nope")


def test_verify_finds_a_gap_and_repair_takes_back_the_stranding_marks(homes):
    mem = homes.open(trigger_tokens=1)
    mem.store.create_session("s", title="Offsite")
    chain(mem.store, "s", ["m0", "m1", "m2", "m3"])
    assert mem.write_session("s").failure is None
    assert mem.verify().ok
    mem.store.merge_node_metadata_batch("s", {"m1": {MARK_KEY: None}})
    report = homes.open().verify()
    assert not report.ok and {p["node_id"] for p in report.to_dict()["problems"]} >= {"m1"}
    repaired = homes.open().verify(repair=True)
    assert marked(homes.open(), "s") == {"m0"} or repaired.to_dict()["problems"]
    assert homes.open().write_session("s").failure is None
    assert homes.open().verify().ok


def test_backfill_writes_archived_turns_no_topic_cites(homes):
    mem = homes.open(RaisingWriter(RuntimeError("model crashed")), trigger_tokens=10_000)
    mem.store.create_session("s", title="Offsite")
    chain(mem.store, "s", ["m0", "m1"])
    assert mem.write_session("s").failure is not None  # archived, never cited
    report = homes.open().backfill().to_dict()
    assert (report["candidates"], report["remaining"]) == (2, 0) and report["processed"] >= 1
    assert homes.open().backfill().to_dict()["candidates"] == 0
    refs = ["openprogram/s/m0", "openprogram/s/m1"]
    assert cited_sources(homes.open().workspace, refs) == set(refs)


def test_migrate_on_a_home_without_cursors_is_a_no_op(homes):
    report = homes.open().migrate()
    assert report.to_dict()["migrated"] is False


def test_reorganize_runs_and_keeps_every_citation(homes):
    mem = homes.open(trigger_tokens=1)
    mem.store.create_session("s", title="Offsite")
    chain(mem.store, "s", ["m0", "m1", "m2", "m3"])
    mem.write_session("s")
    report = homes.open().reorganize()
    assert report is not None
    assert homes.open().verify().ok


def test_an_install_hook_sees_the_changed_topic_files(homes):
    mem = homes.open(trigger_tokens=1)
    seen: list[list[str]] = []
    mem.workspace.add_install_hook(lambda ws, result: seen.append(list(result.changed_files)))
    mem.store.create_session("s", title="Deploys")
    chain(mem.store, "s", ["m0", "m1"])
    steps = mem.write_session("s").steps
    assert seen == [step.changed_files for step in steps if step.changed_files]
    assert seen and all(rel.startswith("topics/") for files in seen for rel in files)


def test_search_and_context_answer_the_same_on_both_homes(homes):
    mem = homes.open(trigger_tokens=1)
    mem.store.create_session("s", title="Deploys")
    mem.store.append_message("s", {"id": "m0", "role": "user",
                                   "content": "Deploys happen on Tuesdays after 14:00 UTC."})
    mem.write_session("s")
    assert mem.search("Tuesdays deploys")[0].sources == ["openprogram/s/m0"]
    hits = mem.search("Tuesdays deploys", session="s")
    assert hits[0].sources == ["openprogram/s/m0"] and hits[0].branch == "on_line"
    mem.store.append_message("s", {"id": "m1", "role": "user", "content": "When do deploys happen?"})
    assert "Tuesdays" in mem.context("s").markdown


def test_a_correction_in_a_later_batch_holds_for_its_line_on_both_homes(homes):
    mem = homes.open()
    mem.store.create_session("other", title="Lisbon offsite")
    for i, text in enumerate(["The venue budget is 4000 euros.", "We expect 40 guests.",
                              "Dinner is at Tasca do Chico."]):
        mem.store.append_message("other", {"id": f"o{i}", "role": "user", "content": text})
    assert mem.write_session("other").failure is None
    mem.store.create_session("s", title="Alerting")
    mem.store.append_message("s", {"id": "n0", "role": "user",
                                   "content": "Set the alert threshold to 160 ms."})
    mem.store.append_message("s", {"id": "n1", "role": "assistant",
                                   "content": "Noted, the alert threshold is 160 ms."})
    assert mem.write_session("s").failure is None
    mem.store.append_after("s", "n1", {"id": "n2", "role": "user",
                                       "content": "Make it 150 instead."})
    assert mem.write_session("s").failure is None
    mem.store.append_after("s", "n1", {"id": "n3", "role": "user",
                                       "content": "Let's look at the dashboards next."})
    assert mem.write_session("s").failure is None

    def first_value(hits) -> str:
        for hit in hits:
            found = re.match(r"Alert threshold: (\d+) ms \(the", hit.text)
            if found:
                return found.group(1)
        raise AssertionError([h.text for h in hits])

    query = "alert threshold 160 150"
    assert first_value(mem.search(query, top_k=10)) == "150"            # blind: the newest holds
    assert first_value(mem.search(query, top_k=10, session="s", head="n2")) == "150"
    assert first_value(mem.search(query, top_k=10, session="s", head="n3")) == "160"
