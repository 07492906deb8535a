"""A write's cost follows its batch and the files it changes, not the size of memory: the
algorithmic properties, counted (files parsed, copied, stat'ed), never timed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scriptorium.errors import WriteFailed
from scriptorium.gitrepo import UNPACKED_NAME
from scriptorium.memory import catalog as catalog_mod
from scriptorium.memory import stage as stage_mod
from scriptorium.memory import commit_plan as tx_mod
from scriptorium.memory import directory as directory_mod
from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.citations import cited_sources
from scriptorium.memory.search import SearchIndex, search
from scriptorium.memory.search import index as index_mod
from scriptorium.memory.sources import archive as archive_mod
from scriptorium.memory.workspace import Workspace

from parse_counting import count_parsed
from search_support import archive, open_ws, render

TS = "2026-08-01T10:00:00+00:00"
FILES = 12


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    """A workspace of FILES topic files, each citing its own archived turn."""
    ws = open_ws(tmp_path / "memory")
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(FILES + 4)])
    with ws.begin(allowed_sources=ids) as tx:
        for i in range(FILES):
            path = tx.stage / f"topics/area-{i % 3}/t{i}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render([[(f"Subject {i} kiln glaze number {i}.", [ids[i]],
                                      "2026-08-01")]]))
        tx.commit("seed")
    ws.ids = ids  # type: ignore[attr-defined]
    return ws


def count_parses(monkeypatch) -> list[str]:
    parsed: list[str] = []
    for module in (tx_mod, catalog_mod):
        real = module.parse_topic_bytes

        def counting(data, rel, *, strict=True, _real=real):
            parsed.append(rel)
            return _real(data, rel, strict=strict)

        monkeypatch.setattr(module, "parse_topic_bytes", counting)
    return parsed


def append_paragraph(ws: Workspace, rel: str, text: str, ref: str):
    with ws.begin(allowed_sources=[ref]) as tx:
        path = tx.stage / rel
        path.write_text(path.read_text() + f"\n{text}[^e9]\n\n[^e9]: Time: `2026-08-02`; "
                        f"Sources: [t]({ref})\n")
        return tx.commit("test: append"), tx


def test_a_commit_parses_only_the_file_the_writer_changed(ws, monkeypatch):
    """... once, and asks the archive only about the footnotes it adds (the file's earlier
    footnotes resolve from the catalog while their archive file is unchanged)."""
    TopicCatalog.of(ws).refresh()
    parsed = count_parses(monkeypatch)
    asked: list[tuple[str, str]] = []
    real = ws.sources.resolve_target
    monkeypatch.setattr(ws.sources, "resolve_target",
                        lambda rel, target: asked.append((rel, target)) or real(rel, target))
    result, _ = append_paragraph(ws, "topics/area-0/t0.md", "A new fact.", ws.ids[FILES])
    assert result.changed_files == ["topics/area-0/t0.md"]
    assert parsed == ["topics/area-0/t0.md"]  # not the other FILES - 1 topics, and once
    assert asked and {real(rel, target) for rel, target in asked} == {ws.ids[FILES]}


def test_a_write_resolves_no_path_to_find_its_catalog_and_workspaces_of_one_root_share_it(
        ws, tmp_path, monkeypatch):
    TopicCatalog.of(ws).refresh()
    resolved: list[str] = []  # the paths resolved for the catalog module (other modules
    real = os.path.realpath   # check that what they write stays inside the workspace)

    def realpath(p, *a, **k):
        caller = sys._getframe(1)
        if caller.f_code.co_name == "real_path_of":  # fsutil's, on behalf of its caller
            caller = caller.f_back
        if caller.f_code.co_filename == catalog_mod.__file__:
            resolved.append(p)
        return real(p, *a, **k)

    monkeypatch.setattr(os.path, "realpath", realpath)
    append_paragraph(ws, "topics/area-0/t0.md", "A new fact.", ws.ids[FILES])
    assert resolved == []  # the workspace's root was resolved once, by its first use
    (tmp_path / "link").symlink_to(ws.root)
    other = Workspace.open(tmp_path / "link")
    assert TopicCatalog.of(other) is TopicCatalog.of(ws)
    assert resolved == [other.root]  # the new workspace object's root, once


def test_a_second_write_resolves_no_path_to_find_its_shared_catalog_index_and_stage(
        ws, monkeypatch):
    append_paragraph(ws, "topics/area-0/t0.md", "A new fact.", ws.ids[FILES])
    resolved: list[str] = []
    real = os.path.realpath
    owners = {catalog_mod.__file__, index_mod.__file__, stage_mod.__file__}

    def realpath(p, *a, **k):
        caller = sys._getframe(1)
        if caller.f_code.co_name == "real_path_of":  # fsutil's, on behalf of its caller
            caller = caller.f_back
        if caller.f_code.co_filename in owners:
            resolved.append(p)
        return real(p, *a, **k)

    monkeypatch.setattr(os.path, "realpath", realpath)
    append_paragraph(ws, "topics/area-1/t1.md", "Another fact.", ws.ids[FILES + 1])
    assert resolved == []  # the workspace's root and runtime dir were resolved by the first


def test_an_old_footnote_is_resolved_by_the_archive_again_once_its_file_was_replaced(ws):
    """The archive replaces a file by rename on each write: the catalog's resolution of a
    footnote into it is not used after that (a deleted or rewritten archive is seen)."""
    rel = "topics/area-0/t0.md"
    catalog = TopicCatalog.of(ws).refresh()
    assert ws.ids[0] in catalog.resolutions(rel).values()
    archive(ws, [("s", "late", "user", "one more turn", TS)])  # rewrites the session's file
    assert catalog.resolutions(rel) == {}


def test_a_process_keeps_a_bounded_number_of_catalog_files_open(tmp_path, monkeypatch):
    monkeypatch.setattr(TopicCatalog, "MAX_OPEN", 2)
    monkeypatch.setattr(TopicCatalog, "_open", catalog_mod.OrderedDict())
    catalogs = [TopicCatalog.of(Workspace.open(tmp_path / f"m{i}")).refresh() for i in range(4)]
    assert [c._db is not None for c in catalogs] == [False, False, True, True]
    assert catalogs[0].refresh().paths() == [] and catalogs[0]._db is not None  # reopened


def test_a_reused_stage_copies_only_committed_files_whose_content_moved(ws):
    append_paragraph(ws, "topics/area-0/t0.md", "First.", ws.ids[FILES])
    with ws.begin() as tx:  # the stage the last commit left, already up to date
        assert tx._stage.copied == 0
        assert (tx.stage / "topics/area-0/t0.md").read_bytes() == \
            (ws.root / "topics/area-0/t0.md").read_bytes()
    hand = ws.root / "topics/area-1/t1.md"
    hand.write_text(hand.read_text().replace("kiln", "furnace"))  # outside any transaction
    with ws.begin() as tx:
        assert tx._stage.copied == 1
        assert "furnace" in (tx.stage / "topics/area-1/t1.md").read_text()
        assert sorted(p.relative_to(tx.stage).as_posix()
                      for p in tx.stage.rglob("*.md")) == TopicCatalog.of(ws).paths()


def test_an_in_place_edit_of_a_staged_file_never_reaches_the_committed_file(ws):
    committed = (ws.root / "topics/area-2/t2.md").read_bytes()
    with ws.begin() as tx:
        with open(tx.stage / "topics/area-2/t2.md", "r+b") as fh:  # same inode, in place
            fh.write(b"# Broken")
        (tx.stage / "topics/area-2/stray.md").write_text("# Stray\n")
    assert (ws.root / "topics/area-2/t2.md").read_bytes() == committed
    with ws.begin() as tx:  # the next writer sees the committed tree, not the discarded edit
        assert (tx.stage / "topics/area-2/t2.md").read_bytes() == committed
        assert not (tx.stage / "topics/area-2/stray.md").exists()


def test_a_same_size_in_place_edit_within_one_tick_is_still_seen(ws):
    """The staged files carry a sentinel mtime: a writer's write moves it to 'now', so even
    an edit that keeps size and inode (and lands in the same ctime tick) is found."""
    ref = ws.ids[FILES]
    with ws.begin(allowed_sources=[ref]) as tx:
        path = tx.stage / "topics/area-0/t3.md"
        text = path.read_text()
        with open(path, "r+", encoding="utf-8") as fh:
            fh.write(text.replace("kiln glaze", "oven glaze"))
        assert tx.commit("same size").changed_files == ["topics/area-0/t3.md"]
    assert "oven glaze" in (ws.root / "topics/area-0/t3.md").read_text()


def test_already_cited_is_answered_without_reading_any_topic(ws, monkeypatch):
    # the clock is pinned past the racy window: a file written within it is (rightly) read
    # again by content, however fast or slow the machine got here
    later = time.time_ns() + 60_000_000_000
    monkeypatch.setattr(catalog_mod.time, "time_ns", lambda: later)
    TopicCatalog.of(ws).refresh()
    parsed = count_parses(monkeypatch)
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self) or real(self))
    assert cited_sources(ws, [ws.ids[0], ws.ids[FILES]]) == {ws.ids[0]}
    assert parsed == [] and not [p for p in reads if "topics" in p.parts]


def test_the_catalog_sees_a_hand_edit_that_drops_a_citation(ws):
    assert ws.ids[5] in cited_sources(ws, ws.ids)
    (ws.root / "topics/area-2/t5.md").unlink()
    assert ws.ids[5] not in cited_sources(ws, ws.ids)
    assert cited_sources(ws) == set(ws.ids[:FILES]) - {ws.ids[5]}


def test_the_catalog_answers_what_a_full_parse_answers(ws):
    append_paragraph(ws, "topics/area-0/t0.md", "Second.", ws.ids[FILES + 1])
    fresh = TopicCatalog(ws.root, ws.sources).refresh()
    kept = TopicCatalog.of(ws).refresh()
    assert [(s.path, s.sha, s.blocks) for s in kept.summaries()] == \
        [(s.path, s.sha, s.blocks) for s in fresh.summaries()]


def test_a_query_after_a_write_does_not_walk_the_topic_files(ws, monkeypatch):
    index = SearchIndex.of(ws)
    search(ws, "kiln")
    walks = index.walks
    append_paragraph(ws, "topics/area-0/t0.md", "The saggar cracked.", ws.ids[FILES])
    stats = []
    real = os.scandir
    monkeypatch.setattr(index_mod.os, "scandir", lambda p: stats.append(p) or real(p))
    assert [h.text for h in search(ws, "saggar")] == ["The saggar cracked."]
    assert index.walks == walks and stats == []
    later = index_mod.time.time_ns() + index_mod.FULL_CHECK_NS + 1
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: later)
    search(ws, "saggar")
    assert index.walks == walks + 1  # the periodic full check still happens


def test_another_processs_install_makes_the_next_query_look(ws, monkeypatch):
    index = SearchIndex.of(ws)
    search(ws, "kiln")
    walks = index.walks
    ws.bump_generation()  # what an install in another process leaves behind
    search(ws, "kiln")
    assert index.walks == walks + 1


def test_a_write_to_a_long_topic_indexes_only_the_new_paragraph(ws):
    rel = "topics/area-0/t0.md"
    index = SearchIndex.of(ws)
    search(ws, "kiln")
    before = {r["id"]: r["text"] for r in index.rows("SELECT id, text FROM docs WHERE file=?",
                                                     (rel,))}
    append_paragraph(ws, rel, "The saggar cracked.", ws.ids[FILES])
    after = {r["id"]: r["text"] for r in index.rows("SELECT id, text FROM docs WHERE file=?",
                                                    (rel,))}
    assert {i: t for i, t in after.items() if i in before} == before  # untouched, same rows
    assert sorted(t for i, t in after.items() if i not in before) == ["The saggar cracked."]
    assert [h.text for h in search(ws, "kiln number 0")][:1] == ["Subject 0 kiln glaze number 0."]


def loose_objects(ws: Workspace) -> int:
    counts = subprocess.run(["git", "count-objects", "-v"], cwd=ws.root, capture_output=True,
                            text=True, check=True).stdout
    return int(counts.splitlines()[0].split(":")[1])


def test_a_commit_packs_the_history_once_its_loose_objects_are_big(ws, monkeypatch):
    """Loose objects are whole copies of each changed file and of the flat archive tree: a
    commit that leaves PACK_LOOSE_BYTES of them packs them as deltas."""
    monkeypatch.setattr(directory_mod, "PACK_LOOSE_BYTES", 1)
    for k in range(3):
        append_paragraph(ws, f"topics/area-{k}/t{k}.md", f"Fact {k}.", ws.ids[FILES + k])
        assert loose_objects(ws) == 0 and ws.git.pack_count() >= 1
    assert ws.git.fsck()


def test_small_commits_pack_every_few_commits(ws, monkeypatch):
    """A packing costs a git run: small writes pay it once per PACK_EVERY commits."""
    monkeypatch.setattr(directory_mod, "PACK_EVERY", 3)
    (ws.root / ".git" / UNPACKED_NAME).write_text("0\n")
    for k in range(3):
        append_paragraph(ws, f"topics/area-{k}/t{k}.md", f"Fact {k}.", ws.ids[FILES + k])
        assert (loose_objects(ws) == 0) == (k == 2)
    assert ws.git.fsck()


def test_a_commit_whose_packing_fails_stands_and_the_next_one_packs(ws, monkeypatch):
    monkeypatch.setattr(directory_mod, "PACK_LOOSE_BYTES", 1)
    real = ws.git.repack

    def failing(self, **kwargs):
        raise WriteFailed("git repack failed: disk trouble")

    monkeypatch.setattr(type(ws.git), "repack", failing)
    result, _ = append_paragraph(ws, "topics/area-0/t0.md", "Kept.", ws.ids[FILES])
    assert result.commit and not result.warnings  # committed: only the packing failed
    assert loose_objects(ws) > 0
    monkeypatch.setattr(type(ws.git), "repack", lambda self, **k: real(**k))
    append_paragraph(ws, "topics/area-1/t1.md", "Also kept.", ws.ids[FILES + 1])
    assert loose_objects(ws) == 0 and ws.git.fsck()


def test_a_cached_archive_lookup_costs_one_lstat(ws, monkeypatch):
    arch = ws.sources
    assert arch.lookup(ws.ids[0]) is not None
    calls = []
    real = os.lstat
    monkeypatch.setattr(archive_mod.os, "lstat", lambda p, *a, **k: calls.append(p) or
                        real(p, *a, **k))
    for _ in range(5):
        assert arch.lookup(ws.ids[1]) is not None
    assert len(calls) == 5


def test_the_archive_keeps_a_bounded_number_of_parsed_files(ws, monkeypatch):
    monkeypatch.setattr(archive_mod, "MAX_CACHED_FILES", 2)
    ids = archive(ws, [(f"other{i}", "n0", "user", "x", TS) for i in range(4)])
    for ref in ids:
        assert ws.sources.lookup(ref) is not None
    assert len(ws.sources._cache) == 2


def test_a_stage_left_by_a_dead_process_is_removed(ws, tmp_path):
    parked = ws.runtime_dir / f"{stage_mod.PARKED_PREFIX}999999999"
    (parked / "stage" / "topics").mkdir(parents=True)
    (parked / "owner.json").write_text('{"pid": 999999999}')
    with ws.lock():
        ws.recover()
    assert not parked.exists()


CHILD_REFRESH = """
import sys
from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.workspace import Workspace
ws = Workspace.open(sys.argv[1])
catalog = TopicCatalog.of(ws).refresh()
print(catalog.parses, len(catalog.cited()))
"""


def test_a_second_process_starts_from_the_catalog_file_and_parses_only_what_changed(ws):
    """The catalog is written as it is learnt (no save at exit): a new process reads it and
    parses only the file a hand edit changed; what it learns, the next process reuses."""
    def child() -> list[int]:
        out = subprocess.run([sys.executable, "-c", CHILD_REFRESH, str(ws.root)], check=True,
                             capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    assert child() == [0, FILES]
    hand = ws.root / "topics/area-1/t4.md"
    hand.write_text(hand.read_text().replace("kiln", "furnace"))
    assert child() == [1, FILES]
    os.utime(hand, ns=(time.time_ns(), time.time_ns() - 60_000_000_000))  # fingerprint moves
    assert child() == [0, FILES]  # the bytes are what the last child learnt: hashed, not parsed
    fresh = TopicCatalog(ws.root, ws.sources, ws.runtime_dir).refresh()
    again = TopicCatalog(ws.root, ws.sources).refresh()  # no file: parses everything
    assert again.parses == FILES
    assert [(s.path, s.sha, s.blocks) for s in fresh.summaries()] == \
        [(s.path, s.sha, s.blocks) for s in again.summaries()]


def test_a_damaged_catalog_file_is_rebuilt(ws):
    TopicCatalog.of(ws).close()  # as after the process that wrote it ended
    for suffix in ("-wal", "-shm"):
        (ws.runtime_dir / (catalog_mod.SAVED_FILE + suffix)).unlink(missing_ok=True)
    (ws.runtime_dir / catalog_mod.SAVED_FILE).write_text('{"version": 1, "files": [[1]]}')
    fresh = TopicCatalog(ws.root, ws.sources, ws.runtime_dir).refresh()
    assert fresh.parses == FILES and fresh.cited() == set(ws.ids[:FILES])


def test_an_install_hashes_the_topic_it_wrote_once_for_the_catalog_and_the_index(ws,
                                                                                 monkeypatch):
    """The transaction hashes each topic it installs; the catalog (its summary) and the search
    index (its file row) take that hash instead of hashing the same bytes again."""
    TopicCatalog.of(ws).refresh()
    search(ws, "kiln")  # the index is current before the write
    hashed: list[tuple[str, bytes]] = []
    for module in (tx_mod, catalog_mod, index_mod):
        def counting(data, _real=module.sha256, _name=module.__name__):
            hashed.append((_name, bytes(data)))
            return _real(data)

        monkeypatch.setattr(module, "sha256", counting)
    rel = "topics/area-0/t0.md"
    result, _ = append_paragraph(ws, rel, "A new fact.", ws.ids[FILES])
    assert result.changed_files == [rel]
    written = (ws.root / rel).read_bytes()
    assert [name for name, data in hashed if data == written] == [tx_mod.__name__]
    assert search(ws, "new fact")[0].path == rel  # the index did learn the write


LONG = 60  # paragraphs of the long topic, each citing its own archived turn


def long_topic(ws: Workspace) -> tuple[str, list[str]]:
    """topics/long.md: LONG paragraphs committed (so normalisation wrote the file), and
    turns archived for two more."""
    ids = archive(ws, [("long", f"m{i}", "user", f"kiln turn {i}", TS) for i in range(LONG + 2)])
    rel = "topics/long.md"
    with ws.begin(allowed_sources=ids[:LONG]) as tx:
        (tx.stage / rel).write_text(render([[(f"Firing {i} reached cone {i % 9}.", [ids[i]],
                                              "2026-08-01")] for i in range(LONG)]))
        tx.commit("seed a long topic")
    return rel, ids


def test_a_write_to_a_long_topic_parses_and_resolves_only_what_it_adds(ws, monkeypatch):
    """Normalising the staged file parsed all of it and re-rendered every footnote (each
    source's canonical link asked of the archive again), then the commit parsed the result
    once more: a batch cost as much as the topic it extends. Now only the added paragraph
    is normalised; the result is parsed once (for the catalog and the index)."""
    rel, ids = long_topic(ws)
    parsed = count_parsed(monkeypatch)
    links: list[str] = []
    real_link = ws.sources.canonical_link

    def counting_link(path, source_id):
        links.append(source_id)
        return real_link(path, source_id)

    monkeypatch.setattr(ws.sources, "canonical_link", counting_link)
    result, _ = append_paragraph(ws, rel, "The kiln cooled overnight.", ids[LONG])
    assert result.changed_files == [rel]
    size = (ws.root / rel).stat().st_size
    assert sum(parsed) < size + 2_000  # the result once, and the added lines
    assert links == [ids[LONG]]  # only the new footnote's link is made


def test_an_install_into_a_home_of_many_blocks_never_builds_the_creation_order(ws, monkeypatch):
    """runtime.json ranks every block of the home; an install adds its own blocks' ranks to
    the file's bytes instead of loading the whole order into a dict and dumping it again."""
    from scriptorium.memory.runtime_state import RuntimeState

    state = ws.load_runtime()
    state.creation_order.update({f"{i:08x}": len(state.creation_order) + i for i in range(3000)})
    ws.save_runtime(state)
    before = ws.runtime_path.read_bytes()
    built: list[object] = []
    real = RuntimeState.from_obj.__func__

    def counting(cls, obj):
        built.append(obj)
        return real(cls, obj)

    monkeypatch.setattr(RuntimeState, "from_obj", classmethod(counting))
    result, _ = append_paragraph(ws, "topics/area-0/t0.md", "A new glaze recipe.", ws.ids[13])
    assert result.created_blocks and built == []
    monkeypatch.undo()
    after = ws.load_runtime()
    top = max(state.creation_order.values())
    ranked = {b: top + 1 + i for i, b in enumerate(result.created_blocks)}
    assert after.creation_order == {**state.creation_order, **ranked}
    assert ws.runtime_path.read_bytes() == after.dumps().encode() != before
