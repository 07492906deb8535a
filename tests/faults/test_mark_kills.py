"""A real writer process SIGKILLed in the middle of marking a batch (after the N-th of its
renames, ``--kill-at mark-renamed:N``): every node file is still whole JSON holding everything
it held, the marks are exactly the first N turns of the batch, the redo marks the rest and
only the rest (each turn marked and cited once), and the leftovers are swept."""

from __future__ import annotations

import json
import os

from scriptorium.memory.records import MARK_KEY
from scriptorium.sessions import SessionStore

from faultkit import check_files, check_marks_prefix, final_state, read_jsonl, run_worker

TURNS = 24
KILLED_AT = 9  # renames done when the process dies


def _node_files(hist):
    return {n: json.loads((hist / n).read_bytes()) for n in os.listdir(hist)
            if not n.startswith(".")}


def _without_metadata(nodes):
    return {n: {k: v for k, v in raw.items() if k != "metadata"} for n, raw in nodes.items()}


def test_a_writer_killed_between_two_renames_of_its_mark_batch_loses_nothing_and_the_redo_marks_the_rest_once(  # noqa: E501
        tmp_path):
    home = tmp_path / "home"
    store = SessionStore(home / "sessions", git=False)
    store.create_session("s", title="Offsite")
    for i in range(TURNS):
        store.append_message("s", {"role": "user" if i % 2 == 0 else "assistant",
                                   "content": f"turn {i}: the Alfama room holds {i + 5}"},
                             commit=False)
    order = [m["id"] for m in store.get_branch("s")]
    hist = home / "sessions" / "s" / "history"
    before = _node_files(hist)
    audit, marks = tmp_path / "audit.jsonl", tmp_path / "marks.jsonl"
    args = ["write", str(home), "--mode", "session", "--trigger", "100000",
            "--audit", str(audit), "--marks", str(marks)]

    run = run_worker([*args, "--kill-at", f"mark-renamed:{KILLED_AT}"])
    assert run.killed  # SIGKILLed mid-batch, inside merge_node_metadata_batch

    after = _node_files(hist)  # every node file parses (json.loads raised otherwise)
    assert sorted(after) == sorted(before)
    assert _without_metadata(after) == _without_metadata(before)  # nothing lost
    check_files(home)
    check_marks_prefix(home)
    fresh = SessionStore(home / "sessions", git=False)
    ws = {m.get(MARK_KEY) for m in fresh.get_branch("s")} - {None}
    assert len(ws) == 1
    marked = [m["id"] for m in fresh.get_branch("s") if m.get(MARK_KEY)]
    assert marked == order[:KILLED_AT]  # a prefix of the batch, in batch order
    leftovers = [n for n in os.listdir(hist) if n.startswith(".")]
    assert leftovers and all(n.endswith(".tmp") for n in leftovers)  # never read as nodes

    redo = run_worker(args)
    assert not redo.killed
    handed = [entry["batch"] for entry in read_jsonl(audit)]
    assert len(handed) == 2 and len(handed[0]) == TURNS
    assert handed[1] == handed[0][KILLED_AT:]  # the redo is handed only the unmarked rest
    assert [e["marked"] for e in read_jsonl(marks)] == [order[KILLED_AT:]]
    final = final_state(home)
    assert final.eligible == TURNS
    assert final.omissions == [] and final.uncited == [] and final.duplicate_citations == []

    past = os.stat(hist).st_mtime - 120  # a minute on, the leftovers are a dead writer's
    for name in os.listdir(hist):
        if name.startswith("."):
            os.utime(hist / name, (past, past))
    SessionStore(home / "sessions", git=False).merge_node_metadata_batch(
        "s", {order[0]: {MARK_KEY: ws.pop()}})  # the next write's scan sweeps them
    assert sorted(os.listdir(hist)) == sorted(before)
