"""The recall benchmark at a bounded size (benchmarks/bench_recall.py): the holding value of
every line is found in the top 3 of ``memory search`` and of ``memory context`` with no
superseded value above it, whether a conversation is written in one batch or in several."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_recall  # noqa: E402


@pytest.mark.slow
def test_the_writer_recalls_what_holds_after_corrections_and_side_branches_in_any_batching():
    convs = bench_recall.generate(2, seed=16)
    assert sum(len(c.lines) for c in convs) == 10
    assert any(len(line.head_values) > 1 for c in convs for line in c.lines)  # corrections
    assert any(line.side_value for c in convs for line in c.lines)           # side branches
    res = bench_recall.run(2, seed=16)
    assert set(res) == {"one", "many"}
    for mode, figures in res.items():
        new, base = figures["new"], figures["baseline"]
        assert new["turns"] == base["turns"] > 50, mode
        assert new["answered"] / new["questions"] >= 0.9, (mode, new)
        assert new["context"] / new["questions"] >= 0.9, (mode, new)
        assert base["answered"] < new["answered"], mode  # the transcript loses corrections
