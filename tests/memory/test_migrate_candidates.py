"""Which archived ids migration may even consider: each format's own trust boundary."""

from __future__ import annotations

import os

from hypothesis import given, settings, strategies as st

from testkit import examples

from scriptorium.memory.migrate import archive_candidates
from scriptorium.memory.sources import source_anchor

from upgrade_support import legacy_header, legacy_text, v2_text, write_legacy, write_v2


def test_no_sources_tree_gives_no_candidates(tmp_path):
    assert archive_candidates(tmp_path) == {}


def test_only_the_first_legacy_header_is_a_candidate(tmp_path):
    write_legacy(tmp_path, "s", legacy_text("s", [("m1", "hello"), ("m2", "world")]))
    assert archive_candidates(tmp_path) == {"s": ["m1"]}


def test_a_forged_second_legacy_header_in_a_body_is_not_a_candidate(tmp_path):
    body = "look at this:\n\n" + legacy_header("s", "m2") + "[2026-01-02T10:00:00+00:00] user: x"
    write_legacy(tmp_path, "s", legacy_text("s", [("m1", body)]))
    assert archive_candidates(tmp_path) == {"s": ["m1"]}


def test_a_legacy_file_with_the_wrong_title_gives_nothing(tmp_path):
    write_legacy(tmp_path, "s", legacy_text("s", [("m1", "x")], title="t"))
    assert archive_candidates(tmp_path) == {}


def test_a_legacy_header_naming_another_session_gives_nothing(tmp_path):
    # file and title say "s", the header's id says session "t" (a copied-in record)
    text = "# s\n\n" + legacy_header("t", "m1") + "[2026-01-02T10:00:00+00:00] user: x\n\n"
    write_legacy(tmp_path, "s", text)
    assert archive_candidates(tmp_path) == {}


def test_a_legacy_header_in_the_wrong_session_file_gives_nothing(tmp_path):
    # the whole file (title and header) is about "t" but sits in s.md
    write_legacy(tmp_path, "t", legacy_text("t", [("m1", "x")]), stem="s")
    assert archive_candidates(tmp_path) == {}


def test_a_legacy_header_with_the_wrong_anchor_gives_nothing(tmp_path):
    header = legacy_header("s", "m1").replace(source_anchor("openprogram/s/m1"),
                                              source_anchor("openprogram/s/m2"))
    write_legacy(tmp_path, "s", "# s\n\n" + header + "[t] user: x\n\n")
    assert archive_candidates(tmp_path) == {}


def test_a_legacy_header_not_at_the_exact_offset_gives_nothing(tmp_path):
    write_legacy(tmp_path, "s", "# s\n\n\n" + legacy_header("s", "m1") + "[t] user: x\n\n")
    write_legacy(tmp_path, "u", "# u\n" + legacy_header("u", "m1") + "[t] user: x\n\n")
    assert archive_candidates(tmp_path) == {}


def test_a_crlf_legacy_file_gives_nothing(tmp_path):
    text = legacy_text("s", [("m1", "x")]).replace("\n", "\r\n")
    write_legacy(tmp_path, "s", text)
    assert archive_candidates(tmp_path) == {}


def test_a_percent_encoded_legacy_file_name_names_its_session(tmp_path):
    path = write_legacy(tmp_path, "a b/c", legacy_text("a b/c", [("m1", "x")]))
    assert path.name == "a%20b%2Fc.md"
    # "/" cannot be a thread in an id, so only the space case yields a candidate
    write_legacy(tmp_path, "plan b", legacy_text("plan b", [("m1", "x")]))
    assert archive_candidates(tmp_path) == {"plan b": ["m1"]}


def test_legacy_files_in_subdirectories_are_not_read(tmp_path):
    write_legacy(tmp_path, "s", legacy_text("s", [("m1", "x")]), stem="deeper/s")
    assert archive_candidates(tmp_path) == {}


def test_v2_valid_frames_are_candidates_in_file_order(tmp_path):
    write_v2(tmp_path, "s", v2_text("s", [("m1", "a"), ("m2", "b"), ("m3", "c")]))
    assert archive_candidates(tmp_path) == {"s": ["m1", "m2", "m3"]}


def test_frame_looking_text_inside_a_v2_record_is_not_a_candidate(tmp_path):
    inner = v2_text("s", [("m9", "forged")]).split("\n", 2)[2]  # frames without the marker
    write_v2(tmp_path, "s", v2_text("s", [("m1", "see:\n\n" + inner), ("m2", "b")]))
    assert archive_candidates(tmp_path) == {"s": ["m1", "m2"]}


def test_a_bad_record_lines_line_ends_v2_candidates_even_before_valid_looking_frames(tmp_path):
    good = v2_text("s", [("m1", "a")])
    bad = v2_text("s", [("m2", "b")]).split("\n", 2)[2].replace("record-lines:1", "record-lines:x")
    later = v2_text("s", [("m3", "c")]).split("\n", 2)[2]
    write_v2(tmp_path, "s", good + "\n" + bad + "\n" + later)
    assert archive_candidates(tmp_path) == {"s": ["m1"]}


def test_a_crlf_v2_file_gives_nothing(tmp_path):
    write_v2(tmp_path, "s", v2_text("s", [("m1", "a")]).replace("\n", "\r\n"))
    assert archive_candidates(tmp_path) == {}


def test_other_providers_are_never_candidates(tmp_path):
    write_v2(tmp_path, "s", v2_text("s", [("m1", "a")], provider="claude-code"),
             provider="claude-code")
    assert archive_candidates(tmp_path) == {}


def test_legacy_and_v2_ids_of_one_session_are_united(tmp_path):
    write_legacy(tmp_path, "s", legacy_text("s", [("m1", "a")]))
    write_v2(tmp_path, "s", v2_text("s", [("m1", "a"), ("m2", "b")]))
    assert archive_candidates(tmp_path) == {"s": ["m1", "m2"]}


def test_symlinked_archive_files_are_not_read(tmp_path):
    real = tmp_path / "elsewhere.md"
    real.write_text(v2_text("s", [("m1", "a")]))
    link = tmp_path / "sources" / "openprogram" / "_v2" / "s.md"
    link.parent.mkdir(parents=True)
    os.symlink(real, link)
    assert archive_candidates(tmp_path) == {}


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@settings(max_examples=examples(100), deadline=None)
@given(bodies=st.lists(_text, min_size=1, max_size=4), garbage=st.binary(max_size=80))
def test_candidates_never_come_from_record_bodies(tmp_path_factory, bodies, garbage):
    """Whatever the bodies say, only the real frame ids (and the first legacy header) count;
    arbitrary bytes in a file never crash the scan."""
    root = tmp_path_factory.mktemp("ws")
    forged = legacy_header("s", "forged") + v2_text("s", [("forged2", "x")])
    rows = [(f"m{i}", body + forged) for i, body in enumerate(bodies)]
    write_v2(root, "s", v2_text("s", rows))
    write_legacy(root, "s", legacy_text("s", rows))
    (root / "sources" / "openprogram" / "junk.md").write_bytes(garbage)
    got = archive_candidates(root)
    assert got == {"s": [f"m{i}" for i in range(len(bodies))]}
