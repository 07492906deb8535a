"""Fixtures for the view tests: one written home per run, one headless Chromium per module."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from viewkit import branching_home, launch_browser, require_chromium


@pytest.fixture(scope="session")
def view_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The branching home (see viewkit), built and written once; tests only read it."""
    home = tmp_path_factory.mktemp("view") / "home"
    home.mkdir()
    built = branching_home(home)
    built["home"] = home
    return built


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = launch_browser(pw)
        try:
            yield chromium
        finally:
            chromium.close()
