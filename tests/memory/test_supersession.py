"""What holds across batches: a correction written in a later batch cannot edit the committed
older claim, so the newer claim says what it replaces, the Current state block (rewritten in
place) says what holds, and search and context derive "superseded" from the replacement,
only where the replacement is on the reader's line."""

from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st

from scriptorium.config import load_settings
from scriptorium.memory.claims import ValueClaim, superseded_by, value_claim
from scriptorium.memory.search import search
from scriptorium.memory.topics import parse_topic
from scriptorium.memory.writers.topic_scan import scan_topic
from scriptorium.memory.writing import Memory

TOPIC = "topics/alerting.md"


def say(mem: Memory, node: str, role: str, text: str, after: str | None = None) -> None:
    msg = {"id": node, "role": role, "content": text}
    if after is None:
        mem.store.append_message("s", msg)
    else:
        mem.store.append_after("s", after, msg)


def written(mem: Memory) -> None:
    result = mem.write_session("s")
    assert result.failure is None, result.failure


def alerting(homes) -> Memory:
    """Session s on alerting (160 ms written), beside an unrelated conversation (so the
    search words are not in most claims), on either kind of home."""
    mem = homes.open()
    mem.store.create_session("other", title="Lisbon offsite")
    for i, text in enumerate(["The venue budget is 4000 euros.", "We expect 40 guests.",
                              "Dinner is at Tasca do Chico.", "Flights land on Friday.",
                              "Dana is our travel lead."]):
        mem.store.append_message("other", {"id": f"o{i}", "role": "user", "content": text})
    assert mem.write_session("other").failure is None
    mem.store.create_session("s", title="Alerting")
    say(mem, "n0", "user", "Set the alert threshold to 160 ms.")
    say(mem, "n1", "assistant", "Noted, the alert threshold is 160 ms.")
    written(mem)
    return mem


def scores(hits) -> dict[str, tuple[int, float]]:
    """value stated by a claim of the Values section -> (its rank, its score)."""
    out = {}
    for rank, hit in enumerate(hits):
        m = re.match(r"Alert threshold: (\d+) ms \(the", hit.text)
        if m:
            out[m.group(1)] = (rank, hit.score)
    return out


# -- the claim grammar -----------------------------------------------------------------------


def test_a_value_claim_names_its_line_its_value_and_what_it_replaces():
    claim = value_claim("Venue budget: 1,500 euros (the user: Make it 1500.) "
                        "(replaces 1,200 euros)")
    assert claim == ValueClaim("venue budget", "1,500 euros", "1,200 euros")
    assert value_claim("- Venue budget: 900 euros (was 1,500 euros)") == \
        ValueClaim("venue budget", "900 euros")
    assert value_claim("The user asked: What if it were 3 days?") is None
    assert value_claim("Decided (the user): go with 3 replicas.") is None


def test_only_a_later_claim_on_the_same_line_replacing_that_value_supersedes():
    old = ValueClaim("alert threshold", "160 ms")
    assert superseded_by(old, [ValueClaim("alert threshold", "150 ms", "160 ms")]) == 0
    assert superseded_by(old, [ValueClaim("venue budget", "150 euros", "160 euros")]) is None
    assert superseded_by(old, [ValueClaim("alert threshold", "150 ms", "170 ms")]) is None
    assert superseded_by(old, [ValueClaim("alert threshold", "150 ms")]) is None


# -- search and context, one reader and several -----------------------------------------------


def test_a_correction_in_a_later_batch_ranks_the_replaced_claim_below_the_replacing_one(homes):
    mem = alerting(homes)
    say(mem, "n2", "user", "Make it 150 instead.")
    written(mem)
    text = mem.show(TOPIC)["text"]
    assert "(superseded" not in text  # the committed claim was left as written
    hits = mem.search("alert threshold 160", top_k=10)
    got = scores(hits)
    assert got["150"] < got["160"]  # ranked above it (and scored higher)
    # the current state answers first, the old value nowhere above the holding one
    assert hits[0].text.startswith("- Alert threshold: 150 ms (was 160 ms)")


def test_a_replacement_on_another_branch_does_not_supersede_for_a_reader_on_this_line(homes):
    mem = alerting(homes)
    say(mem, "n2", "user", "Make it 150 instead.", after="n1")   # branch P corrects it
    written(mem)
    say(mem, "n3", "user", "Let's look at the dashboards next.", after="n1")  # branch Q
    written(mem)
    query = "alert threshold 160 150"
    on_q = scores(mem.search(query, top_k=10, session="s", head="n3"))
    on_p = scores(mem.search(query, top_k=10, session="s", head="n2"))
    blind = scores(mem.search(query, top_k=10))
    assert on_p["150"][0] < on_p["160"][0] and blind["150"][0] < blind["160"][0]
    assert on_q["160"][0] < on_q["150"][0]  # on Q nobody changed it: 160 holds
    assert on_q["160"][1] > 2.5 * on_p["160"][1]  # and it is not demoted there


def test_memory_context_puts_the_holding_value_above_the_replaced_one(homes):
    mem = alerting(homes)
    say(mem, "n2", "user", "Make it 150 instead.")
    say(mem, "n3", "assistant", "Updated to 150 ms.")
    written(mem)
    say(mem, "n4", "user", "What is the alert threshold now?")
    texts = [b.text for b in mem.context("s").blocks]
    holding = next(i for i, t in enumerate(texts) if "150" in t)
    assert holding == 0
    assert all(i > holding for i, t in enumerate(texts) if "160" in t and "150" not in t)


def test_the_newest_turn_leads_memory_context(homes):
    mem = homes.open()
    mem.store.create_session("s", title="Offsite")
    turns = ["The venue budget is 4000 euros.", "Noted.", "We expect 40 guests.", "Noted.",
             "Dinner is at Tasca do Chico on the first night.", "Lovely choice.",
             "The guests fly in on Friday morning.", "Noted."]
    for i, text in enumerate(turns):
        say(mem, f"n{i}", "user" if i % 2 == 0 else "assistant", text)
    written(mem)
    say(mem, "q", "user", "Remind me of the venue budget?")
    assert "4000" in mem.context("s").blocks[0].text


# -- the current state block --------------------------------------------------------------------


def test_the_current_state_is_one_block_rewritten_in_place_keeping_every_citation(homes):
    mem = alerting(homes)
    seen: list[set[str]] = []
    block_ids = set()
    for node, text in (("n2", "Make it 150 instead."), ("n3", "Actually, make it 140.")):
        say(mem, node, "user", text)
        written(mem)
        doc = parse_topic(mem.show(TOPIC)["text"], TOPIC)
        state = [b for b in doc.blocks if b.headings[-1] == "Current state"]
        assert len(state) == 1
        block_ids.add(state[0].id)
        seen.append({s.target for fid in state[0].citations for s in doc.evidence[fid].sources})
    assert len(block_ids) == 1
    assert seen[0] < seen[1]
    doc = parse_topic(mem.show(TOPIC)["text"], TOPIC)
    state = next(b for b in doc.blocks if b.headings[-1] == "Current state")
    assert state.claims[0].text == "- Alert threshold: 140 ms (was 150 ms)"


_VALUES = st.lists(st.integers(min_value=10, max_value=99), min_size=1, max_size=5)


@settings(max_examples=8, deadline=None)
@given(values=_VALUES, cuts=st.lists(st.booleans(), min_size=5, max_size=5))
def test_whatever_the_batching_the_last_value_said_is_what_holds(tmp_path_factory, values,
                                                                  cuts):
    """Values set one after another on one line, written in any number of batches: the
    state says the last one, and search ranks a claim stating it first."""
    home = tmp_path_factory.mktemp("home")
    mem = Memory(home, settings=load_settings(home))
    mem.store.create_session("s", title="Alerting")
    for i, value in enumerate(values):
        say(mem, f"u{i}", "user", f"Set the alert threshold to {value} ms.")
        if cuts[i]:
            written(mem)
    written(mem)
    text = (mem.workspace.root / TOPIC).read_text()
    doc = parse_topic(text, TOPIC)
    state = next(b for b in doc.blocks if b.headings[-1] == "Current state")
    scanned = scan_topic(text, "Current state")  # the writer's one-pass read agrees
    assert scanned.state is not None and scanned.state.ids == state.ids
    assert [c.text for c in scanned.state.claims] == [c.text for c in state.claims]
    lines = [c.text for c in state.claims if c.text.startswith("- Alert threshold")]
    assert len(lines) == 1 and lines[0].startswith(f"- Alert threshold: {values[-1]} ms")
    top = search(mem.workspace, "alert threshold", top_k=1)[0]
    assert re.match(rf"-? ?Alert threshold: {values[-1]} ms", top.text)
