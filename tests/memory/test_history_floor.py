"""What one install's git commit holds: the fixed cost every write pays in the history,
whatever text it adds (issue 12: git grows about as much as the text it holds). Sizes and
counts of objects, never speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from scriptorium.memory.workspace import Workspace

OFFSITE = "topics/projects/lisbon-offsite.md"  # two directories deep: three trees change
O1 = "openprogram/offsite/o1"
PARAGRAPH = ("\nThe assistant asked about the budget.[^e1] ^floor\n\n"
             "[^e1]: Time: `2026-08-02`; Sources: [question](openprogram/offsite/o1)\n")
IDENTITY = "scriptorium memory <memory@scriptorium.local>"
# "tree <40 hex>\n" + "parent <40 hex>\n" + "author <identity> <10 digits> +0000\n" + the
# committer line + the blank line before the message
COMMIT_HEADER_BYTES = 46 + 48 + (7 + len(IDENTITY) + 18) + (10 + len(IDENTITY) + 18) + 1


@pytest.fixture
def ws(written_home: Path) -> Workspace:
    return Workspace.open(written_home / "memory")


def install(ws: Workspace, message: str) -> str:
    with ws.begin(allowed_sources=[O1]) as tx:
        path = tx.stage / OFFSITE
        path.write_text(path.read_text() + PARAGRAPH)
        result = tx.commit(message)
    assert result.changed_files == [OFFSITE] and result.commit
    return result.commit


def new_objects(ws: Workspace, sha: str) -> list[str]:
    """The types of the objects ``sha`` added to the history (not reachable from its parent)."""
    listed = ws.git._run(["rev-list", "--objects", sha, "--not", f"{sha}^"]).stdout.split("\n")
    names = [line.split(" ", 1)[0] for line in listed if line]
    return [ws.git._run(["cat-file", "-t", name]).stdout.strip() for name in names]


def test_a_one_file_install_adds_one_commit_one_tree_per_directory_and_the_blob(ws):
    sha = install(ws, "memory: write 1 turn(s) of offsite")
    objects = new_objects(ws, sha)
    depth = OFFSITE.count("/") + 1  # the root tree, topics/, topics/projects/
    assert sorted(objects) == sorted(["commit", "blob"] + ["tree"] * depth)


def test_a_commit_holds_its_header_and_message_with_our_identity_whatever_the_config(
        ws, tmp_path, monkeypatch):
    """Every commit object repeats its author and committer: ours are pinned, even in a
    history whose config (an older version's, a copied home's) or the user's global config
    names someone else; so a commit costs its header and its message, no more."""
    config = tmp_path / "global-gitconfig"
    config.write_text("[user]\n\tname = A Much Longer Global Name\n"
                      "\temail = someone@a-long-domain.example\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    ws.git._run(["config", "user.name", "An Older Version Of Us"])
    ws.git._run(["config", "user.email", "older@scriptorium.example"])
    message = "memory: write 1 turn(s) of offsite"
    sha = install(ws, message)
    body = ws.git._run(["cat-file", "commit", sha]).stdout
    lines = body.split("\n")
    assert lines[2].startswith(f"author {IDENTITY} ")
    assert lines[3].startswith(f"committer {IDENTITY} ")
    size = int(ws.git._run(["cat-file", "-s", sha]).stdout)
    assert size <= COMMIT_HEADER_BYTES + len(message) + 1  # the message and its newline

