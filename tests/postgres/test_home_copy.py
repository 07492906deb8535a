"""`scriptorium home copy SRC DST`: a directory home into a PostgreSQL home and back keeps
ids, marks, topics, archive and history; an interrupted copy finishes when run again; the
copy is verified; a destination holding other memory is refused."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pgmemkit import Homes
from scriptorium.cli import main
from scriptorium.errors import InvalidInput
from scriptorium.home_copy import compare, copy_home
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.writing import Memory


def written_directory_home(tmp_path):
    homes = Homes("directory", tmp_path)
    mem = homes.open(trigger_tokens=1)
    mem.store.create_session("s", title="Deploys")
    for i in range(4):
        mem.store.append_message("s", {"id": f"m{i}", "role": "user" if i % 2 == 0 else
                                       "assistant", "content": f"Deploy rule {i}: wait {i} days."})
    mem.store.retry("s", "m3", "Deploy rule 3 again: wait a week.", node_id="r3")
    assert mem.write_session("s").failure is None
    mem.store.append_message("s", {"id": "m4", "role": "user", "content": "Pending turn."})
    return homes


def marks(mem: Memory, sid: str) -> dict[str, str]:
    return {n.id: n.metadata[MARK_KEY] for n in mem.store.get_nodes(sid)
            if MARK_KEY in n.metadata}


def test_a_directory_home_copied_to_postgresql_and_back_keeps_everything(tmp_path, pg_url):
    homes = written_directory_home(tmp_path / "a")
    src = homes.dir
    report = copy_home(src, pg_url)
    assert report.verified and report.revisions_copied >= 2 and report.sessions_copied == 1
    with Memory.open(src) as a, Memory.open(pg_url) as pg:
        assert pg.workspace_id == a.workspace_id and marks(pg, "s") == marks(a, "s")
        assert pg.status()["revision"] == a.status()["revision"]
        assert [r.node_id for r in pg.pending("s")] == ["m4"]
        assert [m for m, _ in pg.workspace.history()] == [m for m, _ in a.workspace.history()]
    back = tmp_path / "back"
    assert copy_home(pg_url, back).verified
    with Memory.open(src) as a, Memory.open(back) as b:
        assert compare(a, b) == []
        assert len(b.workspace.git.log()) >= len(a.workspace.history())
        assert b.write_session("s").steps[0].marked == ["m4"]  # memory goes on writing there


def test_an_interrupted_copy_finishes_when_run_again(tmp_path, pg_url, monkeypatch):
    homes = written_directory_home(tmp_path / "a")
    from scriptorium import home_copy

    real = home_copy._copy_session

    def crash(*args, **kw):
        raise OSError("killed while copying sessions")

    monkeypatch.setattr(home_copy, "_copy_session", crash)
    with pytest.raises(OSError):
        copy_home(homes.dir, pg_url)
    monkeypatch.setattr(home_copy, "_copy_session", real)
    again = copy_home(homes.dir, pg_url)
    assert again.verified and again.revisions_copied == 0 and again.revisions_skipped >= 2
    assert copy_home(homes.dir, pg_url).sessions_skipped == 1  # a third run has nothing to do


def test_a_destination_holding_other_memory_is_refused(tmp_path, pg_url):
    homes = written_directory_home(tmp_path / "a")
    other = Homes("postgres", tmp_path / "b", pg_url)
    mem = other.open(trigger_tokens=1)
    mem.store.create_session("x", title="Other")
    mem.store.append_message("x", {"id": "x0", "role": "user", "content": "Another memory."})
    mem.write_session("x")
    other.close()
    with pytest.raises(InvalidInput):
        copy_home(homes.dir, pg_url)


def test_the_cli_copies_and_prints_one_json_document(tmp_path, pg_url):
    homes = written_directory_home(tmp_path / "a")
    out = CliRunner().invoke(main, ["home", "copy", str(homes.dir), pg_url, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["verified"] is True and data["sessions_copied"] == 1
    bad = CliRunner().invoke(main, ["home", "copy", str(homes.dir), str(homes.dir)])
    assert bad.exit_code == 2 and "same home" in bad.stderr
    missing = CliRunner().invoke(main, ["home", "copy", str(tmp_path / "nowhere"), pg_url])
    assert missing.exit_code == 3 and "no home" in missing.stderr
