"""`scriptorium home copy SRC DST`: a directory home into a PostgreSQL home and back keeps
ids, marks, topics, archive, history and blocked branches, and searches the same; an
interrupted copy (an exception, or the real process SIGKILLed between two steps) finishes
when run again; the copy is verified; a destination holding other memory is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from pgmemkit import Homes
from scriptorium.cli import main
from scriptorium.errors import InvalidInput
from scriptorium.home_copy import compare, copy_home
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.writing import Memory
from testkit import RaisingWriter


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
    failing = homes.open(RaisingWriter(RuntimeError("model crashed")), trigger_tokens=1)
    failing.store.create_session("x", title="Blocked")
    failing.store.append_message("x", {"id": "x0", "role": "user", "content": "Stuck turn."})
    assert failing.write_session("x").failure is not None
    assert blocked_code(failing) == "WRITER_FAILURE_UNKNOWN"
    return homes


def blocked_code(mem: Memory) -> str | None:
    (branch,) = mem.status(["x"])["sessions"][0]["branches"]
    return (branch["blocked"] or {}).get("reason_code")


def marks(mem: Memory, sid: str) -> dict[str, str]:
    return {n.id: n.metadata[MARK_KEY] for n in mem.store.get_nodes(sid)
            if MARK_KEY in n.metadata}


def test_a_directory_home_copied_to_postgresql_and_back_keeps_everything(tmp_path, pg_url):
    homes = written_directory_home(tmp_path / "a")
    src = homes.dir
    report = copy_home(src, pg_url)
    assert report.verified and report.revisions_copied >= 2 and report.sessions_copied == 2
    with Memory.open(src) as a, Memory.open(pg_url) as pg:
        assert pg.workspace_id == a.workspace_id and marks(pg, "s") == marks(a, "s")
        assert pg.status()["revision"] == a.status()["revision"]
        assert [r.node_id for r in pg.pending("s")] == ["m4"]
        assert [m for m, _ in pg.workspace.history()] == [m for m, _ in a.workspace.history()]
        assert blocked_code(pg) == "WRITER_FAILURE_UNKNOWN"  # blocked there, blocked here
        assert pg.search("deploy rule wait")[0].sources == a.search("deploy rule wait")[0].sources
    back = tmp_path / "back"
    assert copy_home(pg_url, back).verified
    with Memory.open(src) as a, Memory.open(back) as b:
        assert compare(a, b) == []
        assert blocked_code(b) == "WRITER_FAILURE_UNKNOWN"
        assert b.search("deploy rule wait")[0].sources == a.search("deploy rule wait")[0].sources
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
    assert copy_home(homes.dir, pg_url).sessions_skipped == 2  # a third run has nothing to do


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
    assert data["verified"] is True and data["sessions_copied"] == 2
    assert data["blocked_branches"] == 1 and data["search_index"] == "rebuilt"
    assert data["not_copied"] == []
    human = CliRunner().invoke(main, ["home", "copy", str(homes.dir), pg_url])
    assert "1 blocked branch(es) kept blocked" in human.stdout
    assert "search index: not copied, rebuilt in the destination" in human.stdout
    bad = CliRunner().invoke(main, ["home", "copy", str(homes.dir), str(homes.dir)])
    assert bad.exit_code == 2 and "same home" in bad.stderr
    missing = CliRunner().invoke(main, ["home", "copy", str(tmp_path / "nowhere"), pg_url])
    assert missing.exit_code == 3 and "no home" in missing.stderr


def test_the_import_ledger_is_copied_both_ways_so_an_import_after_a_copy_reads_nothing_new(
        tmp_path, pg_url):
    """Directory -> PostgreSQL -> directory: after each copy the first import finds every
    source file unchanged; a file that grew is read from where SRC stopped; a copy run again
    writes the same ledger; a ledger that differs fails the copy's check."""
    from test_pg_import import _chain

    source = _chain(tmp_path / "src" / "s.jsonl", 6)
    homes = written_directory_home(tmp_path / "a")
    with Memory.open(homes.dir) as a:
        assert a.import_sessions("claude-code", [source])["nodes_added"] == 12
    first = copy_home(homes.dir, pg_url)
    assert first.verified and first.ledger_rows > 0
    assert copy_home(homes.dir, pg_url).ledger_rows == first.ledger_rows  # run again: same
    with Memory.open(pg_url) as pg:
        again = pg.import_sessions("claude-code", [source])
        assert [f["unchanged"] for f in again["files"]] == [True]
        _chain(source, 2, start=6)
        grown = pg.import_sessions("claude-code", [source])["files"][0]
        assert (grown["nodes_added"], grown["skipped"]) == (4, {})  # only the new lines
    down = tmp_path / "down"
    assert copy_home(pg_url, down).verified
    with Memory.open(down) as d:
        assert [f["unchanged"] for f in d.import_sessions("claude-code", [source])["files"]] \
            == [True]
    (down / "imports" / "state.sqlite").unlink()
    with Memory.open(pg_url) as pg, Memory.open(down) as d:
        assert any(p.startswith("import ledger: files rows differ") for p in compare(pg, d))


def cli_copy(src: str, dst: str, tmp_path, fault: str | None = None) -> subprocess.Popen:
    """``scriptorium home copy SRC DST`` as a real process; with ``fault`` it pauses at that
    step (scriptorium/faults.py) and writes the flag file first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRIPTORIUM_FAULT")}
    if fault:
        env.update(SCRIPTORIUM_FAULT=fault, SCRIPTORIUM_FAULT_ACTION="pause",
                   SCRIPTORIUM_FAULT_FLAG=str(tmp_path / "flag"))
    return subprocess.Popen([sys.executable, "-m", "scriptorium", "home", "copy", src, dst,
                             "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def kill_at(proc: subprocess.Popen, tmp_path, step: str) -> None:
    """Wait until the copy reached ``step`` (its flag file), then SIGKILL it."""
    try:
        for _ in range(2400):  # waits for the step, never for a guessed time
            if (tmp_path / "flag").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (tmp_path / "flag").exists(), proc.poll() is not None and proc.stderr.read()
        assert (tmp_path / "flag").read_text() == step
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.parametrize("direction, step", [
    ("to-postgresql", "home-copy-session"),    # memory done, a session created but empty
    ("to-directory", "home-copy-revision"),    # one install of the history replayed of five
])
def test_a_copy_killed_at_a_step_finishes_when_run_again(tmp_path, pg_url, direction, step):
    homes = written_directory_home(tmp_path / "a")
    if direction == "to-postgresql":
        src, dst = str(homes.dir), pg_url
    else:  # a PostgreSQL home (copied in process) into a new directory home
        assert copy_home(homes.dir, pg_url).verified
        src, dst = pg_url, str(tmp_path / "down")
    kill_at(cli_copy(src, dst, tmp_path, fault=step), tmp_path, step)
    with Memory.open(src) as a, Memory.open(dst) as b:
        assert compare(a, b) != []  # the kill left the copy unfinished
    rerun = cli_copy(src, dst, tmp_path)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert json.loads(out)["verified"] is True
    with Memory.open(src) as a, Memory.open(dst) as b:
        assert compare(a, b) == []
        assert marks(b, "s") == marks(a, "s") and blocked_code(b) == "WRITER_FAILURE_UNKNOWN"


def test_a_file_that_is_not_memory_is_named_as_not_copied(tmp_path, pg_url):
    homes = written_directory_home(tmp_path / "a")
    (homes.dir / "memory" / "recent_events.jsonl").write_text("{}\n")  # another program's
    out = CliRunner().invoke(main, ["home", "copy", str(homes.dir), pg_url])
    assert out.exit_code == 0, out.output
    assert "not copied (not memory scriptorium keeps): recent_events.jsonl" in out.stdout
    with Memory.open(homes.dir) as a, Memory.open(pg_url) as pg:
        assert compare(a, pg) == []


def ledger(home: str) -> dict[str, tuple[int, int]]:
    """The digest of ``home``'s import ledger (per table: rows and an order-free hash)."""
    from scriptorium.home_copy import _ledger
    from scriptorium.importers.ledger_copy import ledger_digest

    with Memory.open(home) as mem, _ledger(mem, create=False) as tables:
        return ledger_digest(tables)


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["to-postgresql", "to-directory"])
def test_a_copy_killed_inside_the_ledger_copy_keeps_the_old_ledger_and_finishes_when_run_again(
        tmp_path, pg_url, direction):
    """DST holds an earlier copy's ledger; SRC imports more; the next copy is SIGKILLed in
    the ledger's transaction (a table written, not committed): DST's ledger is the earlier
    one, whole; run again, the copy finishes verified (ids, marks, topics, archive,
    revisions, ledger) and an import in DST reads nothing new."""
    from test_pg_import import _chain

    transcript = _chain(tmp_path / "src" / "s.jsonl", 3)
    homes = written_directory_home(tmp_path / "a")
    with Memory.open(homes.dir) as a:
        assert a.import_sessions("claude-code", [transcript])["nodes_added"] == 6
    if direction == "to-postgresql":
        src, dst = str(homes.dir), pg_url
    else:  # a PostgreSQL home (copied in process) into a new directory home
        assert copy_home(homes.dir, pg_url).verified
        src, dst = pg_url, str(tmp_path / "down")
    assert copy_home(src, dst).verified  # an earlier copy: DST holds SRC's ledger
    _chain(transcript, 2, start=3)
    with Memory.open(src) as s:
        assert s.import_sessions("claude-code", [transcript])["nodes_added"] == 4
    earlier = ledger(dst)
    assert ledger(src) != earlier
    kill_at(cli_copy(src, dst, tmp_path, fault="home-copy-ledger"), tmp_path,
            "home-copy-ledger")
    assert ledger(dst) == earlier  # the killed transaction left the earlier ledger whole
    with Memory.open(src) as a, Memory.open(dst) as b:
        assert any(p.startswith("import ledger:") for p in compare(a, b))
    rerun = cli_copy(src, dst, tmp_path)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert json.loads(out)["verified"] is True
    assert ledger(dst) == ledger(src)
    with Memory.open(src) as a, Memory.open(dst) as b:
        assert compare(a, b) == []
        assert b.workspace._read_workspace_id() == a.workspace._read_workspace_id()  # noqa: SLF001
        assert marks(b, "s") == marks(a, "s") and blocked_code(b) == "WRITER_FAILURE_UNKNOWN"
        files = b.import_sessions("claude-code", [transcript])["files"]
        assert [f["unchanged"] for f in files] == [True]
