"""The strict v2 frame format (memory reference §2.2): parser and renderer.

The parser reads ``text.split("\\n")`` with no newline translation and returns the valid
prefix of frames; the first thing that is not a valid frame stops the scan for good (it never
searches forward), so text copied into a record body can never become a frame.

Input that is not valid UTF-8: :func:`read_text` decodes with ``surrogateescape``, keeping every
line exact; a frame any of whose lines holds such a byte (a lone surrogate in the text) is
invalid and stops the scan, so frames before the bad bytes stay valid and nothing after counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from ...errors import ReasonCode
from .ids import (SourceIdError, check_v2_id, display_from_label, is_v2_safe_id,
                  source_anchor, speaker_label, speaker_pct, speaker_pct_is_canonical,
                  pct_decode, split_source_id, timestamp_ok, v2_path)
from .meta import DEFAULT_META, decode_meta, encode_meta
from .model import Frame, SourceRecord

MARKER = "<!-- openprogram-source-archive:v2 -->"

_ANCHOR_LINE = re.compile(r'<a id="([^"]*)"></a>')
_ID_LINE = re.compile(r"<!-- source-id:(.*) -->")
_SPEAKER_LINE = re.compile(r"<!-- speaker-id:(.*) -->")
_META_LINE = re.compile(r"<!-- source-meta:([A-Za-z0-9_-]*) -->")
_LINES_LINE = re.compile(r"<!-- record-lines:([0-9]{1,9}) -->")
_RECORD_FIRST = re.compile(r"\[([^\]]*)\]\s+(.+?): (.*)")


class InvalidSourceRecord(SourceIdError):
    """A record whose fields cannot be archived (timestamp, role, text, metadata)."""

    code = ReasonCode.INVALID_SOURCE_RECORD


@dataclass
class V2Parse:
    """Valid frames of a v2 file, whether the whole file is valid, and why not."""

    frames: list[Frame]
    complete: bool
    error: str | None
    # True when the file ends with the one tolerated extra LF (an appender must not add a
    # separator then, or the result would hold an empty line where a frame must start).
    trailing_blank: bool = field(default=False, repr=False)


def read_text(data: bytes) -> str:
    """Decode archive bytes without losing or translating any of them (see module doc)."""
    return data.decode("utf-8", errors="surrogateescape")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_surrogate(lines: Iterable[str]) -> bool:
    return any(not line.isascii() and _SURROGATE.search(line) for line in lines)


def parse_record(lines: list[str]) -> tuple[str, str, str] | None:
    """(timestamp, label, content) of a record's lines, or None if the first line is bad."""
    m = _RECORD_FIRST.fullmatch(lines[0])
    if m is None:
        return None
    content = "\n".join([m.group(3), *lines[1:]])
    return m.group(1), m.group(2), content


def parse_v2(text: str, path: str) -> V2Parse:
    """Strictly parse a v2 archive whose workspace-relative path is ``path``. Never raises."""
    try:
        return _parse_v2(text, path)
    except Exception as exc:  # defensive: a parser must answer for any input
        return V2Parse([], False, f"unreadable archive: {type(exc).__name__}")


def _parse_v2(text: str, path: str) -> V2Parse:
    if not isinstance(text, str):
        return V2Parse([], False, "not text")
    lines = text.split("\n")
    if len(lines) < 2 or lines[0] != MARKER or lines[1] != "":
        return V2Parse([], False, "line 1: missing v2 marker line and blank line")
    frames: list[Frame] = []
    seen: set[str] = set()
    plain = text.isascii()  # then no frame can hold a lone surrogate
    n = len(lines)
    i = 2

    def stop(msg: str) -> V2Parse:
        return V2Parse(frames, False, f"line {i + 1}: {msg}")

    while i < n:
        if i == n - 1 and lines[i] == "":
            return V2Parse(frames, True, None, trailing_blank=True)
        if i + 2 >= n:
            return stop("truncated frame")
        am = _ANCHOR_LINE.fullmatch(lines[i])
        if am is None:
            return stop("expected an anchor line")
        im = _ID_LINE.fullmatch(lines[i + 1])
        if im is None:
            return stop("expected a source-id line")
        c = i + 2
        speaker_tok: str | None = None
        meta_tok: str | None = None
        sm = _SPEAKER_LINE.fullmatch(lines[c])
        if sm is not None:
            speaker_tok = sm.group(1)
            c += 1
        if c < n:
            mm = _META_LINE.fullmatch(lines[c])
            if mm is not None:
                meta_tok = mm.group(1)
                c += 1
        if c >= n:
            return stop("truncated frame")
        lm = _LINES_LINE.fullmatch(lines[c])
        if lm is None:
            return stop("expected a record-lines line")
        count = int(lm.group(1))
        if count < 1:
            return stop("record-lines must be at least 1")
        if c + 1 + count >= n:
            return stop("truncated frame (record or separator missing)")
        record = lines[c + 1 : c + 1 + count]
        if lines[c + 1 + count] != "":
            return stop("missing blank line after the record")
        parsed = parse_record(record)
        if parsed is None:
            return stop("first record line is not '[timestamp] label: text'")
        if not plain and _has_surrogate(lines[i : c + 1 + count]):
            return stop("frame is not valid UTF-8")
        sid, anchor = im.group(1), am.group(1)
        if not is_v2_safe_id(sid):
            return stop(f"unsafe source id {sid!r}")
        if v2_path(sid) != path:
            return stop(f"source id {sid!r} does not belong in {path}")
        if anchor != source_anchor(sid):
            return stop(f"anchor {anchor!r} does not match source id {sid!r}")
        if sid in seen:
            return stop(f"duplicate source id {sid!r}")
        speaker_id: str | None = None
        if speaker_tok is not None:
            if not speaker_pct_is_canonical(speaker_tok):
                return stop(f"non-canonical speaker-id {speaker_tok!r}")
            speaker_id = pct_decode(speaker_tok)
        meta = None
        if meta_tok is not None:
            meta = decode_meta(meta_tok)
            if meta is None:
                return stop("non-canonical source-meta token")
        trusted = meta is None or meta["trust_state"] == "trusted"
        ts, label, content = parsed
        seen.add(sid)
        frames.append(Frame(
            source_id=sid, anchor=anchor, path=path, line=i, timestamp=ts, label=label,
            content=content, speaker_id=speaker_id, meta=meta, trusted=trusted, version="v2",
            speaker_display=None if speaker_id is None else display_from_label(label, speaker_id),
            speaker_trusted=speaker_id is not None and trusted,
            end_line=c + 2 + count,
        ))
        i = c + 2 + count
    return V2Parse(frames, True, None)


# --------------------------------------------------------------------------- rendering


def check_record(rec: SourceRecord) -> str:
    """Validate one record for the v2 writer; return its id. Raises InvalidSourceRecord."""
    sid = check_v2_id(make_id(rec))
    if not timestamp_ok(rec.timestamp):
        raise InvalidSourceRecord(f"record {sid!r}: timestamp {rec.timestamp!r} must be printable "
                                  "without [ ] CR LF")
    for what, value in (("role", rec.role), ("content", rec.content),
                        ("speaker id", rec.speaker_id), ("speaker display", rec.speaker_display)):
        if not isinstance(value, str):
            raise InvalidSourceRecord(f"record {sid!r}: {what} must be a string")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidSourceRecord(f"record {sid!r}: {what} is not valid Unicode") from None
    if not speaker_label(rec.role, rec.speaker_id, rec.speaker_display):
        raise InvalidSourceRecord(f"record {sid!r}: empty speaker label (role {rec.role!r})")
    if rec.meta is not None:
        try:
            encode_meta(rec.meta)
        except (ValueError, TypeError):
            raise InvalidSourceRecord(f"record {sid!r}: metadata does not fit the schema") from None
    return sid


def make_id(rec: SourceRecord) -> str:
    try:
        return rec.source_id
    except SourceIdError:
        raise
    except Exception:  # non-string parts
        raise SourceIdError(f"invalid source id parts {rec.provider!r}/{rec.thread!r}/"
                            f"{rec.message!r}") from None


def frame_lines(rec: SourceRecord) -> list[str]:
    """The lines of one frame, ending with the empty element that becomes the separator."""
    sid = check_record(rec)
    label = speaker_label(rec.role, rec.speaker_id, rec.speaker_display)
    out = [f'<a id="{source_anchor(sid)}"></a>', f"<!-- source-id:{sid} -->"]
    if speaker_label("", rec.speaker_id, rec.speaker_display):
        out.append(f"<!-- speaker-id:{speaker_pct(rec.speaker_id)} -->")
    out.append(f"<!-- source-meta:{encode_meta(rec.meta if rec.meta is not None else DEFAULT_META)} -->")
    pieces = f"[{rec.timestamp}] {label}: {rec.content}".split("\n")
    out.append(f"<!-- record-lines:{len(pieces)} -->")
    out.extend(pieces)
    out.append("")
    return out


def render_v2_frames(records: list[SourceRecord]) -> str:
    """Frames for ``records`` in the given order, joined by LF (ends with a single LF)."""
    return "\n".join("\n".join(frame_lines(r)) for r in records)


def render_v2_file(records: list[SourceRecord]) -> str:
    """A whole new archive file: marker, blank line, frames."""
    return MARKER + "\n\n" + render_v2_frames(records)


def append_separator(existing: str, parse: V2Parse) -> str:
    """What goes between a complete existing file and new frames (one blank line in the end).

    The reference rule is "LF if it ends with LF else LF LF"; a file that ends with the one
    tolerated extra LF already has its blank line, so nothing is added there.
    """
    if parse.trailing_blank:
        return ""
    return "\n" if existing.endswith("\n") else "\n\n"


def record_from_frame(frame: Frame, role: str | None = None) -> SourceRecord:
    """A record that renders back to ``frame`` (the role defaults to the label)."""
    provider, thread, message = split_source_id(frame.source_id)
    speaker_id = frame.speaker_id or ""
    display = (frame.speaker_display or "") if frame.speaker_id is not None else ""
    return SourceRecord(provider=provider, thread=thread, message=message,
                        role=role if role is not None else frame.label, content=frame.content,
                        timestamp=frame.timestamp, speaker_id=speaker_id,
                        speaker_display=display, meta=frame.meta)
