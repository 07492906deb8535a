"""The model behind the page, and the one function that says why a branch is still pending.

No browser here: these check the data the page draws (against the store, the marks and the
topics) and the rules for "why pending", each on a real home written through the write path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scriptorium.config import load_settings
from scriptorium.demo import SESSION
from scriptorium.memory.citations import citation_map
from scriptorium.memory.pending_reasons import pending_reasons
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.writing import Memory
from scriptorium.view import render_page, session_model
from scriptorium.view.model import _break_cycles
from scriptorium.view.page import asset

T0 = 1_800_000_000.0


def memory_at(home: Path, trigger: int, now: float = T0 + 60, **extra) -> Memory:
    settings = load_settings(home, {"trigger_tokens": trigger, **extra})
    return Memory(home, settings=settings, clock=lambda: now)


def say(memory: Memory, sid: str, node: str, role: str, text: str, **kw) -> str:
    return memory.store.append_message(sid, {"id": node, "role": role, "content": text,
                                             "created_at": T0, **kw})


def forked_home(home: Path) -> Memory:
    """u1 a1 u2 a2 on the head; a2 retried (a one-turn line); u2 edited and answered."""
    memory = memory_at(home, 10_000)
    memory.store.create_session("s", title="Plans")
    for node, role in (("u1", "user"), ("a1", "assistant"), ("u2", "user"),
                       ("a2", "assistant")):
        say(memory, "s", node, role, f"text of {node}")
    memory.write_session("s")  # the head whatever it holds
    memory.store.retry("s", "a2", "another answer", node_id="a2r")
    memory.store.edit("s", "u2", "a different question", node_id="u2e")
    say(memory, "s", "a2e", "assistant", "the answer to it")
    memory.store.set_head("s", "a2")
    return memory


def test_why_pending_names_the_rule_that_holds_each_branch_back(home):
    forked_home(home)
    reasons = pending_reasons(memory_at(home, 10_000, side_branches="threshold"), "s")
    assert {tip: r.code for tip, r in reasons.items()} == {
        "a2": "nothing_pending", "a2r": "rejected_reply", "a2e": "below_threshold"}
    assert reasons["a2r"].pending_ids == ["a2r"] and reasons["a2e"].pending_ids == ["u2e", "a2e"]
    assert reasons["a2e"].threshold == 10_000 and reasons["a2e"].tokens > 0
    # at the threshold, an off-head line is due at the next boundary write
    assert pending_reasons(memory_at(home, 3), "s")["a2e"].code == "due"


@pytest.mark.parametrize("rule, retry, edit", [
    ("threshold", "rejected_reply", "below_threshold"),
    ("conversation", "rejected_reply", "due"),  # a line with a user turn is written
    ("all", "due", "due"),
])
def test_the_side_branch_rule_decides_which_off_head_lines_wait(home, rule, retry, edit):
    forked_home(home)
    reasons = pending_reasons(memory_at(home, 10_000, side_branches=rule), "s")
    assert (reasons["a2r"].code, reasons["a2e"].code) == (retry, edit)


def test_the_head_waits_below_the_threshold_until_it_has_been_idle_long_enough(home):
    memory = forked_home(home)
    say(memory, "s", "u3", "user", "one more thing")
    assert pending_reasons(memory_at(home, 10_000, now=T0 + 60), "s")["u3"].code == \
        "below_threshold"
    idle = memory.settings.idle_allowance_seconds
    assert pending_reasons(memory_at(home, 10_000, now=T0 + idle + 1), "s")["u3"].code == "due"
    assert pending_reasons(memory_at(home, 2, now=T0 + 60), "s")["u3"].code == "due"


def test_a_failure_the_runtime_recorded_is_the_reason(view_home):
    from viewkit import FAILED

    reason = pending_reasons(view_home["memory"], FAILED)["d2"]
    assert reason.code == "failed_write"
    assert reason.failure["reason_code"] == "WRITER_PRECONDITION_FAILED"
    assert reason.failure["retryable"] is False
    assert "topic template is missing" in reason.message


def test_legacy_cursors_hold_everything_back_until_migration(home):
    memory = forked_home(home)
    runtime = memory.workspace.runtime_dir / "runtime.json"
    data = json.loads(runtime.read_text()) if runtime.exists() else {}
    runtime.write_text(json.dumps({**data, "cursors": {"s": 3}}))
    assert pending_reasons(memory_at(home, 10_000), "s")["a2e"].code == "migration_pending"


def test_the_model_holds_every_node_edge_mark_and_citation_of_the_store(view_home):
    memory = view_home["memory"]
    model = session_model(memory, SESSION)
    nodes = memory.store.get_nodes(SESSION)
    assert [n["id"] for n in model["nodes"]] == [n.id for n in nodes]
    ids = [n.id for n in nodes]
    for entry, node in zip(model["nodes"], nodes):
        parent = ids[entry["parent"]] if entry["parent"] >= 0 else None
        assert parent == (node.predecessor if node.predecessor in ids else
                          node.caller if node.caller in ids else None)
        assert (entry["state"] == "written") == (node.metadata.get(MARK_KEY) ==
                                                 memory.workspace_id)
    assert ids[model["session"]["head"]] == memory.store.head(SESSION)
    assert sorted(ids[b["tip"]] for b in model["branches"]) == sorted(
        r["tip"] for r in memory.store.list_branches(SESSION))
    cited = citation_map(memory.workspace)
    for entry in model["nodes"]:
        want = [block for _, block in cited.get(f"openprogram/{SESSION}/{entry['id']}", [])]
        assert [model["blocks"][i]["block_id"] for i in entry["cites"]] == want
    for block in model["blocks"]:
        assert f"^{block['block_id']}" in model["topics"][block["path"]]


def test_long_text_is_cut_in_the_page_and_says_how_long_it_was(home):
    memory = memory_at(home, 10_000)
    memory.store.create_session("big")
    say(memory, "big", "u1", "user", "x" * 9000)
    entry = session_model(memory, "big", text_limit=100)["nodes"][0]
    assert len(entry["text"]) == 100 and entry["chars"] == 9000


def test_text_in_the_model_cannot_end_the_script_element(home):
    memory = memory_at(home, 10_000)
    memory.store.create_session("x")
    nasty = "</script><script>alert(1)</script><!-- & \u2028"
    say(memory, "x", "u1", "user", nasty)
    page = render_page(session_model(memory, "x"))
    assert "alert(1)</script>" not in page and "<!--" not in page.split('id="model"')[1]
    raw = page.split('<script type="application/json" id="model">')[1].split("</script>")[0]
    assert json.loads(raw)["nodes"][0]["text"] == nasty


def test_a_predecessor_cycle_is_cut_so_the_page_still_draws():
    assert _break_cycles([1, 2, 0, -1, 3]) in ([-1, 2, 0, -1, 3], [1, -1, 0, -1, 3],
                                               [1, 2, -1, -1, 3])


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_text_contrast_is_at_least_4_5_and_glyphs_at_least_3():
    css = dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-f]{6})", asset("view.css")))
    text_pairs = [("fg", "bg"), ("muted", "bg"), ("muted", "panel"), ("fg", "panel"),
                  ("fg", "select"), ("fg", "match"), ("head-fg", "head-bg"),
                  ("fork-fg", "fork-bg"), ("tip-fg", "bg")]
    text_pairs += [(state, "bg") for state in ("written", "pending", "tool", "runtime",
                                               "summary", "other")]  # state pills are text
    for fg, bg in text_pairs:
        assert contrast(css[fg], css[bg]) >= 4.5, (fg, bg, contrast(css[fg], css[bg]))
    for glyph in ("written", "pending", "tool", "runtime", "summary", "other", "focus",
                  "edge"):
        assert contrast(css[glyph], css["bg"]) >= 3.0, glyph


@pytest.mark.parametrize("seed", range(5))
def test_pending_for_many_tips_at_once_equals_one_walk_per_tip(tmp_path, seed):
    import random

    from scriptorium.memory.pending_reasons import pending_by_tip
    from scriptorium.sessions import SessionStore

    rng = random.Random(seed)
    home = tmp_path / "home"
    store = SessionStore(home / "sessions", git=False)
    memory = Memory(home, settings=load_settings(home, {"trigger_tokens": 8}), store=store)
    store.create_session("r")
    users, replies = [], []
    for step in range(60):
        pick = rng.random()
        if pick < 0.1 and replies:
            replies.append(store.retry("r", rng.choice(replies), f"retry {step}"))
        elif pick < 0.2 and users:
            users.append(store.edit("r", rng.choice(users), f"edit {step}"))
        elif pick < 0.27 and replies:
            users.append(store.spawn("r", rng.choice(replies), f"task {step}"))
            store.set_head("r", users[-1])
        elif pick < 0.35 and replies:
            store.set_head("r", rng.choice(replies))
        elif pick < 0.42:  # mark the oldest part of a backlog, as a write does
            tip = rng.choice(memory.live_tips("r"))
            batch = memory.pending("r", tip)[:rng.randint(1, 4)]
            store.merge_node_metadata_batch(
                "r", {r.node_id: {MARK_KEY: memory.workspace_id} for r in batch})
        else:
            role = "assistant" if store.head("r") in users else "user"
            node = store.append_message("r", {"role": role, "content": f"turn {step} words"})
            (users if role == "user" else replies).append(node)
    tips = memory.live_tips("r")
    assert len(tips) > 2
    assert pending_by_tip(memory, "r", tips) == {tip: memory.pending("r", tip) for tip in tips}


def test_a_recorded_failure_stops_being_the_reason_once_the_session_moves_on(view_home,
                                                                          tmp_path):
    import shutil

    from viewkit import FAILED

    import time

    home = tmp_path / "copy"
    shutil.copytree(view_home["home"], home)
    memory = memory_at(home, 10_000, now=time.time())  # the turns are from now: not idle
    assert pending_reasons(memory, FAILED)["d2"].code == "failed_write"
    memory.store.append_message(FAILED, {"id": "d3", "role": "user", "content": "And Fridays?"})
    reason = pending_reasons(memory, FAILED)["d3"]
    assert reason.code == "below_threshold" and reason.failure is None
