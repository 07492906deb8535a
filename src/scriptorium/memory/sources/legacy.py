"""Readers for the frozen legacy archive (memory reference §2.3, §4.1).

Legacy files have no framing: a record's body may hold text that looks exactly like a header.
Retrieval therefore accepts only headers whose anchor and file both match their id, and
migration goes further and trusts nothing but the single header at the top of the file.
"""

from __future__ import annotations

import re

from .ids import SourceIdError, legacy_path, source_anchor, split_source_id
from .model import Frame
from .v2 import _ANCHOR_LINE, _ID_LINE, _LINES_LINE, _SPEAKER_LINE, _has_surrogate, parse_record

_HINT = re.compile(r"\[([^\[\]]+ \([^()\[\]]+\))\]")


def _header_id(anchor_line: str, id_line: str, path: str) -> str | None:
    am = _ANCHOR_LINE.fullmatch(anchor_line)
    im = _ID_LINE.fullmatch(id_line) if am else None
    if am is None or im is None:
        return None
    sid = im.group(1)
    try:
        split_source_id(sid)
        if legacy_path(sid) != path:
            return None
    except SourceIdError:
        return None
    return sid if am.group(1) == source_anchor(sid) else None


def read_legacy(text: str, path: str) -> list[Frame]:
    """Every legacy record of ``text`` (workspace-relative ``path``); all trusted. Never raises."""
    try:
        return _read_legacy(text, path)
    except Exception:  # defensive: a reader must answer for any input
        return []


def _read_legacy(text: str, path: str) -> list[Frame]:
    if not isinstance(text, str):
        return []
    lines = text.split("\n")
    n = len(lines)
    frames: list[Frame] = []
    i = 0
    while i + 2 < n:
        sid = _header_id(lines[i], lines[i + 1], path)
        if sid is None:
            i += 1
            continue
        c = i + 2
        if _SPEAKER_LINE.fullmatch(lines[c]) is not None:
            c += 1
        count, framed = 1, False
        if c < n:
            lm = _LINES_LINE.fullmatch(lines[c])
            if lm is not None:
                count, framed = int(lm.group(1)), True
                c += 1
        record = lines[c : c + count]
        if count < 1 or len(record) < count or _has_surrogate(lines[i : c + count]):
            i += 1
            continue
        parsed = parse_record(record)
        if parsed is None:
            i += 1
            continue
        ts, label, content = parsed
        hint = None
        if not framed and label == "user":
            hm = _HINT.match(content)
            hint = hm.group(1) if hm else None
        frames.append(Frame(
            source_id=sid, anchor=source_anchor(sid), path=path, line=i, timestamp=ts,
            label=label, content=content, speaker_id=None, meta=None, trusted=True,
            version="legacy", speaker_hint=hint, end_line=c + count,
        ))
        i = c + count
    return frames


def first_legacy_header(text: str, session_id: str) -> str | None:
    """Migration: the node id of the one header right after ``# <session>\\n\\n``, else None.

    The header must read ``<a id="source-<16 hex>"></a>\\n<!-- source-id:openprogram/<session>/
    <node> -->\\n`` with the session equal to the title's and the anchor equal to the id's hash.
    Later headers never count: they may be user text copied into a body. Never raises.
    """
    try:
        if not isinstance(text, str) or not isinstance(session_id, str) or not session_id:
            return None
        prefix = f"# {session_id}\n\n"
        if not text.startswith(prefix):
            return None
        rest = text[len(prefix):].split("\n", 2)
        if len(rest) < 3:
            return None
        am = _ANCHOR_LINE.fullmatch(rest[0])
        im = _ID_LINE.fullmatch(rest[1])
        if am is None or im is None or _has_surrogate(rest[:2]):
            return None
        provider, thread, node = split_source_id(im.group(1))
        if provider != "openprogram" or thread != session_id:
            return None
        if am.group(1) != source_anchor(im.group(1)):
            return None
        return node
    except Exception:
        return None
