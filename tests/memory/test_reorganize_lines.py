"""Reorganize never merges paragraphs said on mutually exclusive branches of one session."""

from __future__ import annotations

import pytest

from scriptorium.memory.reorganize import (Organized, ReorganizeRefused, merge_duplicates,
                                           reorganize)
from scriptorium.memory.writing import Memory
from storekit import damage

PLAN = ("We fly to the offsite with {} on the morning of the third from Berlin Brandenburg "
        "airport terminal one with the whole design team and Maria and Jonas and Priya, "
        "carrying the prototypes in hand luggage, meeting at the check in desk early, "
        "taking the shuttle bus to the venue after landing, sharing taxis back to the hotel "
        "in the evening, and keeping every receipt for the travel expense report afterwards")


def memory(homes) -> Memory:
    return homes.open(side_branches="all")


def tell(mem: Memory, sid: str, text: str, node_id: str | None = None) -> str:
    if not mem.store.exists(sid):
        mem.store.create_session(sid, title="Travel plan")
    msg = {"role": "user", "content": text}
    if node_id:
        msg["id"] = node_id
    return mem.store.append_message(sid, msg)


def blocks(mem: Memory) -> list[str]:
    return [b.text for doc in mem.workspace.topic_docs() for b in doc.blocks]


def edited(homes, second: str) -> Memory:
    """One session: the user states the plan (u1), then edits it into ``second``."""
    mem = memory(homes)
    tell(mem, "s", "Planning the trip.", "u0")
    tell(mem, "s", PLAN.format("TAP Air"), "u1")
    mem.store.edit("s", "u1", second, node_id="u1e")
    assert mem.write_session("s").failure is None
    return mem


def test_near_duplicates_with_different_values_on_exclusive_branches_stay_side_by_side(homes):
    mem = edited(homes, PLAN.format("Lufthansa"))
    report = reorganize(mem.workspace, store=mem.store)
    assert report.merged == []
    texts = " ".join(blocks(mem))
    assert "TAP Air" in texts and "Lufthansa" in texts


def test_identical_paragraphs_on_exclusive_branches_are_not_merged_either(homes):
    mem = edited(homes, PLAN.format("TAP Air") + " indeed")
    assert reorganize(mem.workspace, store=mem.store).merged == []


def test_the_same_near_duplicates_from_two_conversations_are_merged(homes):
    mem = memory(homes)
    tell(mem, "a", PLAN.format("TAP Air"))
    tell(mem, "b", PLAN.format("TAP Air") + " indeed")
    mem.write_session("a")
    mem.write_session("b")
    report = reorganize(mem.workspace, store=mem.store)
    assert len(report.merged) == 1  # the control: the organizer does merge duplicates


def test_an_organizer_that_merges_across_lines_is_refused_and_nothing_changes(homes):
    mem = edited(homes, PLAN.format("Lufthansa"))
    revision = mem.workspace.revision()

    def blind(stage, workspace, **_options) -> Organized:
        sources = workspace.sources
        merged, _ = merge_duplicates(stage, sources.resolve_target, sources.canonical_link)
        assert merged, "a branch-blind organizer merges the two plans"
        return Organized(merged)

    with pytest.raises(ReorganizeRefused, match="mutually exclusive branches"):
        reorganize(mem.workspace, organizer=blind, store=mem.store)
    assert mem.workspace.revision() == revision


def test_a_session_whose_dag_is_unreadable_is_never_merged_across(homes):
    mem = edited(homes, PLAN.format("Lufthansa"))
    damage(mem.store, "s", "u1e", predecessor="gone")
    assert reorganize(mem.workspace, store=mem.store).merged == []
