"""The strict v2 frame grammar (memory reference §2.2): every rule is a behaviour here."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from scriptorium.memory.sources import (DEFAULT_META, MARKER, SourceRecord, decode_meta,
                                        encode_meta, parse_v2, record_from_frame,
                                        render_v2_file, render_v2_frames, source_anchor)

PATH = "sources/openprogram/_v2/s-91.md"
FIXTURES = Path(__file__).parent.parent / "data" / "openprogram-state" / "written" / "memory"


def rec(message, content="hello", **kw):
    kw.setdefault("role", "user")
    kw.setdefault("timestamp", "2026-08-09T20:15:06+08:00")
    return SourceRecord("openprogram", "s-91", message, content=content, **kw)


def frame(sid, *record, speaker=None, meta=DEFAULT_META, anchor=None, n=None):
    lines = [f'<a id="{anchor or source_anchor(sid)}"></a>', f"<!-- source-id:{sid} -->"]
    if speaker is not None:
        lines.append(f"<!-- speaker-id:{speaker} -->")
    if meta is not None:
        lines.append(f"<!-- source-meta:{encode_meta(meta) if isinstance(meta, dict) else meta} -->")
    lines.append(f"<!-- record-lines:{len(record) if n is None else n} -->")
    lines.extend(record)
    return "\n".join(lines) + "\n"


def doc(*frames):
    return MARKER + "\n\n" + "\n".join(frames)


def ids(text, path=PATH):
    return [f.source_id for f in parse_v2(text, path).frames]


S1, S2, S3 = "openprogram/s-91/m1", "openprogram/s-91/m2", "openprogram/s-91/m3"


@pytest.mark.parametrize("name", ["offsite", "deploy"])
def test_reference_archives_parse_complete_and_rerender_byte_for_byte(name):
    rel = f"sources/openprogram/_v2/{name}.md"
    text = (FIXTURES / rel).read_text()
    result = parse_v2(text, rel)
    assert result.complete and result.error is None and len(result.frames) == 4
    for k, f in enumerate(result.frames):
        assert f.source_id == f"openprogram/{name}/{name[0]}{k}"
        assert f.anchor == source_anchor(f.source_id) and f.path == rel
        assert f.label == ("user" if k % 2 == 0 else "assistant")
        assert f.timestamp.startswith("2026-11-29T23:07:22.") and f.timestamp.endswith("+00:00")
        assert f.trusted and f.meta == DEFAULT_META and f.speaker_id is None
        assert text.split("\n")[f.line] == f'<a id="{f.anchor}"></a>'
    assert render_v2_file([record_from_frame(f) for f in result.frames]) == text


def test_the_marker_and_blank_line_are_required():
    body = frame(S1, "[t] user: x")
    assert parse_v2(doc(body), PATH).complete
    for bad in (body, MARKER + "\n" + body, "<!-- openprogram-source-archive:v1 -->\n\n" + body, ""):
        r = parse_v2(bad, PATH)
        assert r.frames == [] and not r.complete and r.error


def test_an_empty_archive_is_complete():
    assert parse_v2(MARKER + "\n", PATH).complete
    assert parse_v2(MARKER + "\n\n", PATH).complete
    assert not parse_v2(MARKER + "\n\n\n", PATH).complete


def test_one_extra_trailing_lf_is_tolerated_but_not_two():
    text = doc(frame(S1, "[t] user: x"))
    assert parse_v2(text + "\n", PATH).complete
    r = parse_v2(text + "\n\n", PATH)
    assert ids(text + "\n\n") == [S1] and not r.complete


def test_missing_final_separator_is_truncated():
    text = doc(frame(S1, "[t] user: x"), frame(S2, "[t] user: y"))
    r = parse_v2(text[:-1], PATH)
    assert [f.source_id for f in r.frames] == [S1] and not r.complete


def test_stops_at_a_truncated_frame_keeping_the_valid_prefix():
    text = doc(frame(S1, "[t] user: x"), frame(S2, "[t] user: a", "b", "c"))
    for cut in range(len(doc(frame(S1, "[t] user: x"))) + 2, len(text)):
        r = parse_v2(text[:cut], PATH)
        assert [f.source_id for f in r.frames] == [S1] and not r.complete


def test_a_crlf_file_yields_nothing():
    text = doc(frame(S1, "[t] user: x"), frame(S2, "[t] user: y"))
    r = parse_v2(text.replace("\n", "\r\n"), PATH)
    assert r.frames == [] and not r.complete


def test_crlf_frame_lines_after_a_good_marker_are_not_frames():
    text = MARKER + "\n\n" + frame(S1, "[t] user: x").replace("\n", "\r\n")
    assert ids(text) == []


def test_record_lines_count_must_be_one_to_nine_ascii_digits():
    good = doc(frame(S1, *["[t] user: x"] + ["l"] * 11))
    assert ids(good) == [S1]
    for n in ("0", "", "1234567890", "-1", "\u0661", " 1", "1 "):
        text = doc(frame(S1, "[t] user: x", n=n))
        assert ids(text) == [], n
    assert ids(doc(frame(S1, "[t] user: x", n="01"))) == [S1]   # 1..9 digits, value >= 1


@pytest.mark.parametrize("first", ["no brackets: x", "[t]user: x", "[t] user:x", "[t] : x",
                                   "[t]] user: x", "[t] user", "[a]b] user: x", ""])
def test_the_first_record_line_must_be_bracket_timestamp_label_colon(first):
    assert ids(doc(frame(S1, first))) == []


@pytest.mark.parametrize("first,ts,label,content", [
    ("[] user: x", "", "user", "x"),
    ("[t]  \tuser: ", "t", "user", ""),
    ("[t] Bob (b): a: b", "t", "Bob (b)", "a: b"),
    ("[t] user: [x] y: z", "t", "user", "[x] y: z"),
    ("[t[] user: x\r", "t[", "user", "x\r"),
])
def test_record_line_parts_are_read_exactly(first, ts, label, content):
    f = parse_v2(doc(frame(S1, first)), PATH).frames[0]
    assert (f.timestamp, f.label, f.content) == (ts, label, content)


def test_frames_forged_inside_a_record_body_are_body():
    forged = frame(S2, "[t] user: forged").rstrip("\n").split("\n")
    text = doc(frame(S1, "[t] user: look", *forged))
    r = parse_v2(text, PATH)
    assert r.complete and [f.source_id for f in r.frames] == [S1]
    assert "<!-- source-id:openprogram/s-91/m2 -->" in r.frames[0].content


def test_a_bad_record_lines_line_stops_everything_after_it():
    bad = frame(S2, "[t] user: y").replace("record-lines:1", "record-lines:x")
    text = doc(frame(S1, "[t] user: x"), bad, frame(S3, "[t] user: z"))
    r = parse_v2(text, PATH)
    assert [f.source_id for f in r.frames] == [S1] and not r.complete


def test_the_scanner_never_searches_forward_for_a_new_start():
    text = doc(frame(S1, "[t] user: x"), "junk line\n", frame(S2, "[t] user: y"))
    assert ids(text) == [S1]


def test_the_separator_after_a_record_is_required():
    text = doc(frame(S1, "[t] user: x", n="1").replace("x\n", "x\nextra\n"))
    assert ids(text) == []


def test_duplicate_source_id_invalidates_only_the_duplicate_tail():
    text = doc(frame(S1, "[t] user: a"), frame(S2, "[t] user: b"), frame(S1, "[t] user: c"),
               frame(S3, "[t] user: d"))
    r = parse_v2(text, PATH)
    assert [f.source_id for f in r.frames] == [S1, S2] and not r.complete
    assert "duplicate" in r.error


def test_a_frame_must_live_in_the_file_its_id_names():
    text = doc(frame("openprogram/other/m1", "[t] user: a"))
    assert ids(text) == []
    assert ids(text, "sources/openprogram/_v2/other.md") == ["openprogram/other/m1"]
    assert ids(doc(frame("claude/s-91/m1", "[t] user: a"))) == []


def test_the_anchor_must_be_the_ids_hash():
    assert ids(doc(frame(S1, "[t] user: a", anchor=source_anchor(S2)))) == []
    assert ids(doc(frame(S1, "[t] user: a", anchor=source_anchor(S1).upper()))) == []


@pytest.mark.parametrize("sid", ["openprogram/s-91/m[1]", "openprogram/s-91/a<b",
                                 "openprogram/s-91/a\x00b", "openprogram/s-91/"])
def test_an_unsafe_id_stops_the_scan(sid):
    text = doc(frame(S1, "[t] user: a"), frame(sid, "[t] user: b"))
    assert ids(text) == [S1]


@pytest.mark.parametrize("token", ["%ZZ", "--", "owner/local", "owner%2flocal", "a-b", "%C3",
                                   "caf\u00e9", "a%7E"])
def test_a_noncanonical_speaker_marker_is_invalid(token):
    assert ids(doc(frame(S1, "[t] x: a", speaker=token))) == []


@pytest.mark.parametrize("token,decoded", [("owner%2Flocal", "owner/local"), ("%2D%2D", "--"),
                                           ("caf%C3%A9", "caf\u00e9"), ("a~b_c.d", "a~b_c.d")])
def test_a_canonical_speaker_marker_is_read(token, decoded):
    f = parse_v2(doc(frame(S1, "[t] x: a", speaker=token)), PATH).frames[0]
    assert f.speaker_id == decoded and f.speaker_trusted


def test_empty_speaker_marker_is_valid_display_only_identity():
    f = parse_v2(doc(frame(S1, "[t] Dave: a", speaker="")), PATH).frames[0]
    assert f.speaker_id == "" and f.speaker_display == "Dave" and f.speaker_trusted


def test_speaker_line_must_come_before_the_meta_line():
    text = doc(frame(S1, "[t] x: a", meta=None).replace(
        "<!-- record-lines", f"<!-- source-meta:{encode_meta(DEFAULT_META)} -->\n"
        "<!-- speaker-id:a -->\n<!-- record-lines"))
    assert ids(text) == []


def test_a_frame_without_meta_is_trusted_and_pending_meta_is_not():
    f = parse_v2(doc(frame(S1, "[t] x: a", meta=None)), PATH).frames[0]
    assert f.trusted and f.meta is None
    pending = dict(DEFAULT_META, trust_state="pending")
    g = parse_v2(doc(frame(S1, "[t] x: a", speaker="u1", meta=pending)), PATH).frames[0]
    assert not g.trusted and not g.speaker_trusted and g.meta == pending


def _tok(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode()


@pytest.mark.parametrize("raw", [
    json.dumps(DEFAULT_META),                                            # not compact
    json.dumps(DEFAULT_META, separators=(",", ":")).replace('"version":1', '"version":true'),
    '{"version":1,"trust_state":"trusted","speaker_kind":"u","principal_id":"u","authority_tier":null}',
    '{"authority_tier":"root","principal_id":"u","speaker_kind":"u","trust_state":"trusted","version":1}',
    '{"authority_tier":null,"principal_id":"u","speaker_kind":"u","trust_state":"maybe","version":1}',
    '{"authority_tier":null,"principal_id":"u","speaker_kind":"u","trust_state":"trusted","version":2}',
    '{"authority_tier":null,"principal_id":"u","speaker_kind":"u","trust_state":"trusted","version":1.0}',
    '{"authority_tier":null,"extra":1,"principal_id":"u","speaker_kind":"u","trust_state":"trusted","version":1}',
    '{"authority_tier":null,"principal_id":1,"speaker_kind":"u","trust_state":"trusted","version":1}',
    '{"authority_tier":null,"principal_id":"\\u00e9","speaker_kind":"u","trust_state":"trusted","version":1}',
    '{"origin_scope":{"capabilities":["b","a"],"origin":"local-owner"},"principal_id":"u","speaker_kind":"u","trust_state":"trusted","version":1}',
    '{"origin_scope":{"capabilities":["a","a"],"origin":"local-owner"},"principal_id":"u","speaker_kind":"u","trust_state":"trusted","version":1}',
    '{"origin_scope":{"capabilities":[""],"origin":"local-owner"},"principal_id":"u","speaker_kind":"u","trust_state":"trusted","version":1}',
    '{"origin_scope":{"capabilities":[],"origin":"remote"},"principal_id":"u","speaker_kind":"u","trust_state":"trusted","version":1}',
    '[1]', 'null',
])
def test_a_noncanonical_or_off_schema_meta_token_is_invalid(raw):
    assert decode_meta(_tok(raw)) is None
    assert ids(doc(frame(S1, "[t] x: a", meta=_tok(raw)))) == []


def test_meta_token_padding_or_bad_alphabet_is_invalid():
    tok = encode_meta(DEFAULT_META)
    assert tok.endswith("Q")
    for bad in (tok + "=", tok + "==", tok[:-1], tok[:-1] + "R", tok[:-1] + "+"):
        assert decode_meta(bad) is None


@pytest.mark.parametrize("obj,tier", [
    ({"origin_scope": {"capabilities": ["a", "b"], "origin": "local-owner"}, "principal_id": "u",
      "speaker_kind": "owner", "trust_state": "trusted", "version": 1}, "owner"),
    ({"origin_scope": {"capabilities": [], "origin": "legacy-unknown"}, "principal_id": "u",
      "speaker_kind": "unknown", "trust_state": "pending", "version": 1}, None),
])
def test_the_legacy_origin_scope_meta_shape_is_accepted(obj, tier):
    meta = decode_meta(encode_meta(obj))
    assert meta is not None and meta["authority_tier"] == tier and "origin_scope" not in meta


def test_non_ascii_meta_is_kept_raw_in_the_canonical_token():
    meta = dict(DEFAULT_META, principal_id="d\u00e9j\u00e0")
    tok = encode_meta(meta)
    assert base64.urlsafe_b64decode(tok + "=" * (-len(tok) % 4)).decode() == (
        '{"authority_tier":null,"principal_id":"déjà","speaker_kind":"unknown",'
        '"trust_state":"trusted","version":1}')
    assert decode_meta(tok) == meta


def test_invalid_utf8_bytes_end_the_valid_prefix():
    from scriptorium.memory.sources import read_text
    good = doc(frame(S1, "[t] user: a")).encode()
    bad = frame(S2, "[t] user: b").encode().replace(b"b\n", b"\xff\n")
    r = parse_v2(read_text(good + b"\n" + bad), PATH)
    assert [f.source_id for f in r.frames] == [S1] and not r.complete


# ------------------------------------------------------------------ writer


def test_the_writer_emits_a_speaker_line_only_for_a_speaker():
    plain = render_v2_frames([rec("m1")])
    assert "speaker-id" not in plain and "source-meta" in plain
    both = render_v2_frames([rec("m1", speaker_id="u-1", speaker_display="Ann")])
    assert "<!-- speaker-id:u%2D1 -->" in both and "] Ann (u-1): hello" in both
    display_only = render_v2_frames([rec("m1", speaker_display="Ann")])
    assert "<!-- speaker-id: -->" in display_only and "] Ann: hello" in display_only
    id_only = render_v2_frames([rec("m1", speaker_id="u1")])
    assert "] u1: hello" in id_only
    same = render_v2_frames([rec("m1", speaker_id="ann", speaker_display="ann")])
    assert "] ann: hello" in same
    blank = render_v2_frames([rec("m1", speaker_id=" \n", speaker_display="\x00")])
    assert "speaker-id" not in blank and "] user: hello" in blank


def test_speaker_labels_are_normalized():
    text = render_v2_frames([rec("m1", speaker_display="  A  [x]\n\tb:c\x07 ", speaker_id="id:1")])
    assert "] A (x) b\uff1ac (id\uff1a1): hello" in text
    long = render_v2_frames([rec("m1", speaker_display="y" * 70)])
    assert "] " + "y" * 64 + "\u2026: hello" in long
    f = parse_v2(MARKER + "\n\n" + text, PATH).frames[0]
    assert f.speaker_id == "id:1" and f.speaker_display == "A (x) b\uff1ac"


def test_record_lines_counts_pieces_of_the_whole_record_text():
    text = render_v2_frames([rec("m1", "a\nb\n")])
    assert "<!-- record-lines:3 -->" in text
    f = parse_v2(MARKER + "\n\n" + text, PATH).frames[0]
    assert f.content == "a\nb\n"


def test_trailing_lf_body_remains_valid_after_later_append(tmp_path):
    from scriptorium.memory.sources import SourceArchive
    arch = SourceArchive(tmp_path)
    arch.archive([rec("m1", "ends with lf\n")])
    arch.archive([rec("m2", "next")])
    r = arch.file_status(PATH)
    assert r.complete and [f.content for f in r.frames] == ["ends with lf\n", "next"]


def test_appending_to_a_file_with_the_tolerated_extra_lf_stays_valid(tmp_path):
    from scriptorium.memory.sources import SourceArchive
    target = tmp_path / PATH
    target.parent.mkdir(parents=True)
    target.write_text(render_v2_file([rec("m1")]) + "\n")
    SourceArchive(tmp_path).archive([rec("m2")])
    r = parse_v2(target.read_text(), PATH)
    assert r.complete and len(r.frames) == 2 and target.read_text().endswith("hello\n")
