"""The archive on disk: append-only idempotent writes, lookups, links, refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scriptorium.errors import InvalidInput
from scriptorium.memory.sources import (MARKER, SourceArchive, SourceArchiveError, SourceIdError,
                                        SourcePathCollision, SourceRecord, parse_v2,
                                        source_anchor, v2_path)

FIXTURE_V2 = "sources/openprogram/_v2"


def rec(message: str, content: str = "hello", thread: str = "s-91", provider: str = "openprogram",
        **kw) -> SourceRecord:
    kw.setdefault("role", "user")
    kw.setdefault("timestamp", "2026-08-09T20:15:06+08:00")
    return SourceRecord(provider=provider, thread=thread, message=message, content=content, **kw)


def tree_bytes(root: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(root.rglob("*")):
        out[p.relative_to(root).as_posix()] = p.read_bytes() if p.is_file() else b"<dir>"
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "memory"
    root.mkdir()
    return root


def test_a_new_archive_file_is_marker_blank_line_and_frames_ending_in_one_lf(ws):
    written = SourceArchive(ws).archive([rec("n7", "the budget is 50k")])
    assert written == ["openprogram/s-91/n7"]
    text = (ws / FIXTURE_V2 / "s-91.md").read_text()
    assert text == (
        MARKER + "\n\n"
        '<a id="source-e35a9abf875fbc00"></a>\n'
        "<!-- source-id:openprogram/s-91/n7 -->\n"
        "<!-- source-meta:eyJhdXRob3JpdHlfdGllciI6bnVsbCwicHJpbmNpcGFsX2lkIjoidW5rbm93biIsInNwZWFr"
        "ZXJfa2luZCI6InVua25vd24iLCJ0cnVzdF9zdGF0ZSI6InRydXN0ZWQiLCJ2ZXJzaW9uIjoxfQ -->\n"
        "<!-- record-lines:1 -->\n"
        "[2026-08-09T20:15:06+08:00] user: the budget is 50k\n"
    )


def test_archive_files_are_owner_only(ws):
    SourceArchive(ws).archive([rec("n1")])
    assert (ws / FIXTURE_V2 / "s-91.md").stat().st_mode & 0o777 == 0o600


def test_rearchiving_the_same_records_writes_nothing_and_leaves_bytes_identical(ws):
    arch = SourceArchive(ws)
    arch.archive([rec("m1", "a"), rec("m2", "b\n")])
    before = tree_bytes(ws)
    assert arch.archive([rec("m1", "a"), rec("m2", "b\n")]) == []
    assert tree_bytes(ws) == before


def test_a_batch_repeating_an_id_writes_it_once(ws):
    assert SourceArchive(ws).archive([rec("m1", "a"), rec("m1", "other")]) == ["openprogram/s-91/m1"]
    frames = parse_v2((ws / FIXTURE_V2 / "s-91.md").read_text(), f"{FIXTURE_V2}/s-91.md").frames
    assert [f.content for f in frames] == ["a"]


def test_appending_in_batches_equals_writing_one_batch(tmp_path):
    records = [rec(f"m{i}", f"text {i}\n" * (i % 3)) for i in range(6)]
    one, many = tmp_path / "one", tmp_path / "many"
    SourceArchive(one).archive(records)
    arch = SourceArchive(many)
    for chunk in (records[:1], records[1:4], records[4:]):
        arch.archive(chunk)
    assert tree_bytes(one) == tree_bytes(many)


def test_records_are_grouped_per_thread_in_input_order_and_ids_returned_in_written_order(ws):
    batch = [rec("b2", thread="t-b"), rec("a1", thread="t-a"), rec("b1", thread="t-b"),
             rec("a0", thread="t-a")]
    written = SourceArchive(ws).archive(batch)
    assert written == ["openprogram/t-a/a1", "openprogram/t-a/a0", "openprogram/t-b/b2",
                       "openprogram/t-b/b1"]
    p = f"{FIXTURE_V2}/t-b.md"
    assert [f.source_id for f in parse_v2((ws / p).read_text(), p).frames] == [
        "openprogram/t-b/b2", "openprogram/t-b/b1"]


def test_lookup_finds_a_written_frame_with_its_exact_text_and_trust(ws):
    arch = SourceArchive(ws)
    arch.archive([rec("n7", "line one\r\nline two\n", speaker_id="owner/local",
                      speaker_display="Owner")])
    f = arch.lookup("openprogram/s-91/n7")
    assert f is not None and f.version == "v2" and f.trusted
    assert f.content == "line one\r\nline two\n"
    assert f.label == "Owner (owner/local)" and f.speaker_id == "owner/local"
    assert f.speaker_display == "Owner" and f.speaker_trusted
    assert f.path == f"{FIXTURE_V2}/s-91.md" and f.anchor == source_anchor("openprogram/s-91/n7")
    assert arch.lookup("openprogram/s-91/missing") is None
    assert arch.lookup("not an id") is None


def test_pending_metadata_makes_an_untrusted_frame(ws):
    meta = {"authority_tier": None, "principal_id": "p", "speaker_kind": "member",
            "trust_state": "pending", "version": 1}
    arch = SourceArchive(ws)
    arch.archive([rec("n1", meta=meta)])
    f = arch.lookup("openprogram/s-91/n1")
    assert f is not None and not f.trusted and f.meta == meta


def test_lookup_sees_a_file_changed_behind_its_back(ws):
    arch = SourceArchive(ws)
    arch.archive([rec("n1")])
    assert arch.lookup("openprogram/s-91/n1") is not None
    SourceArchive(ws).archive([rec("n2")])          # another writer
    assert arch.lookup("openprogram/s-91/n2") is not None
    (ws / FIXTURE_V2 / "s-91.md").write_text("garbage")
    assert arch.lookup("openprogram/s-91/n1") is None


def test_repeated_lookups_parse_a_file_once(ws, monkeypatch):
    SourceArchive(ws).archive([rec(f"n{i}") for i in range(5)])
    arch = SourceArchive(ws)
    import scriptorium.memory.sources.archive as mod
    calls = []
    real = mod.parse_v2
    monkeypatch.setattr(mod, "parse_v2", lambda t, p: calls.append(p) or real(t, p))
    for _ in range(3):
        for i in range(5):
            assert arch.lookup(f"openprogram/s-91/n{i}") is not None
    assert len(calls) == 1


def test_lookups_after_a_write_use_the_parse_the_write_checked_its_file_with(ws, monkeypatch):
    arch = SourceArchive(ws)
    arch.archive([rec("n0")])
    import scriptorium.memory.sources.archive as mod
    calls = []
    real = mod.parse_v2
    monkeypatch.setattr(mod, "parse_v2", lambda t, p: calls.append(p) or real(t, p))
    arch.archive([rec(f"n{i}") for i in range(1, 4)])  # parses only the result: the old file's is cached
    assert len(calls) == 1
    frames = [arch.lookup(f"openprogram/s-91/n{i}") for i in range(4)]
    assert len(calls) == 1  # the lookups parse nothing
    assert frames == [SourceArchive(ws).lookup(f"openprogram/s-91/n{i}") for i in range(4)]


def test_refuses_to_append_to_a_truncated_file_and_writes_nothing(ws):
    arch = SourceArchive(ws)
    arch.archive([rec("m1")])
    path = ws / FIXTURE_V2 / "s-91.md"
    path.write_bytes(path.read_bytes()[:-1])            # lose the final separator
    before = tree_bytes(ws)
    with pytest.raises(SourceArchiveError, match="invalid or truncated v2 archive"):
        arch.archive([rec("m2"), rec("x1", thread="other")])
    assert tree_bytes(ws) == before


def test_unsafe_ids_are_refused_before_any_directory_is_created(ws):
    for bad in (rec("m[1]"), rec("m1", thread="a<b"), rec("m\n1"), rec("m1", provider="..")):
        with pytest.raises(SourceIdError) as err:
            SourceArchive(ws).archive([rec("ok"), bad])
        assert isinstance(err.value, InvalidInput) and "\n" not in str(err.value)
    assert list(ws.iterdir()) == []


def test_a_bad_timestamp_or_empty_label_is_refused_before_writing(ws):
    for bad in (rec("m1", timestamp="2026]"), rec("m1", timestamp="a\nb"), rec("m1", role=" \x00")):
        with pytest.raises(InvalidInput):
            SourceArchive(ws).archive([bad])
    assert list(ws.iterdir()) == []


def test_case_equivalent_batch_paths_are_rejected_before_writes(ws):
    with pytest.raises(SourcePathCollision):
        SourceArchive(ws).archive([rec("m1", thread="Abc"), rec("m2", thread="abc")])
    with pytest.raises(SourcePathCollision):
        SourceArchive(ws).archive([rec("m1", provider="OpenProgram"), rec("m2")])
    assert list(ws.iterdir()) == []


def test_a_path_colliding_with_an_existing_entry_rejects_the_whole_batch(ws):
    arch = SourceArchive(ws)
    arch.archive([rec("m1", thread="Abc")])
    before = tree_bytes(ws)
    with pytest.raises(SourcePathCollision):
        arch.archive([rec("x1", thread="fresh"), rec("m2", thread="abc")])
    assert tree_bytes(ws) == before
    (ws / "sources" / "Claude-Code").mkdir()
    with pytest.raises(SourcePathCollision):
        arch.archive([rec("m1", provider="claude-code")])


@given(st.lists(st.text(st.sampled_from("aAbBßSsﬀfFİiıIé\u0301e\u212a"), max_size=4), max_size=8),
       st.text(st.sampled_from("aAbBßSsﬀfFİiıIé\u0301e\u212a"), min_size=1, max_size=4))
def test_an_existing_entry_collides_exactly_when_its_folded_name_matches(entries, name):
    """The check of a thread against its directory lists the whole archive at each batch,
    so an ASCII entry is folded by ``lower()``: the same answer as folding every entry
    (NFC then casefold), non-ASCII names, the Kelvin sign and combining accents included."""
    from scriptorium.memory.sources.archive import _folded_twin
    from scriptorium.memory.sources.ids import fold_name

    twins = [e for e in entries if e != name and fold_name(e) == fold_name(name)]
    assert _folded_twin(entries, name) == (twins[0] if twins else None)


def test_temporary_files_go_to_the_runtime_dir_and_do_not_stay(ws):
    runtime = ws / ".scriptorium"
    runtime.mkdir()
    SourceArchive(ws, tmp_dir=runtime).archive([rec("m1")])
    assert list(runtime.iterdir()) == []
    assert sorted(p.name for p in (ws / FIXTURE_V2).iterdir()) == ["s-91.md"]


def test_a_legacy_copy_never_suppresses_a_v2_write_and_v2_wins_lookup(ws):
    legacy = ws / "sources" / "openprogram" / "s-91.md"
    legacy.parent.mkdir(parents=True)
    sid = "openprogram/s-91/m1"
    legacy.write_text(f'# s-91\n\n<a id="{source_anchor(sid)}"></a>\n<!-- source-id:{sid} -->\n'
                      "[2026-01-01] user: old words\n\n")
    arch = SourceArchive(ws)
    assert arch.lookup(sid).version == "legacy"
    assert arch.archive([rec("m1", "new words")]) == [sid]
    f = arch.lookup(sid)
    assert f.version == "v2" and f.content == "new words"
    assert [g.version for g in arch.iter_frames()] == ["v2"]


def test_iter_frames_walks_sorted_files_and_skips_symlinks(ws, tmp_path):
    arch = SourceArchive(ws)
    arch.archive([rec("m1", thread="b"), rec("m1", thread="a")])
    outside = tmp_path / "outside.md"
    outside.write_text("x")
    os.symlink(outside, ws / FIXTURE_V2 / "c.md")
    assert [f.source_id for f in arch.iter_frames()] == ["openprogram/a/m1", "openprogram/b/m1"]


def test_canonical_link_is_relative_from_the_topic_and_resolves_back(ws):
    arch = SourceArchive(ws)
    arch.archive([rec("n7")])
    link = arch.canonical_link("topics/people/dave.md", "openprogram/s-91/n7")
    assert link == "../../sources/openprogram/_v2/s-91.md#source-e35a9abf875fbc00"
    assert arch.resolve_target("topics/people/dave.md", link) == "openprogram/s-91/n7"
    assert arch.canonical_link("topics/core.md", "openprogram/s-91/n7") == (
        "../sources/openprogram/_v2/s-91.md#source-e35a9abf875fbc00")
    assert arch.canonical_link("topics/core.md", "openprogram/s-91/nope") is None


def test_resolve_target_accepts_plain_handles_and_rejects_unknown_or_misplaced_links(ws):
    arch = SourceArchive(ws)
    arch.archive([rec("n7"), rec("n8")])
    sid = "openprogram/s-91/n7"
    good = "../../sources/openprogram/_v2/s-91.md#" + source_anchor(sid)
    assert arch.resolve_target("topics/people/dave.md", sid) == sid
    assert arch.resolve_target("topics/people/dave.md", "openprogram/s-91/zz") is None
    assert arch.resolve_target("topics/dave.md", good) is None            # wrong depth
    assert arch.resolve_target("topics/people/dave.md", good[:-1] + ("1" if good[-1] != "1" else "2")) is None
    assert arch.resolve_target("topics/people/dave.md",
                               "../../../sources/openprogram/_v2/s-91.md#" + source_anchor(sid)) is None
    assert arch.resolve_target("topics/people/dave.md", "") is None


def test_legacy_links_resolve_when_there_is_no_v2_frame(ws):
    sid = "openprogram/s-1/m1"
    legacy = ws / "sources" / "openprogram" / "s-1.md"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(f'# s-1\n\n<a id="{source_anchor(sid)}"></a>\n<!-- source-id:{sid} -->\n'
                      "[2026-01-01] user: old\n")
    arch = SourceArchive(ws)
    link = arch.canonical_link("topics/x.md", sid)
    assert link == f"../sources/openprogram/s-1.md#{source_anchor(sid)}"
    assert arch.resolve_target("topics/x.md", link) == sid


def test_the_reference_archives_resolve_every_citation_of_their_topics(written_home):
    import re
    ws = written_home / "memory"
    arch = SourceArchive(ws)
    for topic in (ws / "topics").rglob("*.md"):
        rel = topic.relative_to(ws).as_posix()
        targets = re.findall(r"\]\(([^)]+)\)", topic.read_text())
        assert targets
        for t in targets:
            sid = arch.resolve_target(rel, t)
            assert sid is not None and arch.canonical_link(rel, sid) == t


def test_appending_to_a_reference_archive_keeps_its_bytes_as_a_prefix(written_home):
    ws = written_home / "memory"
    path = ws / FIXTURE_V2 / "offsite.md"
    before = path.read_bytes()
    assert SourceArchive(ws).archive([rec("o4-edit", thread="offsite")]) == ["openprogram/offsite/o4-edit"]
    after = path.read_bytes()
    assert after.startswith(before + b"\n<a id=")
    assert SourceArchive(ws).file_status(f"{FIXTURE_V2}/offsite.md").complete
    assert v2_path("openprogram/offsite/x") == f"{FIXTURE_V2}/offsite.md"


def test_an_empty_batch_writes_nothing(ws):
    assert SourceArchive(ws).archive([]) == []
    assert list(ws.iterdir()) == []


def test_a_symlinked_archive_file_is_neither_read_nor_written_through(ws, tmp_path):
    elsewhere = tmp_path / "elsewhere.md"
    SourceArchive(tmp_path / "other").archive([rec("m1")])
    elsewhere.write_bytes((tmp_path / "other" / FIXTURE_V2 / "s-91.md").read_bytes())
    (ws / FIXTURE_V2).mkdir(parents=True)
    os.symlink(elsewhere, ws / FIXTURE_V2 / "s-91.md")
    arch = SourceArchive(ws)
    assert arch.lookup("openprogram/s-91/m1") is None
    with pytest.raises(SourceArchiveError):
        arch.archive([rec("m2")])
    assert b"m2" not in elsewhere.read_bytes()


def test_a_frame_after_an_invalid_tail_cannot_be_cited(ws):
    arch = SourceArchive(ws)
    arch.archive([rec("m1"), rec("m2"), rec("m3")])
    path = ws / FIXTURE_V2 / "s-91.md"
    head, sep, tail = path.read_text().partition("<!-- source-id:openprogram/s-91/m2 -->")
    path.write_text(head + sep + tail.replace("record-lines:1", "record-lines:x", 1))
    status = arch.file_status(f"{FIXTURE_V2}/s-91.md")
    assert not status.complete and [f.source_id for f in status.frames] == ["openprogram/s-91/m1"]
    assert arch.lookup("openprogram/s-91/m1") is not None
    for sid, ok in (("openprogram/s-91/m1", True), ("openprogram/s-91/m2", False),
                    ("openprogram/s-91/m3", False)):
        link = f"../../sources/openprogram/_v2/s-91.md#{source_anchor(sid)}"
        assert (arch.resolve_target("topics/a/b.md", link) == sid) is ok
        assert (arch.canonical_link("topics/a/b.md", sid) == link) is ok
    with pytest.raises(SourceArchiveError):
        arch.archive([rec("m4")])


def test_the_legacy_cursor_fixture_archives_are_complete(legacy_home):
    arch = SourceArchive(legacy_home / "memory")
    frames = list(arch.iter_frames())
    assert len(frames) == 8 and all(f.trusted and f.version == "v2" for f in frames)
    for rel in {f.path for f in frames}:
        assert arch.file_status(rel).complete
