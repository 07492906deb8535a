"""`memory show` of a topic written from a realistic 30-turn conversation reads like notes a
careful colleague took (the example in docs/embedded-writer.md is this conversation): what
holds first, each value once with what it replaced, decisions, rules and action items with
their owner, no chatter, no echoes, nothing said twice."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterator

import pytest

from pgmemkit import new_homes
from storekit import HOME_KINDS
from scriptorium.memory.topics import parse_topic
from scriptorium.memory.writers.facts import KINDS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from offsite_conversation import TITLE, TURNS  # noqa: E402

TS = 1_785_000_000.0  # 2026-07-25


@pytest.fixture(scope="module", params=[(kind, trigger) for kind in HOME_KINDS
                                        for trigger in (300, 16_000)],
                ids=lambda p: f"{p[0]}-{'several-batches' if p[1] == 300 else 'one-batch'}")
def shown(request, tmp_path_factory) -> Iterator[str]:
    """The topic written on each kind of home, in several batches or in one."""
    homes = new_homes(request.param[0], tmp_path_factory.mktemp("home"), request)
    mem = homes.open(trigger_tokens=request.param[1])
    mem.store.create_session("offsite", title=TITLE)
    for i, (role, text) in enumerate(TURNS):
        mem.store.append_message("offsite", {"id": f"t{i + 1:02d}", "role": role,
                                             "content": text, "timestamp": TS + 60 * i})
    result = mem.write_session("offsite")
    assert result.failure is None and len(result.marked) == len(TURNS)
    assert (len(result.steps) > 1) == (request.param[1] == 300)
    yield mem.show("lisbon-team-offsite.md")["text"]
    homes.close()


def _section(text: str, heading: str) -> list[str]:
    body = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [re.sub(r"(\[\^[^\]]+\])+( \^[0-9a-f]+)?$", "", line) for line in body.splitlines()
            if line.strip() and not line.startswith("[^")]


def test_the_topic_opens_with_what_holds_now(shown):
    assert shown.startswith("# Lisbon team offsite\n\n## Current state\n")
    state = _section(shown, "Current state")
    for line in ("- Attendees: 20 (was 18)", "- Rooms: 17 (was 16)",
                 "- Venue budget: 6000 euros",
                 "- When: The offsite runs from 14 to 16 October.",
                 "- Rule: Pedro approves any spend above 5000 euros.",
                 "- Rule: Flights must land before noon on 14 October.",
                 "- Decided: We decided to go with the Hotel Baixa Central for everyone.",
                 "- To do (the assistant): send Joana the final headcount of 20 by Wednesday."):
        assert line in state, line
    assert len(state) == 10  # one line per thing that holds, nothing else


def test_sections_come_in_one_order_whatever_batch_opened_them(shown):
    headings = re.findall(r"\n## (.+)\n", shown)
    assert headings[0] == "Current state"
    assert headings[1:] == [k for k in KINDS if k in headings]


def test_each_value_is_noted_with_what_it_replaced_and_the_old_one_ranks_as_history(shown):
    values = _section(shown, "Values and quantities")
    assert any(v.startswith("Rooms: 17 (the user: Actually, make it 17 rooms") and
               "(replaces 16" in v for v in values)
    assert any(v.startswith("Attendees: 20 (the user:") and "(replaces 18" in v for v in values)


def test_nothing_is_said_twice_and_no_chatter_or_echo_is_kept(shown):
    claims = [line for heading in re.findall(r"\n## (.+)\n", shown)
              if heading != "Current state" for line in _section(shown, heading)]
    assert len(claims) == len(set(claims))
    text = "\n".join(claims)
    for echo in ("Noted:", "Understood:", "Updated", "Got it", "with a value",
                 "to do: I'll", "to do: Can you", "prefers: I prefer", "Happy to help"):
        assert echo not in text, echo
    assert "The assistant asked: Should I shortlist venues near Cais do Sodré? Answer (the " \
           "user): Yes please, and keep it walkable from the hotel." in claims
    assert "Joana: travel coordinator" in text
    assert "The user prefers: a vegetarian-friendly dinner place" in text


def test_the_notes_are_a_valid_topic_citing_all_thirty_turns(shown):
    doc = parse_topic(shown, "topics/lisbon-team-offsite.md")
    cited = {s.target.rpartition("#")[2] for e in doc.evidence.values() for s in e.sources}
    assert len(cited) == len(TURNS)
