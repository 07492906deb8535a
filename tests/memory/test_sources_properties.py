"""Properties of the archive: any text round-trips, batching does not matter, parsers never crash."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit import examples

from scriptorium.memory.sources import (MARKER, SourceArchive, SourceRecord, first_legacy_header,
                                        parse_v2, read_legacy, read_text, render_v2_file,
                                        source_anchor)

SETTINGS = settings(max_examples=examples(80), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

_TRICKY_LINES = [
    "", "\r", "\n", "\r\n", "\u2028", "\u2029", "[", "]", "[x] y: z", "<!-- record-lines:1 -->",
    '<a id="source-0123456789abcdef"></a>', "<!-- source-id:openprogram/t/m9 -->", MARKER,
    "<!-- speaker-id:x -->", "<!-- source-meta:e30 -->", "# t", "  ", "\t", "é", "\x00",
]
texts = st.lists(st.one_of(st.sampled_from(_TRICKY_LINES), st.text(max_size=20)),
                 max_size=8).map("".join)
names = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/[]<>\r\n",
                                       exclude_categories=("Cc", "Cs", "Zl", "Zp", "Co", "Cn")),
                min_size=1, max_size=8).filter(lambda s: s.isprintable())
records = st.builds(
    SourceRecord, provider=st.just("openprogram"), thread=st.sampled_from(["t", "T2", "x y"]),
    message=names, role=st.sampled_from(["user", "assistant"]), content=texts,
    timestamp=st.sampled_from(["", "2026-08-09T20:15:06+08:00", "yesterday"]),
    speaker_id=st.sampled_from(["", "u-1", "owner/local", "--", "é"]),
    speaker_display=st.sampled_from(["", "Ann", "B: [x]"]),
)


def _frames(root: Path):
    return list(SourceArchive(root).iter_frames())


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@SETTINGS
@given(st.lists(records, min_size=1, max_size=6))
def test_any_record_text_survives_archive_then_parse_byte_for_byte(batch):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        arch = SourceArchive(root)
        written = arch.archive(batch)
        first = {}
        for r in batch:
            first.setdefault(r.source_id, r)
        assert sorted(written) == sorted(first)
        for sid, r in first.items():
            f = arch.lookup(sid)
            assert f is not None and f.version == "v2"
            assert f.content == r.content and f.timestamp == r.timestamp
        for rel in {f.path for f in _frames(root)}:
            assert arch.file_status(rel).complete
            raw = (root / rel).read_bytes()
            # The file ends with its last record's text and one terminating LF (a record whose
            # body ends in blank lines legitimately puts several LFs before it).
            last = arch.file_status(rel).frames[-1]
            assert raw.endswith(last.text.encode("utf-8", "surrogateescape") + b"\n")


@pytest.mark.slow
@SETTINGS
@given(st.lists(records, min_size=1, max_size=8), st.lists(st.integers(0, 8), max_size=3))
def test_appending_in_several_batches_equals_one_batch_and_rearchiving_changes_nothing(batch, cuts):
    # One batch sorts by (provider, thread, order); per-thread order is what batching keeps.
    bounds = sorted({0, len(batch), *[min(c, len(batch)) for c in cuts]})
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        SourceArchive(Path(a)).archive(batch)
        arch = SourceArchive(Path(b))
        for lo, hi in zip(bounds, bounds[1:]):
            arch.archive(batch[lo:hi])
        assert _tree(Path(a)) == _tree(Path(b))
        assert arch.archive(batch) == []
        assert _tree(Path(a)) == _tree(Path(b))


@SETTINGS
@given(st.lists(records, min_size=1, max_size=5))
def test_a_rendered_file_parses_to_the_same_records(batch):
    seen, uniq = set(), []
    for r in batch:
        if r.thread == "t" and r.source_id not in seen:
            seen.add(r.source_id)
            uniq.append(r)
    text = render_v2_file(uniq)
    result = parse_v2(text, "sources/openprogram/_v2/t.md")
    assert result.complete
    assert [(f.source_id, f.content) for f in result.frames] == [(r.source_id, r.content) for r in uniq]


@SETTINGS
@given(st.binary(max_size=400))
def test_random_bytes_never_crash_the_readers(data):
    text = read_text(data)
    result = parse_v2(text, "sources/openprogram/_v2/t.md")
    assert isinstance(result.frames, list) and (result.complete or result.error)
    assert isinstance(read_legacy(text, "sources/openprogram/t.md"), list)
    assert first_legacy_header(text, "t") is None or isinstance(first_legacy_header(text, "t"), str)


_pieces = st.sampled_from([
    MARKER, "", "\n", "\r\n", '<a id="' + source_anchor("openprogram/t/m1") + '"></a>',
    "<!-- source-id:openprogram/t/m1 -->", "<!-- record-lines:1 -->", "<!-- record-lines:3 -->",
    "<!-- speaker-id:%ZZ -->", "<!-- source-meta:e30 -->", "[t] user: x", "# t", "junk",
])


@SETTINGS
@given(st.lists(st.one_of(_pieces, st.text(max_size=10)), max_size=30))
def test_random_frame_like_text_yields_a_valid_prefix(parts):
    text = "\n".join(parts)
    result = parse_v2(text, "sources/openprogram/_v2/t.md")
    # whatever was accepted is itself a complete, valid archive when cut after the last frame
    if result.frames:
        cut = "\n".join(text.split("\n")[: result.frames[-1].end_line])
        again = parse_v2(cut + "\n", "sources/openprogram/_v2/t.md")
        assert again.complete
        assert [f.source_id for f in again.frames] == [f.source_id for f in result.frames]
    read_legacy(text, "sources/openprogram/t.md")
    first_legacy_header(text, "t")
