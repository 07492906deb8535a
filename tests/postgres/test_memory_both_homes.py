"""The memory behaviour a user can observe, on a directory home and on a PostgreSQL home: the
same sessions written the same way give the same marks, the same topics, the same pending
work and the same failures. Nothing here looks at files; what differs between the homes
(where the bytes live) is tested in test_pg_memory.py. Most memory behaviour tests run on both
homes where they live (tests/memory, fixtures ``homes`` and ``shared_homes``); these are the
ones no module of tests/memory holds."""

from __future__ import annotations

import pytest

from scriptorium.memory.citations import cited_sources
from scriptorium.errors import ScriptoriumError
from scriptorium.memory.records import MARK_KEY
from testkit import RaisingWriter


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


def test_a_long_lived_reader_sees_what_another_process_installed(homes):
    reader = homes.open()
    assert reader.status()["counts"]["topics"] == 0
    writer = homes.open(trigger_tokens=1)
    writer.store.create_session("s", title="Deploys")
    writer.store.append_message("s", {"id": "m0", "role": "user",
                                      "content": "Deploys happen on Tuesdays after 14:00 UTC."})
    assert writer.write_session("s").failure is None
    assert reader.status()["counts"]["topics"] == 1
    assert reader.status()["revision"] == writer.status()["revision"]
    assert "Tuesdays" in reader.show("deploys.md")["text"]
