"""kill -9 of real `scriptorium` CLI processes loses no turn and writes nothing outside the
home (issue 11): the CI-sized run of tests/faults/clikill.py, one round of three commands;
``python benchmarks/faults_cli_kill.py`` runs every command many times (README figures)."""

from __future__ import annotations

import pytest

from clikill import run_cli_kills


@pytest.mark.slow
def test_killed_cli_commands_lose_no_turn_and_write_nothing_outside_the_home(tmp_path):
    commands = ["session add", "memory write --all", "memory migrate"]
    stats = run_cli_kills(tmp_path, rounds=1, seed=2, commands=commands, random_share=0.0)
    figures = stats.to_dict()
    # the write was killed at a named step of the write path (the seed picks one it crosses)
    assert stats.at_step["memory write --all"] == 1, figures
    # every retry succeeded; InvariantBroken (marks not a prefix, verify, fsck, a file outside
    # the home) would have been raised at the first break
    assert all(stats.retries_ok[c] == 1 for c in commands), figures
    assert stats.homes == 2 and stats.eligible > 20
    assert stats.omissions == stats.uncited == stats.duplicate_citations == 0, figures
    assert stats.outside_changes == []
