"""Importing into a PostgreSQL home: the ledger in its tables gives the same sessions, the same
reports and the same incremental behaviour as a directory home, on real transcripts of every
format; `import --write` then `memory verify` is clean; concurrent and killed imports lose and
duplicate nothing; two hosts keep their own offsets and store and write each turn once; an
import's memory does not grow with its transcript. (The importer behaviour tests in tests/importers run on both homes too.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from realdatakit import require_realdata
from scriptorium.importers import import_sources
from scriptorium.sessions import SessionStore
from scriptorium.sessions.pg_store import PgSessionStore
from testkit import Cli

# one real transcript per format (read in place), small enough for the suite
REAL = {
    "claude-code": "claude-code/oneryalcin__fasthooks",
    "pi": "pi/badlogic__pi-mono/large-session.jsonl",
    "codex": "codex/madshn__localpush/rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-"
             "bda6a9c575ff.jsonl",
    "chatgpt": "chatgpt/PyRepair__maniple/conversations.json",
}


@pytest.fixture
def pg_store(pg_url):
    store = PgSessionStore.open(pg_url)
    yield store
    store.close()


def _source(kind: str) -> Path:
    return require_realdata() / REAL[kind]


def _shape(store, sids) -> dict:
    """What an import decides, per session: every node's edges, role, name and text, the
    head and the live tips (not when it was stored)."""
    out = {}
    for sid in sorted(sids):
        nodes = sorted((n.id, n.role, n.name, n.predecessor, n.caller, json.dumps(n.output),
                        json.dumps(n.metadata.get("covers_ids")))
                       for n in store.get_nodes(sid))
        tips = sorted(row["tip"] for row in store.list_branches(sid))
        out[sid] = (nodes, store.head(sid), tips)
    return out


def _report(result) -> list[dict]:
    return [f.to_dict() for f in result.files]


@pytest.mark.parametrize("kind", sorted(REAL))
def test_a_real_transcript_imports_the_same_on_both_homes_and_a_rerun_adds_nothing(
        kind, pg_store, tmp_path):
    source = _source(kind)
    directory = SessionStore(tmp_path / "home" / "sessions", git=False)
    on_dir = import_sources(directory, tmp_path / "home", kind, [source])
    on_pg = import_sources(pg_store, tmp_path / "unused", kind, [source])
    assert on_pg.errors == [] and on_pg.to_dict()["nodes_added"] > 0
    assert _report(on_pg) == _report(on_dir)
    assert _shape(pg_store, on_pg.changed_sessions) == _shape(directory, on_dir.changed_sessions)
    again = import_sources(pg_store, tmp_path / "unused", kind, [source])
    assert [f.unchanged for f in again.files] == [True] * len(again.files)
    assert again.to_dict()["nodes_added"] == 0 and again.changed_sessions == []
    assert not (tmp_path / "unused").exists()  # nothing written beside a database home


def test_import_write_then_verify_is_clean_on_a_postgresql_home(pg_url):
    cli = Cli(pg_url)
    for kind in sorted(REAL):
        out = cli.json("import", kind, str(_source(kind)), "--write")
        assert out["nodes_added"] > 0 and out["writes"]
        assert all(w["failure"] is None and w["marked"] for w in out["writes"])
    verify = cli.json("memory", "verify")
    assert verify["ok"] is True
    assert [p for p in verify["problems"] if p.get("severity") != "info"] == []
    status = cli.json("memory", "status")
    assert len(status["sessions"]) == 8 and status["revision"]
    for kind in sorted(REAL):  # nothing new: nothing read, nothing written
        again = cli.json("import", kind, str(_source(kind)), "--write")
        assert again["nodes_added"] == 0 and again["writes"] == []
        assert all(row["unchanged"] for row in again["files"])
    assert cli.json("memory", "status")["revision"] == status["revision"]


def _import_process(url: str, kind: str, source: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "scriptorium", "--home", url, "import", kind, str(source),
         "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_two_imports_at_once_store_every_node_once(pg_url, pg_store, tmp_path):
    source = _source("claude-code")
    reference = SessionStore(tmp_path / "home" / "sessions", git=False)
    expected = import_sources(reference, tmp_path / "home", "claude-code", [source])
    procs = [_import_process(pg_url, "claude-code", source) for _ in range(2)]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        outs.append(json.loads(stdout))
    # one of them imported everything, the other waited for it and found nothing new
    assert sorted(o["nodes_added"] for o in outs) == [0, expected.to_dict()["nodes_added"]]
    assert _shape(pg_store, expected.changed_sessions) == _shape(reference,
                                                                 expected.changed_sessions)


@pytest.mark.slow
def test_an_import_killed_at_any_moment_is_completed_by_the_next_run(pg_url, pg_store,
                                                                     tmp_path):
    source = _source("pi")
    reference = SessionStore(tmp_path / "home" / "sessions", git=False)
    expected = import_sources(reference, tmp_path / "home", "pi", [source])
    proc = _import_process(pg_url, "pi", source)
    try:
        proc.wait(timeout=0.8)  # killed wherever it is by then (or already done): any moment
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.stdout.close()
        proc.stderr.close()
    rerun = import_sources(pg_store, tmp_path / "unused", "pi", [source])
    assert rerun.errors == []
    assert _shape(pg_store, expected.changed_sessions) == _shape(reference,
                                                                 expected.changed_sessions)
    assert import_sources(pg_store, tmp_path / "unused", "pi", [source]).files[0].unchanged


def test_an_imported_session_is_owed_to_the_queue_and_memory_watch_writes_it(pg_url):
    """An import moves the heads it sets like any writer: the home's queue owes the session
    its write, so a watcher (or `memory work`) writes it without `--write`."""
    cli = Cli(pg_url)
    out = cli.json("import", "codex", str(_source("codex")))
    assert out["changed_sessions"] and "writes" not in out
    watched = cli.json("memory", "watch", "--once", "--idle-seconds", "0")
    assert [row["session_id"] for row in watched["written"]] == out["changed_sessions"]
    assert watched["written"][0]["marked"] and watched["terminal"] == []
    status = cli.json("memory", "status", *out["changed_sessions"])
    assert all(b["pending_turns"] == 0 for s in status["sessions"] for b in s["branches"])


def test_a_server_gone_mid_import_stops_it_as_retryable_and_a_rerun_finishes(pg_store,
                                                                            tmp_path):
    from scriptorium.importers.codex import CodexParser
    from scriptorium.importers.run import Importer
    from scriptorium.postgres.connect import DatabaseUnreachable

    # resolved, as import_sources resolves what it is given (shared/ may be a symlink)
    folder = require_realdata().resolve() / "codex" / "madshn__localpush"
    files = sorted(folder.glob("*.jsonl"))[2:]  # the last two by name
    imp = Importer(pg_store, tmp_path, "codex")
    try:
        assert imp.import_jsonl(files[0], CodexParser()).errors == []
        with pg_store.pg.connection() as conn:  # what a server restart does to its sessions
            conn.execute("SELECT pg_terminate_backend(%s)", (imp.ledger.conn.info.backend_pid,))
        with pytest.raises(DatabaseUnreachable) as raised:
            imp.import_jsonl(files[1], CodexParser())
        assert raised.value.retryable  # not filed as that file's problem: the run stops
    finally:
        imp.ledger.close()
    rerun = import_sources(pg_store, tmp_path, "codex", files)
    assert [f.unchanged for f in rerun.files] == [True, False] and rerun.errors == []
    assert rerun.files[1].nodes_added > 0


SESSION = "5e55f00d-0000-4000-8000-0000000000aa"


def _chain(path: Path, turns: int, start: int = 0, session: str = SESSION) -> Path:
    """A linear Claude Code transcript of ``turns`` prompt/answer pairs, ~2.6 kB each
    (appended after the ``start`` pairs already written) of the session ``session``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parent = f"{session[:4]}a{start - 1}" if start else None
    with open(path, "a", encoding="utf-8") as fh:
        for i in range(start, start + turns):
            for kind, uid, text in (("user", f"{session[:4]}u{i}", "question "),
                                    ("assistant", f"{session[:4]}a{i}", "answer ")):
                content = text * 140 if kind == "user" else [{"type": "text",
                                                              "text": text * 170}]
                fh.write(json.dumps({"parentUuid": parent, "type": kind, "uuid": uid,
                                     "sessionId": session, "timestamp": "2026-01-01T00:00:00Z",
                                     "message": {"role": kind, "content": content}}) + "\n")
                parent = uid
    return path


def test_an_import_holds_no_session_graph_so_its_memory_does_not_grow_with_the_transcript(
        pg_server_url, tmp_path, monkeypatch):
    """Nodes are streamed to the database and the ledger's cache is bounded (made tiny here,
    so every eviction path runs): importing a transcript 4x longer costs no more memory, and
    still gives the directory home's sessions, first import and after the file grew."""
    import tracemalloc

    from pgserver import home_url
    from scriptorium.importers import ledger_pg
    from scriptorium.sessions import pg_bulk

    for module, name, value in ((ledger_pg, "CACHE_LIMIT", 40), (ledger_pg, "FLUSH_AT", 16),
                                (pg_bulk, "BATCH", 16), (pg_bulk.IdSet, "MERGE_AT", 16)):
        monkeypatch.setattr(module, name, value)
    peaks, stores = [], []
    for turns in (2, 30, 120):  # the first one warms up what any import loads once
        source = _chain(tmp_path / f"src{turns}" / "s.jsonl", turns)
        stores.append(PgSessionStore.open(home_url(pg_server_url)))
        tracemalloc.start()
        assert import_sources(stores[-1], tmp_path, "claude-code", [source]).errors == []
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    grown_by = 90 * 2 * 1300  # bytes of transcript the last one has over the second
    assert peaks[2] - peaks[1] < grown_by // 10, peaks  # holding the graph: more than 1x
    pg_store = stores[-1]
    reference = SessionStore(tmp_path / "home" / "sessions", git=False)
    expected = import_sources(reference, tmp_path / "home", "claude-code", [source])
    sids = expected.changed_sessions
    assert _shape(pg_store, sids) == _shape(reference, sids)
    _chain(source, 30, start=120)  # the file grows: the ledger's tables answer now
    for store, home in ((reference, tmp_path / "home"), (pg_store, tmp_path)):
        assert import_sources(store, home, "claude-code", [source]).to_dict()[
            "nodes_added"] == 60
    assert _shape(pg_store, sids) == _shape(reference, sids)
    for store in stores:
        store.close()


def _as_host(host: str, url: str, *args: str) -> subprocess.Popen:
    """``scriptorium --home URL … --json`` as a real process on the host ``host``
    (``$SCRIPTORIUM_HOST``, the identity a home's per-host state is keyed by)."""
    env = {**os.environ, "SCRIPTORIUM_HOST": host}
    return subprocess.Popen([sys.executable, "-m", "scriptorium", "--home", url, *args,
                             "--json"], env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _docs(proc: subprocess.Popen) -> list[dict]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_two_hosts_keep_their_own_import_offsets_and_share_each_write_exactly_once(
        pg_url, pg_store, tmp_path):
    """Two processes as two hosts on one home: each imports the same folder at once (its
    own copy, at the same path), then a worker on each drains the writes."""
    folder = tmp_path / "projects"
    files = [_chain(folder / "p" / f"{n}.jsonl", 3, session=f"{n}0000000-0000-4000-8000-0")
             for n in (1, 2)]
    both = [_as_host(h, pg_url, "import", "claude-code", str(folder)) for h in ("a", "b")]
    # one host stores every node; the other, waiting for it, reads its own copy and adds none
    assert sorted(_docs(p)[0]["nodes_added"] for p in both) == [0, 12]
    with pg_store.pg.connection() as conn:
        rows = conn.execute("SELECT host, count(*) FROM import_files GROUP BY host").fetchall()
    assert sorted(rows) == [("a", 2), ("b", 2)]  # each host's offsets are its own
    _chain(files[0], 1, start=3)  # a file grows: host b reads on from its own offset
    (grown,) = _docs(_as_host("b", pg_url, "import", "claude-code", str(folder)))
    assert [(f["unchanged"], f["nodes_added"], f["skipped"]) for f in grown["files"]] \
        == [(False, 2, {}), (True, 0, {})]
    workers = [_as_host(h, pg_url, "memory", "work", "--drain") for h in ("a", "b")]
    docs = [_docs(w) for w in workers]
    assert [d[-1]["worker"].split(":")[0] for d in docs] == ["a", "b"]
    marked = [n for d in docs for job in d[:-1] for n in job.get("marked", [])]
    turns = [n.id for row in pg_store.list_sessions()
             for n in pg_store.get_nodes(row["session_id"]) if n.role in ("user", "llm")]
    assert sorted(marked) == sorted(turns) and len(turns) == 14  # each turn written once
