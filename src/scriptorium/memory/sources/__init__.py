"""The evidence archive: source ids, the strict v2 frame format, the legacy reader, and the
append-only archive on disk (memory reference §2.1–§2.3, DESIGN §3)."""

from .archive import SourceArchive, SourceArchiveError, SourcePathCollision
from .ids import (SourceIdError, clean_timestamp, is_v2_safe_id, legacy_path, make_source_id,
                  normalize_speaker, pct_decode, pct_encode, source_anchor, speaker_label,
                  speaker_pct, split_source_id, timestamp_ok, v2_path)
from .legacy import first_legacy_header, read_legacy
from .meta import DEFAULT_META, decode_meta, encode_meta
from .model import Frame, SourceRecord
from .v2 import (MARKER, InvalidSourceRecord, V2Parse, parse_v2, read_text, record_from_frame,
                 render_v2_file, render_v2_frames)

__all__ = [
    "DEFAULT_META", "MARKER", "Frame", "InvalidSourceRecord", "SourceArchive",
    "SourceArchiveError", "SourceIdError", "SourcePathCollision", "SourceRecord", "V2Parse",
    "clean_timestamp", "decode_meta", "encode_meta", "first_legacy_header", "is_v2_safe_id",
    "legacy_path", "make_source_id", "normalize_speaker", "parse_v2", "pct_decode",
    "pct_encode", "read_legacy", "read_text", "record_from_frame", "render_v2_file",
    "render_v2_frames", "source_anchor", "speaker_label", "speaker_pct", "split_source_id",
    "timestamp_ok", "v2_path",
]
