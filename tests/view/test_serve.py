"""``scriptorium view --serve``: a real server process on 127.0.0.1 (port chosen by the OS)
serving an index of the home's sessions and each session's page; no path leaves the home."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any, Iterator

import pytest

from scriptorium.demo import SESSION
from viewkit import FAILED


@pytest.fixture(scope="module")
def server(view_home: dict[str, Any]) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "from scriptorium.cli import main; main()", "--home", str(view_home["home"]), "view",
         "--serve", "--port", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        url = json.loads(line)["url"]
        assert url.startswith("http://127.0.0.1:")
        yield url
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


def test_the_index_lists_every_session_of_the_home_with_a_link_to_its_page(server, view_home):
    status, body = get(server)
    assert status == 200
    for row in view_home["memory"].store.list_sessions():
        assert f'href="/session/{row["session_id"]}"' in body
    status, page = get(server + f"session/{SESSION}")
    assert status == 200 and '<script type="application/json" id="model">' in page
    assert f'"id":"{SESSION}"' in page and 'href="/"' in page


@pytest.mark.parametrize("path, status", [
    ("session/..%2F..%2Fetc%2Fpasswd", 400), ("session/..", 400), ("session/", 400),
    ("session/no-such-session", 404), ("../../etc/passwd", 404), ("etc/passwd", 404),
    ("session/%2Fetc%2Fpasswd", 400),
])
def test_a_path_outside_the_home_is_refused(server, path, status):
    code, body = get(server + path)
    assert code == status
    assert "root:" not in body


def test_the_server_listens_on_loopback_only(server):
    assert server.startswith("http://127.0.0.1:")


def test_the_index_opens_a_session_page_in_the_browser(server, browser):
    page = browser.new_page()
    page.goto(server)
    page.click(f'a[href="/session/{FAILED}"]')
    page.wait_for_selector('body[data-ready="1"]', timeout=10_000)
    assert page.inner_text("#title") == "Deploy notes"
    assert page.query_selector('#details .why[data-reason="failed_write"]')
    page.click("a.back")
    page.wait_for_selector(f'a[href="/session/{SESSION}"]')
    page.close()
