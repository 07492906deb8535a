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
    assert blind["p_at_1"] <= 0.6  # one value for both readers of a conversation
