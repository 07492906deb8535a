"""``memory status`` and ``memory show`` from the shell (the reads on both kinds of home: the
reference home as a directory and copied into PostgreSQL)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scriptorium.home_copy import copy_home
from scriptorium.postgres.url import is_postgres_url
from storekit import HOME_KINDS
from testkit import Cli, copy_state, json_error
from scriptorium.memory.status import show, workspace_status
from scriptorium.memory.workspace import Workspace


# files of the reference system's memory layout that are not memory scriptorium keeps
REFERENCE_OWN = ["recent_events.jsonl", "relations.json", "timeline/2026/08/01.md",
                 "timeline/2026/08/02.md"]


@pytest.fixture
def wcli(written_home: Path) -> Cli:
    """The CLI on the reference `written` home, for tests that look at or change its files."""
    return Cli(written_home)


@pytest.fixture(scope="module", params=HOME_KINDS)
def any_wcli(request, tmp_path_factory) -> Cli:
    """The CLI on the reference `written` home as a directory, or copied into a PostgreSQL
    home (``home copy``), for the tests that only read it."""
    written = copy_state("written", tmp_path_factory.mktemp("written") / "home")
    if request.param == "directory":
        return Cli(written)
    from pgserver import home_url

    url = home_url(request.getfixturevalue("pg_server_url"))
    report = copy_home(written, url)
    assert report.verified and report.not_copied == REFERENCE_OWN
    return Cli(url)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_status_reports_identity_revision_and_counts_of_the_reference_workspace(any_wcli,
                                                                             written_home):
    data = any_wcli.json("memory", "status")
    assert data["workspace_id"] == "w-5eed0001"
    if is_postgres_url(str(any_wcli.home)):  # the reference system's own files were not copied
        for name in REFERENCE_OWN:
            (written_home / "memory" / name).unlink()
    assert data["revision"] == Workspace(written_home / "memory").revision()
    assert data["counts"] == {"topics": 2, "blocks": 3, "evidence": 4, "sources": 8,
                              "source_files": 2}
    assert data["invalid_topics"] == [] and data["interrupted_install"] is False


def test_status_changes_nothing_on_disk(wcli, written_home):
    root = written_home / "memory"
    before = tree(root)
    wcli.json("memory", "status")
    wcli("memory", "status")
    assert tree(root) == before and not (root / ".git").exists()


def test_status_on_a_fresh_home_creates_only_a_durable_identity(cli, home):
    first = cli.json("memory", "status")
    assert re.fullmatch(r"w-[0-9a-f]{8}", first["workspace_id"])
    assert first["counts"] == {"topics": 0, "blocks": 0, "evidence": 0, "sources": 0,
                               "source_files": 0}
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == [
        "memory", "memory/.scriptorium", "memory/.scriptorium/workspace-id",
        "memory/.scriptorium/write.lock"]
    assert cli.json("memory", "status")["workspace_id"] == first["workspace_id"]


def test_status_lists_a_broken_topic_file_instead_of_failing(wcli, written_home):
    (written_home / "memory" / "topics" / "broken.md").write_text("Uncited prose.\n")
    data = wcli.json("memory", "status")
    assert data["invalid_topics"][0]["path"] == "topics/broken.md"
    assert data["invalid_topics"][0]["line"] == 1
    assert "invalid: topics/broken.md:1:" in wcli("memory", "status").stdout


def test_status_human_output_names_the_workspace_and_counts(any_wcli):
    out = any_wcli("memory", "status").stdout
    assert "workspace w-5eed0001" in out and "3 block(s)" in out


def test_show_a_block_by_id_with_its_footnotes_and_resolved_sources(any_wcli):
    data = any_wcli.json("memory", "show", "ec7521e7")
    assert data["path"] == "topics/projects/lisbon-offsite.md" and data["block_id"] == "ec7521e7"
    assert data["aliases"] == [] and data["text"].startswith("The team offsite is in Lisbon")
    assert [e["fid"] for e in data["evidence"]] == ["e-b72bb88e5f", "e-f3c64873ae"]
    assert [s["source_id"] for s in data["evidence"][1]["sources"]] == [
        "openprogram/offsite/o2", "openprogram/offsite/o3"]
    assert any_wcli.json("memory", "show", "^ec7521e7")["block_id"] == "ec7521e7"
    human = any_wcli("memory", "show", "ec7521e7").stdout
    assert "^ec7521e7" in human and "[^e-f3c64873ae]: Time: `2026-08-02`" in human


def test_show_a_block_by_an_alias(written_home):
    root = written_home / "memory"
    path = root / "topics" / "projects" / "lisbon-offsite.md"
    path.write_text(path.read_text().replace(" ^ec7521e7", " ^old1 ^ec7521e7"))
    data = show(Workspace(root), "old1")
    assert data["block_id"] == "ec7521e7" and data["aliases"] == ["old1"]


@pytest.mark.parametrize("ref", ["projects/lisbon-offsite.md",
                                 "topics/projects/lisbon-offsite.md"])
def test_show_a_topic_file_by_path_relative_to_topics_or_the_workspace(any_wcli, written_home, ref):
    data = any_wcli.json("memory", "show", ref)
    text = (written_home / "memory" / "topics" / "projects" / "lisbon-offsite.md").read_text()
    assert data["path"] == "topics/projects/lisbon-offsite.md" and data["text"] == text
    assert [b["block_id"] for b in data["blocks"]] == ["ec7521e7"]
    assert any_wcli("memory", "show", ref).stdout == text


@pytest.mark.parametrize("ref", ["nope", "^deadbeef", "projects/missing.md"])
def test_show_of_something_unknown_is_a_one_line_not_found(any_wcli, ref):
    result = any_wcli("memory", "show", ref)
    assert result.exit_code == 3
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert result.stdout == ""


@pytest.mark.parametrize("ref", ["../../sessions/offsite/meta.json", "../x.md",
                                 "topics/../../x.md", "/etc/passwd"])
def test_show_never_escapes_the_workspace(any_wcli, ref):
    result = any_wcli("memory", "show", ref, "--json")
    assert result.exit_code != 0 and json_error(result)["code"] == "INVALID_INPUT"
    assert result.stderr.count("\n") == 1


def test_show_refuses_files_outside_topics(any_wcli):
    result = any_wcli("memory", "show", "sources/openprogram/_v2/offsite.md")
    assert result.exit_code != 0 and "offsite.md" in result.stderr


def test_show_a_symlinked_topic_is_not_followed(wcli, written_home, tmp_path):
    secret = tmp_path / "secret.md"
    secret.write_text("secret\n")
    (written_home / "memory" / "topics" / "leak.md").symlink_to(secret)
    result = wcli("memory", "show", "leak.md")
    assert result.exit_code in (2, 3) and "secret" not in result.stdout


def test_status_library_call_matches_the_cli(written_home):
    ws = Workspace.open(written_home / "memory", create=False)
    data = workspace_status(ws)
    assert json.loads(json.dumps(data)) == data and data["workspace_id"] == "w-5eed0001"
