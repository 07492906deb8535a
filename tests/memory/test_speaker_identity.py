"""Who said it: a turn's speaker is the node's own speaker identity (``speaker_display`` /
``speaker_id`` in its metadata, as the reference system writes them), not only its role."""

from __future__ import annotations

import json

import pytest

from scriptorium.errors import InvalidInput
from scriptorium.memory.search import search
from scriptorium.memory.writers.llm_prompt import render_turn
from scriptorium.memory.writing import Memory

TURNS = [
    ("u1", "user", "The venue budget is 4000 euros.", {"speaker_id": "u-ana",
                                                      "speaker_display": "Ana Lima"}),
    ("a1", "assistant", "Noted, the venue budget is 4000 euros.", {}),
    ("u2", "user", "Book the venue catering for 40 people.", {"speaker_id": "u-bo"}),
]


@pytest.fixture
def mem(homes) -> Memory:
    mem = homes.open()
    mem.store.create_session("s", title="Venue")
    for node_id, role, text, meta in TURNS:
        mem.store.append_message("s", {"id": node_id, "role": role, "content": text,
                                       "metadata": meta})
    return mem


def test_records_carry_the_nodes_speaker_identity_and_fall_back_to_the_role(mem):
    recs = {r.node_id: r for r in mem.branch_records("s")}
    assert recs["u1"].speaker == "Ana Lima (u-ana)" and recs["u1"].speaker_name == "Ana Lima"
    assert recs["u2"].speaker == "u-bo"
    assert recs["a1"].speaker == "assistant" and recs["a1"].speaker_name == ""


def test_the_llm_writers_input_names_the_speaker(mem):
    recs = {r.node_id: r for r in mem.branch_records("s")}
    assert json.loads(render_turn(recs["u1"]))["speaker"] == "Ana Lima (u-ana)"
    assert json.loads(render_turn(recs["a1"]))["speaker"] == "assistant"


def test_the_archive_labels_the_turn_with_its_speaker(mem):
    assert mem.write_session("s").failure is None
    archived = (mem.workspace.root / "sources/openprogram/_v2/s.md").read_text()
    assert "<!-- speaker-id:u%2Dana -->" in archived
    assert "] Ana Lima (u-ana): The venue budget is 4000 euros." in archived
    assert "] u-bo: Book the venue catering" in archived
    assert "] assistant: Noted" in archived


def test_claims_say_who_said_it(mem):
    assert mem.write_session("s").failure is None
    text = (mem.workspace.root / "topics/venue.md").read_text()
    assert "Ana Lima" in text and "u-bo" in text


def test_search_by_speaker_finds_the_claims_citing_that_persons_turns(mem):
    assert mem.write_session("s").failure is None
    hits = search(mem.workspace, "venue", speaker="ana lima", top_k=10)
    assert hits and all("openprogram/s/u1" in h.sources for h in hits)
    assert {h.kind for h in hits} == {"claim"}
    bo = search(mem.workspace, "catering", speaker="U-BO", top_k=10)
    assert bo and all("openprogram/s/u2" in h.sources for h in bo)
    assert search(mem.workspace, "venue", speaker="nobody", top_k=10) == []
    turns = search(mem.workspace, "venue", speaker="Ana Lima", include_sources=True, top_k=10)
    assert "openprogram/s/u1" in {h.source_id for h in turns if h.kind == "source"}


def test_an_empty_speaker_filter_is_refused(mem):
    with pytest.raises(InvalidInput, match="speaker"):
        search(mem.workspace, "venue", speaker="  ")
