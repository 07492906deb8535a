"""A bounded run of the benchmark's precision measurement: readers on either side of an edit
or a retry get their own branch's value first; branch-blind search cannot tell them apart."""

from __future__ import annotations

import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import branch_facts  # noqa: E402


def test_branch_aware_search_gives_each_branch_its_own_value_first(homes):
    mem = homes.open()
    store = mem.store
    cases = branch_facts.generate(mem, 8)  # 4 edits, 4 retries; numbers, names, dates, choices
    assert {c.kind for c in cases} == {"edit", "retry"}
    assert {c.fact_type for c in cases} == {"number", "name", "date", "choice"}
    aware = branch_facts.precision(mem.workspace, store, cases, aware=True)
    blind = branch_facts.precision(mem.workspace, store, cases, aware=False)
    assert aware["readers"] == 16
    assert aware["p_at_1"] >= 0.95
    assert aware["p_at_1_in_full"] <= aware["p_at_1"]
    assert blind["p_at_1"] <= 0.6  # one value for both readers of a conversation


def test_a_number_filed_without_its_unit_still_counts_as_that_branchs_value():
    """A writer that files "the budget is 359 thousand euros" as "Budget: 359" (the embedded
    writer did, before a value kept its scale word) states the reader's own value by its
    digits, but not the value in full."""
    own, other = "359 thousand euros", "96 thousand euros"
    short = "Budget project tozumi: 359"
    assert branch_facts.states_core(short, "number", own)
    assert not branch_facts.states_core(short, "number", other)
    assert not branch_facts.states(short, own)  # the in-full figure still sees the unit lost
    quoted = "Budget: 96 (the user: For project Tozumi, the budget is 96 thousand euros.)"
    assert branch_facts.states_core(quoted, "number", other)
    assert not branch_facts.states_core(quoted, "number", own)
    # a number inside a date, a longer number or a decimal is not the value
    for text in ("Deadline: 2026-12-01", "Budget: 1200", "Budget: 12.5", "Budget: 3.12"):
        assert not branch_facts.states_core(text, "number", "12 people")
    assert branch_facts.states_core("Headcount: 12.", "number", "12 people")
    # names, dates and choices count only whole
    assert not branch_facts.states_core("Deadline: March 1", "date", "March 14")
