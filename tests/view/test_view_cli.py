"""``scriptorium view SID [-o FILE]`` from the shell: one self-contained file, or a clear error
and no file at all."""

from __future__ import annotations

import json
import os
from pathlib import Path

from testkit import Cli

from scriptorium.demo import SESSION


def test_view_writes_one_self_contained_page_for_the_session(view_home, tmp_path):
    cli = Cli(view_home["home"])
    out = tmp_path / "page.html"
    data = cli.json("view", SESSION, "-o", str(out))
    page = out.read_text(encoding="utf-8")
    assert data["path"] == str(out) and data["bytes"] == len(page.encode("utf-8"))
    assert data["nodes"] == len(view_home["memory"].store.get_nodes(SESSION))
    assert "<script src" not in page and "<link" not in page and "http://" not in page.split(
        'id="model"')[0]
    assert "default-src 'none'" in page  # the browser itself refuses any fetch
    model = page.split('<script type="application/json" id="model">')[1].split("</script>")[0]
    assert json.loads(model)["session"]["id"] == SESSION


def test_view_without_output_writes_sid_html_in_the_current_directory(view_home, tmp_path,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = Cli(view_home["home"])("view", SESSION)
    assert result.exit_code == 0, result.output
    assert (tmp_path / f"{SESSION}.html").is_file()
    assert f"{SESSION}.html" in result.output


def test_bad_input_is_one_line_a_nonzero_exit_and_no_file(view_home, tmp_path):
    cli = Cli(view_home["home"])
    target = tmp_path / "real.html"
    target.write_text("keep me")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    cases = [
        (("view", SESSION, "-o", str(link)), 2, "symlink"),
        (("view", "no-such-session", "-o", str(tmp_path / "a.html")), 3, "unknown session"),
        (("view", "../escape", "-o", str(tmp_path / "b.html")), 2, "invalid session id"),
        (("view", SESSION, "-o", str(tmp_path / "missing" / "c.html")), 2, "does not exist"),
        (("view",), 2, "SESSION_ID"),
        (("view", SESSION, "--serve"), 2, "not both"),
        (("view", SESSION, "--port", "9999", "-o", str(tmp_path / "d.html")), 2, "--serve"),
    ]
    for args, code, words in cases:
        result = cli(*args)
        assert result.exit_code == code, (args, result.output)
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, args
    assert target.read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["link.html", "real.html"]


def test_serve_refuses_a_port_it_cannot_listen_on(view_home):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = Cli(view_home["home"])("view", "--serve", "--port", str(port))
    assert result.exit_code == 2
    assert "cannot listen on 127.0.0.1" in result.stderr


def test_the_page_is_package_data(tmp_path):
    from importlib import resources

    root = resources.files("scriptorium.view").joinpath("assets")
    assert {"page.html", "view.css", "view.js", "index.html"} <= {p.name for p in root.iterdir()}
    assert Path(__file__).resolve().parents[2].joinpath("pyproject.toml").read_text().count(
        '"scriptorium.view" = ["assets/*.html", "assets/*.css", "assets/*.js"]') == 1


def test_missing_chromium_skips_locally_and_fails_in_ci(monkeypatch):
    import pytest

    import viewkit

    monkeypatch.setattr(viewkit, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(viewkit.shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="Chromium is not installed"):
        viewkit.require_chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot run in CI"):
        viewkit.require_chromium()
