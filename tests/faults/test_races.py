"""Races with real processes: an appending process (appends, retries, edits, sub-agents,
compaction, rewinds), the per-turn writer and the idle watcher (idle 0) on the same sessions
at once, for a bounded workload. Afterwards: no lost turn, no lost mark or rewind stamp (a lost
mark would have to be re-offered, never a gap), no torn file, no duplicate seq, and a final
forced write leaves nothing pending.

``SCRIPTORIUM_RACE_ROUNDS=N`` runs more seeds (benchmarks/faults_crash.py reports them).
"""

from __future__ import annotations

import json
import os

import pytest

from faultkit import run_race

SEEDS = range(int(os.environ.get("SCRIPTORIUM_RACE_ROUNDS", "2")))


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_appender_per_turn_writer_and_watcher_at_once_lose_nothing(tmp_path, seed):
    stats = run_race(tmp_path / "home", seed=seed)
    print(json.dumps(stats.to_dict()))
    assert stats.appended > 40 and stats.marks_logged > 0 and stats.writer_calls > 0
    assert stats.final.omissions == [] and stats.final.duplicate_citations == []
