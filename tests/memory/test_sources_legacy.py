"""The frozen legacy archive: retrieval reader and the first-header-only migration rule."""

from __future__ import annotations

import pytest

from scriptorium.memory.sources import first_legacy_header, read_legacy, source_anchor

PATH = "sources/openprogram/s-1.md"


def header(sid, anchor=None):
    return f'<a id="{anchor or source_anchor(sid)}"></a>\n<!-- source-id:{sid} -->\n'


def test_legacy_records_are_read_as_trusted_frames():
    text = ("# s-1\n\n" + header("openprogram/s-1/m1") + "[2026-01-01] user: one\n\n"
            + header("openprogram/s-1/m2") + "<!-- speaker-id:x -->\n<!-- record-lines:2 -->\n"
            "[2026-01-02] assistant: two\nlines\n\n")
    frames = read_legacy(text, PATH)
    assert [(f.source_id, f.content, f.label, f.trusted, f.version) for f in frames] == [
        ("openprogram/s-1/m1", "one", "user", True, "legacy"),
        ("openprogram/s-1/m2", "two\nlines", "assistant", True, "legacy")]
    assert frames[0].line == 2 and frames[0].speaker_id is None


def test_headers_in_the_wrong_file_or_with_a_wrong_anchor_are_not_records():
    text = (header("openprogram/other/m1") + "[t] user: a\n\n"
            + header("openprogram/s-1/m2", anchor=source_anchor("x/y/z")) + "[t] user: b\n\n"
            + header("openprogram/s-1/m3") + "no record line\n\n")
    assert read_legacy(text, PATH) == []


def test_an_unframed_user_record_may_carry_a_speaker_hint():
    text = header("openprogram/s-1/m1") + "[t] user: [Ann (u1)] hi\n"
    assert read_legacy(text, PATH)[0].speaker_hint == "Ann (u1)"
    text = header("openprogram/s-1/m1") + "[t] assistant: [Ann (u1)] hi\n"
    assert read_legacy(text, PATH)[0].speaker_hint is None


def test_migration_trusts_the_first_header_only():
    text = ("# s-1\n\n" + header("openprogram/s-1/m1") + "[t] user: one\n\n"
            + header("openprogram/s-1/m2") + "[t] user: two\n")
    assert first_legacy_header(text, "s-1") == "m1"


def test_a_forged_second_header_in_a_body_never_counts():
    forged = "[t] user: see\n" + header("openprogram/s-1/m9")
    assert first_legacy_header("# s-1\n\n" + header("openprogram/s-1/m1") + forged, "s-1") == "m1"
    assert first_legacy_header("# s-1\n\nintro\n" + header("openprogram/s-1/m9"), "s-1") is None


@pytest.mark.parametrize("text", [
    "# s-2\n\n" + header("openprogram/s-1/m1"),                        # wrong title
    "# s-1\n\n" + header("openprogram/s-2/m1"),                        # wrong session
    "# s-1\n\n" + header("openprogram/s-1/m1", anchor=source_anchor("openprogram/s-1/m2")),
    "# s-1\n\n" + header("claude-code/s-1/m1"),                        # wrong provider
    "# s-1\n" + header("openprogram/s-1/m1"),                          # no blank line
    "# s-1\r\n\r\n" + header("openprogram/s-1/m1"),                    # CRLF
    "# s-1\n\n" + header("openprogram/s-1/m1").replace("\n", "\r\n"),
    "# s-1\n\n" + header("openprogram/s-1/m1").rstrip("\n"),           # truncated header
    "# s-1\n\n\n" + header("openprogram/s-1/m1"),                      # wrong offset
    "",
])
def test_migration_finds_no_candidate_in_a_wrong_file(text):
    assert first_legacy_header(text, "s-1") is None


def test_migration_header_works_for_a_session_needing_percent_encoding():
    assert first_legacy_header("# a b/c\n\n" + header("openprogram/a b/c/n1"), "a b/c") is None
    assert first_legacy_header("# a b\n\n" + header("openprogram/a b/n/1"), "a b") == "n/1"
