"""The search index is derived: kept current by the install hook and by fingerprints, rebuilt
from the files when missing, stale or damaged, never the source of truth."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit import examples

from scriptorium.memory.fingerprints import RACY_NS
from scriptorium.memory.search import SearchIndex, attach, search
from scriptorium.memory.search import documents as documents_mod
from scriptorium.memory.search import index as index_mod
from scriptorium.memory.search import segments as segments_mod
from scriptorium.memory.workspace import Workspace

from search_support import archive, open_ws, render, write_paragraphs, write_topic

TS = "2026-08-01T10:00:00+00:00"
DOC_COLUMNS = "kind, path, block_id, claim, text, sources, dates, headings, trusted"


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return open_ws(tmp_path / "memory")


def indexed(index: SearchIndex) -> list[tuple]:
    """What the index holds, without refreshing it first."""
    return [tuple(r.values()) for r in index.rows(
        f"SELECT {DOC_COLUMNS} FROM docs ORDER BY path, line, claim, source_id")]


def fresh_rebuild(ws: Workspace, tmp: Path, include_sources: bool = False) -> list[tuple]:
    """What a brand-new index built from the files holds."""
    other = SearchIndex(ws.root, tmp / f"fresh-{os.urandom(4).hex()}", ws.sources)
    other.rebuild(include_sources)
    try:
        return indexed(other)
    finally:
        other.close()


def seed(ws: Workspace) -> list[str]:
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i} about topic {i}", TS)
                       for i in range(4)])
    write_paragraphs(ws, "topics/a.md", [[("Alpha says the kiln is hot.", [ids[0]], "2026-08-01")],
                                         [("Beta owns the glaze recipe.", [ids[1]], "2026-08")]])
    return ids


# -- kept current inside every installed transaction ------------------------------------------


def test_an_installed_transaction_updates_the_index_before_any_query(ws, tmp_path):
    seed(ws)
    index = SearchIndex.of(ws)
    assert any("kiln" in row[4] for row in indexed(index))
    assert not index.is_stale()
    assert indexed(index) == fresh_rebuild(ws, tmp_path)


def test_a_workspace_attached_twice_updates_the_index_once_per_install(ws):
    attach(ws)
    attach(ws)
    from scriptorium.memory.search import update_index
    assert ws.install_hooks.count(update_index) == 1


def test_without_the_hook_the_next_query_still_sees_the_transaction(tmp_path):
    ws = open_ws(tmp_path / "memory", attached=False)
    ids = archive(ws, [("s", "n0", "user", "x", TS)])
    write_paragraphs(ws, "topics/a.md", [[("The kiln is hot.", [ids[0]], "2026-08-01")]])
    assert [h.text for h in search(ws, "kiln")] == ["The kiln is hot."]
    write_paragraphs(ws, "topics/a.md", [[("The kiln is cold now.", [ids[0]], "2026-08-01")]])
    assert [h.text for h in search(ws, "kiln")] == ["The kiln is cold now."]


def test_a_removed_topic_file_takes_its_claims_out_of_the_index(ws):
    seed(ws)
    with ws.begin(purpose="reorganize") as tx:  # a write may only drop its own batch
        (tx.stage / "topics/a.md").unlink()
        tx.commit("test: remove a")
    assert search(ws, "kiln glaze") == []
    assert indexed(SearchIndex.of(ws)) == []


def test_citations_archived_after_a_hand_edit_are_picked_up_at_the_next_install(ws):
    seed(ws)
    path = ws.root / "topics/b.md"
    path.write_text(render([[("Gamma fires on Fridays.", ["openprogram/late/n1"], "2026-08-02")]])
                    .replace("[^e1]", "[^e-0123456789]")
                    .replace("Fridays.[^e-0123456789]", "Fridays.[^e-0123456789] ^0badc0de"))
    assert search(ws, "gamma")[0].sources == []  # nothing archived under that id yet
    late = archive(ws, [("late", "n1", "user", "Gamma fires on Fridays", TS)])
    write_paragraphs(ws, "topics/c.md", [[("Delta is new.", late, "2026-08-02")]])
    hit = search(ws, "gamma")[0]
    assert hit.sources == ["openprogram/late/n1"] and hit.trusted


# -- rebuilt from the files --------------------------------------------------------------------


def test_a_topic_edited_by_hand_outside_a_transaction_is_found_at_the_next_full_check(
        ws, monkeypatch):
    seed(ws)
    assert search(ws, "kiln")
    path = ws.root / "topics/a.md"
    path.write_text(path.read_text().replace("the kiln is hot", "the furnace roars"))
    later = index_mod.time.time_ns() + index_mod.FULL_CHECK_NS + 1
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: later)
    assert search(ws, "kiln") == []
    assert [h.text for h in search(ws, "furnace")] == ["Alpha says the furnace roars."]
    assert [h.block_id for h in search(ws, "furnace")] == [ws.read_topic("topics/a.md").blocks[0].id]


def test_a_same_size_rewrite_the_fingerprint_cannot_see_is_caught_by_its_content(ws, monkeypatch):
    seed(ws)
    # The filesystem clock did not tick between the two writes: same mtime (and ctime, which
    # a test cannot set, is left out), same size, same inode.
    monkeypatch.setattr(index_mod, "fingerprint",
                        lambda st: (st.st_mtime_ns, 0, st.st_size, st.st_ino))
    path = ws.root / "topics/a.md"
    st = path.stat()
    # Indexed within the same tick as the write: pin the index's clock there, so the test
    # does not depend on how fast this machine gets from the install to the rebuild.
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: st.st_mtime_ns + 1_000_000)
    index = SearchIndex.of(ws)
    index.rebuild()
    text = path.read_text()
    with open(path, "r+", encoding="utf-8") as fh:  # in place: same inode, same size
        fh.write(text.replace("kiln is hot", "oven is hot"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert index_mod.fingerprint(path.stat()) == index_mod.fingerprint(st)
    later = st.st_mtime_ns + index_mod.FULL_CHECK_NS + 2_000_000  # the next full check
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: later)
    assert [h.text for h in search(ws, "oven")] == ["Alpha says the oven is hot."]


def test_a_fingerprint_old_enough_is_trusted_without_reading_the_file(ws, monkeypatch):
    seed(ws)
    SearchIndex.of(ws)
    search(ws, "kiln")
    past = index_mod.time.time_ns() + 10 * RACY_NS
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: past)
    search(ws, "kiln")  # settles the recent fingerprints
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self) or real(self))
    assert search(ws, "kiln") and reads == []


def test_deleting_the_index_loses_nothing(ws, tmp_path):
    seed(ws)
    before = [h.to_dict() for h in search(ws, "kiln glaze beta", top_k=10)]
    index = SearchIndex.of(ws)
    for name in os.listdir(ws.runtime_dir):
        if name.startswith("search.sqlite"):
            os.unlink(ws.runtime_dir / name)
    assert [h.to_dict() for h in search(ws, "kiln glaze beta", top_k=10)] == before
    assert (ws.runtime_dir / "search.sqlite").exists()
    assert indexed(index) == fresh_rebuild(ws, tmp_path)


@pytest.mark.parametrize("damage", [b"this is not a database", b"", b"SQLite format 3\x00" + b"\xff" * 200])
def test_a_damaged_index_file_is_rebuilt(ws, tmp_path, damage):
    seed(ws)
    before = [h.to_dict() for h in search(ws, "kiln glaze", top_k=10)]
    SearchIndex.of(ws).close()
    for name in os.listdir(ws.runtime_dir):
        if name.startswith("search.sqlite"):
            os.unlink(ws.runtime_dir / name)
    (ws.runtime_dir / "search.sqlite").write_bytes(damage)
    assert [h.to_dict() for h in search(ws, "kiln glaze", top_k=10)] == before


def test_an_index_of_another_schema_version_is_rebuilt(ws, tmp_path):
    seed(ws)
    index = SearchIndex.of(ws)
    search(ws, "kiln")
    index.connection().execute("UPDATE meta SET value='0' WHERE key='schema'")
    index.close()
    assert [h.text for h in search(ws, "kiln")] == ["Alpha says the kiln is hot."]
    assert index.rows("SELECT value FROM meta WHERE key='schema'")[0]["value"] == \
        index_mod.SCHEMA_VERSION


def test_the_index_lives_in_the_runtime_dir_outside_the_revision_and_git(ws):
    seed(ws)
    search(ws, "kiln", include_sources=True)
    revision = ws.revision()
    assert not any("search.sqlite" in f for f in ws.revision_files())
    os.unlink(ws.runtime_dir / "search.sqlite")
    search(ws, "kiln")
    assert ws.revision() == revision
    tracked = subprocess.run(["git", "ls-files"], cwd=ws.root, capture_output=True, text=True,
                             check=True).stdout
    assert "search.sqlite" not in tracked


def test_rebuild_reports_what_it_indexed(ws):
    seed(ws)
    index = SearchIndex.of(ws)
    assert index.rebuild(include_sources=False) == 2
    assert index.rebuild(include_sources=True) == 2 + 4
    assert index.count("source") == 4


def test_a_symlinked_topic_is_not_indexed(ws, tmp_path):
    seed(ws)
    outside = tmp_path / "outside.md"
    shutil.copy(ws.root / "topics/a.md", outside)
    outside.write_text(outside.read_text().replace("kiln", "secret").replace("^", "^x"))
    os.symlink(outside, ws.root / "topics/link.md")
    assert search(ws, "secret") == []


# -- the incremental index equals a rebuild, whatever happens ---------------------------------

WORDS = ["kiln", "glaze", "clay", "wheel", "fire", "slip", "bisque", "oxide", "pot", "cone"]

op = st.one_of(
    st.tuples(st.just("tx"), st.sampled_from(["topics/a.md", "topics/d/b.md", "topics/c.md"]),
              st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
                       min_size=1, max_size=3)),
    st.tuples(st.just("hand"), st.sampled_from(["topics/a.md", "topics/d/b.md"]),
              st.sampled_from(WORDS)),
    st.tuples(st.just("delete"), st.sampled_from(["topics/a.md", "topics/d/b.md", "topics/c.md"]),
              st.just(None)),
    st.tuples(st.just("query"), st.sampled_from(WORDS), st.just(None)),
)


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=8))
def test_the_incremental_index_always_equals_a_fresh_rebuild(tmp_path_factory, ops):
    tmp = tmp_path_factory.mktemp("prop")
    ws = open_ws(tmp / "memory")
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(3)])
    for kind, path, arg in ops:
        if kind == "tx":
            paragraphs = [[(" ".join(words).capitalize() + ".", [ids[i % 3]], "2026-08-01")]
                          for i, words in enumerate(arg)]
            # the batch is every turn: a write may replace only paragraphs citing its batch
            write_topic(ws, path, render(paragraphs), allowed=ids)
        elif kind == "hand" and (ws.root / path).exists():
            p = ws.root / path
            text = p.read_text()
            p.write_text(text.replace(".[^", f" {arg}.[^", 1))
        elif kind == "delete" and (ws.root / path).exists():
            with ws.begin(purpose="reorganize") as tx:  # a write may drop only its own batch
                (tx.stage / path).unlink()
                tx.commit("test: delete")
        elif kind == "query":
            search(ws, path)  # (the word rides in the path slot)
    index = SearchIndex.of(ws)
    index.refresh()
    assert indexed(index) == fresh_rebuild(ws, tmp)


# -- several processes at once ----------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from scriptorium.memory.workspace import Workspace
    from scriptorium.memory.search import search, attach
    root, role, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    ws = Workspace.open(root)
    attach(ws)
    if role == "reader":
        for i in range(n):
            search(ws, "kiln glaze", include_sources=(i % 2 == 0))
    else:
        sys.path.insert(0, sys.argv[4])
        from search_support import write_paragraphs
        for i in range(n):
            write_paragraphs(ws, f"topics/w{i % 3}.md",
                             [[(f"Kiln batch {i} came out well.", ["openprogram/s/n0"],
                                "2026-08-01")]])
            if i % 2:  # a hand edit between transactions (no lock, no hook)
                p = root / f"topics/w{i % 3}.md"
                p.write_text(p.read_text().replace("came out", "came out really"))
    print("ok")
""")


def test_readers_and_a_writer_in_other_processes_share_one_consistent_index(ws, tmp_path):
    seed(ws)
    support = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path])}
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(ws.root), role, str(n), support],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for role, n in (("reader", 30), ("reader", 30), ("writer", 6))]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == "ok", err
    index = SearchIndex.of(ws)
    index.refresh(("topic", "source"))  # the readers asked for sources too
    assert indexed(index) == fresh_rebuild(ws, tmp_path, include_sources=True)
    assert {h.text for h in search(ws, "batch", top_k=10)} == {
        "Kiln batch 3 came out really well.", "Kiln batch 4 came out well.",
        "Kiln batch 5 came out really well."}


def test_an_index_damaged_in_place_under_an_open_connection_still_answers_then_heals(ws):
    seed(ws)
    before = [h.to_dict() for h in search(ws, "kiln glaze", top_k=10)]
    index = SearchIndex.of(ws)
    index.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(ws.runtime_dir / "search.sqlite", "r+b") as fh:  # same inode, bytes destroyed
        fh.write(b"\0garbage" * 4096)
    # The open connection answers from what it holds (or rebuilds if it must read the file).
    assert [h.to_dict() for h in search(ws, "kiln glaze", top_k=10)] == before
    index.close()  # what the next process sees
    assert [h.to_dict() for h in search(ws, "kiln glaze", top_k=10)] == before
    other = sqlite3.connect(ws.runtime_dir / "search.sqlite")  # a valid database again
    try:
        assert other.execute("SELECT count(*) FROM docs").fetchone()[0] == 2
    finally:
        other.close()


def test_the_racy_window_is_long_on_whole_second_filesystems_and_short_elsewhere():
    row = lambda mtime, checked: index_mod.FileRow("topic", (mtime, 0, 1, 1), "x", checked, 0)  # noqa: E731
    second = 1_700_000_000 * 10**9
    assert row(second, second + 2 * 10**9).racy()            # FAT-like: 2 s ticks
    assert not row(second, second + 4 * 10**9).racy()
    assert row(second + 123, second + 123 + 50_000_000).racy()  # ns timestamps: one tick
    assert not row(second + 123, second + 123 + 200_000_000).racy()


def test_unresolved_citations_are_looked_at_again_only_after_something_was_archived(ws,
                                                                                   monkeypatch):
    seed(ws)
    (ws.root / "topics/b.md").write_text(
        "# B\n\nGamma fires on Fridays.[^e-0123456789] ^0badc0de\n\n"
        "[^e-0123456789]: Time: `2026-08-02`; Sources: [x](openprogram/late/n1)\n")
    search(ws, "gamma")
    parsed: list[str] = []
    real = documents_mod.parse_topic  # the index parses topics through documents.py
    monkeypatch.setattr(documents_mod, "parse_topic",
                        lambda text, path, strict: parsed.append(path) or real(text, path,
                                                                               strict=strict))
    write_paragraphs(ws, "topics/c.md", [[("Delta.", ["openprogram/s/n0"], "2026-08-02")]])
    write_paragraphs(ws, "topics/c.md", [[("Delta again.", ["openprogram/s/n0"], "2026-08-02")]])
    assert parsed.count("topics/b.md") <= 1  # not once per install
    parsed.clear()
    archive(ws, [("late", "n1", "user", "Gamma fires on Fridays", TS)])
    write_paragraphs(ws, "topics/c.md", [[("Delta once more.", ["openprogram/s/n0"],
                                           "2026-08-02")]])
    assert "topics/b.md" in parsed
    assert search(ws, "gamma")[0].sources == ["openprogram/late/n1"]


def test_a_write_gives_back_the_pages_it_freed_beyond_a_few(ws, monkeypatch):
    """Pages freed in the index (deleted rows, FTS5 merges) are given back to the filesystem
    after the write, beyond FREE_PAGES_KEPT: the file stays about the size of what it holds."""
    monkeypatch.setattr(segments_mod, "FREE_PAGES_KEPT", 4)
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(2)])
    long = " ".join(["glaze"] * 60)
    write_paragraphs(ws, "topics/big.md", [[(f"Claim {i} {long}.", [ids[0]], "2026-08-01")]
                                           for i in range(300)])
    search(ws, "glaze")
    index = SearchIndex.of(ws)
    conn = index.connection()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    write_paragraphs(ws, "topics/small.md", [[("Only this is left.", [ids[1]], "2026-08-02")]])
    (ws.root / "topics/big.md").unlink()  # by hand: the next look forgets its 300 claims
    assert index.refresh() == 0 and index.count() == 1
    assert [h.text for h in search(ws, "left")] == ["Only this is left."]
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] <= 4
    assert conn.execute("PRAGMA page_count").fetchone()[0] < pages * 2 // 3  # the file shrank
