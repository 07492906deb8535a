"""Source ids, archive paths, anchors and speaker labels (memory reference §2.1–§2.2).

An id is ``provider/thread/message``; the archive file of an id is a pure function of it
(``sources/<pct(provider)>/_v2/<pct(thread)>.md``) and so is its anchor, which is what lets a
reader verify that a frame sits where its id says it must.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache
from urllib.parse import quote, unquote_to_bytes

from ...errors import InvalidInput, ReasonCode

V2_DIR = "_v2"
SOURCES_DIR = "sources"
_UNSAFE_CHARS = frozenset("[]<>\r\n")
_MAX_NAME_BYTES = 255
_LABEL_CAP = 64


class SourceIdError(InvalidInput):
    """A source id (or a part of one) that is malformed or unsafe to archive."""

    code = ReasonCode.INVALID_SOURCE_ID


def make_source_id(provider: str, thread: str, message: str) -> str:
    """Join the three parts, refusing anything that would not split back into the same parts."""
    for what, part in (("provider", provider), ("thread", thread), ("message", message)):
        if not isinstance(part, str) or part == "":
            raise SourceIdError(f"invalid source id: {what} must be a non-empty string, got {part!r}")
    for what, part in (("provider", provider), ("thread", thread)):
        if "/" in part:
            raise SourceIdError(f"invalid source id: {what} {part!r} must not contain '/'")
    if provider in (".", ".."):
        raise SourceIdError(f"invalid source id: provider {provider!r} must not be '.' or '..'")
    return f"{provider}/{thread}/{message}"


def split_source_id(sid: str) -> tuple[str, str, str]:
    """Split on the first two ``/`` (the message may itself contain ``/``)."""
    if not isinstance(sid, str):
        raise SourceIdError(f"invalid source id {sid!r}: expected a string")
    parts = sid.split("/", 2)
    if len(parts) != 3 or not all(parts):
        raise SourceIdError(f"invalid source id {sid!r}: expected provider/thread/message")
    if parts[0] in (".", ".."):
        raise SourceIdError(f"invalid source id {sid!r}: provider must not be '.' or '..'")
    return parts[0], parts[1], parts[2]


@lru_cache(maxsize=8)  # a file's provider and thread repeat over its frames; bounded, as
# a write --all meets a new thread in every session
def pct_encode(s: str) -> str:
    """UTF-8 percent-encoding keeping only ASCII letters, digits and ``- _ . ~`` literal.

    Raises SourceIdError for text that is not valid Unicode (lone surrogates).
    """
    try:
        return quote(s, safe="", encoding="utf-8", errors="strict")
    except UnicodeEncodeError:
        raise SourceIdError(f"invalid text {s!r}: not valid Unicode") from None


def pct_decode(s: str) -> str:
    """Inverse of :func:`pct_encode` (strict UTF-8); used for file stems and speaker ids."""
    return unquote_to_bytes(s).decode("utf-8")


def speaker_pct(raw_id: str) -> str:
    """The canonical speaker-id token: no safe characters beyond alnum/_.~ and ``-`` as %2D."""
    return pct_encode(raw_id).replace("-", "%2D")


def speaker_pct_is_canonical(token: str) -> bool:
    """decode → valid UTF-8 → re-encode must give back ``token`` byte for byte."""
    try:
        decoded = unquote_to_bytes(token).decode("utf-8")
        return speaker_pct(decoded) == token
    except (UnicodeError, SourceIdError, ValueError):
        return False


def source_anchor(source_id: str) -> str:
    """``source-`` + first 16 hex of SHA-256 of the UTF-8 id."""
    data = source_id.encode("utf-8", errors="surrogatepass")
    return "source-" + hashlib.sha256(data).hexdigest()[:16]


def is_v2_safe_id(source_id: object) -> bool:
    """A valid id whose characters are all printable and none of ``[ ] < > CR LF``."""
    if not isinstance(source_id, str):
        return False
    try:
        split_source_id(source_id)
    except SourceIdError:
        return False
    return source_id.isprintable() and _UNSAFE_CHARS.isdisjoint(source_id)


def v2_path(source_id: str) -> str:
    """Workspace-relative v2 archive path of an id (``sources/<p>/_v2/<t>.md``)."""
    provider, thread, _ = split_source_id(source_id)
    return f"{SOURCES_DIR}/{pct_encode(provider)}/{V2_DIR}/{pct_encode(thread)}.md"


def legacy_path(source_id: str) -> str:
    """Workspace-relative legacy archive path of an id (``sources/<p>/<t>.md``)."""
    provider, thread, _ = split_source_id(source_id)
    return f"{SOURCES_DIR}/{pct_encode(provider)}/{pct_encode(thread)}.md"


def check_v2_id(source_id: str) -> str:
    """Raise SourceIdError unless ``source_id`` is v2-safe and its file names fit on disk."""
    if not is_v2_safe_id(source_id):
        raise SourceIdError(f"unsafe source id {source_id!r}: must be provider/thread/message, "
                            "printable, without [ ] < > CR LF")
    provider, thread, _ = split_source_id(source_id)
    for name in (pct_encode(provider), pct_encode(thread) + ".md"):
        if len(name.encode("ascii")) > _MAX_NAME_BYTES:
            raise SourceIdError(f"source id {source_id!r} is too long for an archive file name")
    return source_id


def fold_name(name: str) -> str:
    """Key under which two names collide on a case-insensitive / normalising filesystem."""
    return unicodedata.normalize("NFC", name).casefold()


def normalize_speaker(text: str | None) -> str:
    """Speaker text fit for a record line: one line, no brackets or colons, at most 64 chars.

    Non-printable characters other than whitespace are dropped, then whitespace runs (LF,
    tab, U+2028 ...) collapse to one space and the ends are trimmed; ``[``/``]`` become
    ``(``/``)`` and ``:`` becomes U+FF1A so the label can never end the label part early.
    """
    if not text:
        return ""
    kept = "".join(ch for ch in text if ch.isprintable() or ch.isspace())
    s = " ".join(kept.split())
    s = s.replace("[", "(").replace("]", ")").replace(":", "\uff1a")
    if len(s) > _LABEL_CAP:
        s = s[:_LABEL_CAP] + "\u2026"
    return s


def speaker_label(role: str, speaker_id: str = "", speaker_display: str = "") -> str:
    """``display (id)`` when both differ, else display, else id, else the (normalized) role."""
    sid = normalize_speaker(speaker_id)
    disp = normalize_speaker(speaker_display)
    if sid and disp and sid != disp:
        return f"{disp} ({sid})"
    return disp or sid or normalize_speaker(role)


def display_from_label(label: str, speaker_id: str) -> str:
    """Reading back: the display is the label minus a trailing `` (<normalized id>)``."""
    sid = normalize_speaker(speaker_id)
    suffix = f" ({sid})"
    if sid and label.endswith(suffix) and len(label) > len(suffix):
        return label[: -len(suffix)]
    return label


_TIMESTAMP_BAD = frozenset("[]\r\n")


def timestamp_ok(ts: str) -> bool:
    """A record timestamp must be printable with no ``[ ] CR LF``."""
    return isinstance(ts, str) and ts.isprintable() and not any(c in _TIMESTAMP_BAD for c in ts)


def clean_timestamp(ts: str | None) -> str:
    """Drop what a record timestamp may not hold (callers that prefer cleaning to refusal)."""
    if not ts:
        return ""
    return "".join(c for c in str(ts) if c.isprintable() and c not in _TIMESTAMP_BAD)


_ANCHOR_RE = re.compile(r"source-[0-9a-f]{16}")


def is_anchor(s: str) -> bool:
    return _ANCHOR_RE.fullmatch(s) is not None
