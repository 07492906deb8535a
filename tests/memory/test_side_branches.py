"""Side lines are written at the session boundary; what still waits is reported with why
(on both kinds of home, except where config.toml is read)."""

from __future__ import annotations

import json

import pytest
from scriptorium.config import load_settings
from scriptorium.demo import render_report, run_demo
from scriptorium.errors import InvalidInput
from scriptorium.memory.writing import Memory

from testkit import RecordingWriter


def build(homes, writer=None, retry_text: str = "a2r words", **settings) -> Memory:
    """Head line u1 a1 u2 a2; an edit of u2 (u2e a2e, 2 turns); a retry of a2 (a2r); a
    sub-agent spawned from a1 (sub, sub1); then the head goes back to a2 and on to u3."""
    mem = homes.open(writer, **settings)
    s = mem.store
    s.create_session("s", title="Plans")
    for node_id, role in (("u1", "user"), ("a1", "assistant"), ("u2", "user"),
                          ("a2", "assistant")):
        s.append_message("s", {"id": node_id, "role": role, "content": f"{node_id} words"})
    s.edit("s", "u2", "u2e words", node_id="u2e")
    s.append_message("s", {"id": "a2e", "role": "assistant", "content": "a2e words"})
    s.retry("s", "a2", retry_text, node_id="a2r")
    s.spawn("s", "a1", "sub task words", node_id="sub")
    s.append_message("s", {"id": "sub1", "role": "assistant", "content": "sub1 words",
                           "predecessor": "sub"})
    s.set_head("s", "a2")
    s.append_message("s", {"id": "u3", "role": "user", "content": "u3 words"})
    return mem


def written(mem: Memory) -> set[str]:
    return {n.id for n in mem.store.get_nodes("s")
            if n.metadata.get("memory_written_scriptorium") == mem.workspace_id}


def test_by_default_an_edited_line_and_a_sub_agents_branch_are_written_below_the_threshold(homes):
    mem = build(homes)
    assert mem.settings.side_branches == "conversation"
    assert mem.write_session("s").failure is None
    assert {"u2e", "a2e", "sub", "sub1", "u1", "a1", "u2", "a2", "u3"} <= written(mem)


def test_a_retried_reply_only_keeps_waiting_and_is_reported_as_a_rejected_reply(homes):
    mem = build(homes)
    mem.write_session("s")
    assert "a2r" not in written(mem)
    (row,) = mem.still_pending("s")
    assert (row.tip, row.head, row.turns, row.reason) == ("a2r", False, ["a2r"],
                                                          "rejected_reply")


def test_a_retried_reply_is_written_once_it_reaches_the_threshold(homes):
    mem = build(homes, retry_text=" ".join(["reconsidered"] * 40), trigger_tokens=60)
    mem.write_session("s")
    assert "a2r" in written(mem) and mem.still_pending("s") == []


def test_the_threshold_policy_keeps_every_short_side_branch_waiting(homes):
    mem = build(homes, side_branches="threshold")
    mem.write_session("s")
    assert written(mem) == {"u1", "a1", "u2", "a2", "u3"}
    reasons = {p.tip: p.reason for p in mem.still_pending("s")}
    assert reasons == {"a2e": "below_threshold", "a2r": "rejected_reply",
                       "sub1": "below_threshold"}


def test_the_report_after_a_write_and_the_view_give_each_branch_the_same_reason(homes):
    """One rule (memory/pending_reasons.py) answers both: what a write left, and the page."""
    from scriptorium.memory.pending_reasons import pending_reasons

    mem = build(homes, side_branches="threshold")
    mem.write_session("s")
    after = {p.tip: (p.reason, p.turns) for p in mem.still_pending("s")}
    now = {tip: (r.code, r.pending_ids) for tip, r in pending_reasons(mem, "s").items()
           if r.turns}
    assert after == now == {"a2e": ("below_threshold", ["u2e", "a2e"]),
                            "a2r": ("rejected_reply", ["a2r"]),
                            "sub1": ("below_threshold", ["sub", "sub1"])}


def test_the_all_policy_writes_every_side_branch_and_shared_turns_once(homes):
    writer = RecordingWriter()
    mem = build(homes, writer, side_branches="all")
    mem.write_session("s")
    assert "a2r" in written(mem) and mem.still_pending("s") == []
    assert len(writer.seen) == len(set(writer.seen))


def test_the_per_turn_path_reports_side_branches_waiting_for_the_boundary(homes):
    mem = build(homes)
    (result,) = mem.write(["s"], force=False)
    reasons = {p["tip"]: p["reason"] for p in result.to_dict()["pending"]}
    assert reasons["u3"] == "below_threshold"
    assert reasons["a2e"] == reasons["a2r"] == reasons["sub1"] == "session_boundary"


def test_a_failed_write_reports_what_it_left_as_failure(homes):
    class Broken(RecordingWriter):
        def write(self, request):
            raise RuntimeError("writer down")

    mem = build(homes, Broken())
    (result,) = mem.write(["s"], force=True)
    assert result.failure is not None
    assert result.pending and {p.reason for p in result.pending} == {"failure"}


def test_side_branches_comes_from_config_toml_then_the_environment(home):
    (home / "config.toml").write_text('[memory]\nside_branches = "all"\n')
    assert load_settings(home, environ={}).side_branches == "all"
    env = {"SCRIPTORIUM_SIDE_BRANCHES": "threshold"}
    assert load_settings(home, environ=env).side_branches == "threshold"
    with pytest.raises(InvalidInput, match="side_branches"):
        load_settings(home, environ={"SCRIPTORIUM_SIDE_BRANCHES": "some"})


def test_memory_write_prints_what_is_still_pending_and_why(homes):
    build(homes)
    cli = homes.cli()
    data = cli.json("memory", "write", "s", "--force")
    (row,) = data["sessions"]
    assert [(p["tip"], p["pending_ids"], p["reason"]) for p in row["pending"]] == \
        [("a2r", ["a2r"], "rejected_reply")]
    text = cli("memory", "write", "s", "--force").output
    assert "still pending on branch a2r: 1 turn(s)" in text and "rejected reply" in text


def test_the_demo_runs_on_default_settings_prints_them_and_says_why_the_retry_waits(tmp_path):
    report = run_demo(tmp_path / "d")
    data = json.loads(json.dumps(report.to_dict(), default=str))
    assert data["settings"] == {"trigger_tokens": 16000, "side_branches": "conversation",
                                "writer": "embedded"}
    assert [(p["tip"], p["reason"]) for p in data["pending"]] == [("a2-retry", "rejected_reply")]
    heads = {r["head"]: r["hits"] for r in data["readers"]}
    assert heads["a4"][0]["branch"] == "on_line" and "vegetarian" in heads["a4"][0]["text"]
    assert heads["a3"][0]["branch"] == "on_line" and "peanut" in heads["a3"][0]["text"]
    text = render_report(report)
    assert "side_branches = conversation" in text and "rejected reply" in text
