"""The recall benchmark at a bounded size: the holding value of every line is found in the
top 3 of ``memory search`` with no superseded value above it (benchmarks/bench_recall.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_recall  # noqa: E402


@pytest.mark.slow
def test_the_writer_recalls_what_holds_after_corrections_and_side_branches():
    convs = bench_recall.generate(2, seed=16)
    assert sum(len(c.lines) for c in convs) == 10
    assert any(len(line.head_values) > 1 for c in convs for line in c.lines)  # corrections
    assert any(line.side_value for c in convs for line in c.lines)           # side branches
    # one batch per conversation: a later batch cannot mark committed claims (a write changes
    # only its own paragraphs), so corrections across batches are not yet ranked below
    res = bench_recall.run(2, seed=16, trigger_tokens=16_000)
    new, base = res["new"], res["baseline"]
    assert new["turns"] == base["turns"] > 50
    assert new["answered"] / new["questions"] >= 0.9
    assert base["answered"] < new["answered"]  # the transcript writer loses corrected values
