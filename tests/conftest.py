"""Shared test helpers: temporary homes, reference-system fixtures and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit import Cli, copy_state


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty scriptorium home."""
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture
def written_home(tmp_path: Path) -> Path:
    return copy_state("written", tmp_path / "written")


@pytest.fixture
def legacy_home(tmp_path: Path) -> Path:
    return copy_state("legacy-cursor", tmp_path / "legacy")


@pytest.fixture
def cli(home: Path) -> Cli:
    return Cli(home)
