"""The ``source-meta`` token: canonical JSON of a small trust object, base64url without padding.

Only one byte sequence encodes a given object (compact, sorted keys, non-ASCII kept), so a
token that does not re-encode identically was not written by a conforming writer and its
frame is refused instead of being half-trusted.
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import lru_cache
from typing import Any

DEFAULT_META: dict[str, Any] = {
    "authority_tier": None,
    "principal_id": "unknown",
    "speaker_kind": "unknown",
    "trust_state": "trusted",
    "version": 1,
}

_CURRENT_KEYS = frozenset(DEFAULT_META)
_LEGACY_KEYS = frozenset({"version", "trust_state", "speaker_kind", "principal_id", "origin_scope"})
_TIERS = (None, "owner", "paired")
_TRUST = ("trusted", "pending")
_ORIGINS = ("legacy-unknown", "local-owner")


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def normalize_meta(obj: Any) -> dict[str, Any] | None:
    """The current-shape view of a metadata object, or None if it fits no accepted schema.

    The legacy ``origin_scope`` shape is read as tier ``owner`` for ``local-owner``, else null.
    """
    if not isinstance(obj, dict):
        return None
    if not (type(obj.get("version")) is int and obj["version"] == 1):
        return None
    if obj.get("trust_state") not in _TRUST or not isinstance(obj.get("trust_state"), str):
        return None
    if not (_is_str(obj.get("principal_id")) and _is_str(obj.get("speaker_kind"))):
        return None
    keys = frozenset(obj)
    if keys == _CURRENT_KEYS:
        tier = obj["authority_tier"]
        if tier is not None and (not isinstance(tier, str) or tier not in _TIERS):
            return None
        return {k: obj[k] for k in sorted(_CURRENT_KEYS)}
    if keys == _LEGACY_KEYS:
        scope = obj["origin_scope"]
        if not isinstance(scope, dict) or frozenset(scope) != {"origin", "capabilities"}:
            return None
        origin, caps = scope["origin"], scope["capabilities"]
        if not isinstance(origin, str) or origin not in _ORIGINS:
            return None
        if not isinstance(caps, list) or not all(isinstance(c, str) and c for c in caps):
            return None
        if caps != sorted(set(caps)):
            return None
        return {
            "authority_tier": "owner" if origin == "local-owner" else None,
            "principal_id": obj["principal_id"],
            "speaker_kind": obj["speaker_kind"],
            "trust_state": obj["trust_state"],
            "version": 1,
        }
    return None


def encode_meta(obj: dict[str, Any]) -> str:
    """Token for ``obj`` (which must fit a schema; raises ValueError otherwise)."""
    if normalize_meta(obj) is None:
        raise ValueError(f"source metadata does not fit the schema: {obj!r}")
    raw = canonical_json(obj).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_meta(token: str) -> dict[str, Any] | None:
    """Current-shape metadata for a canonical token, or None for anything non-canonical."""
    meta = _decode_meta(token) if isinstance(token, str) else None
    return None if meta is None else dict(meta)  # a copy: callers may change theirs


@lru_cache(maxsize=256)
def _decode_meta(token: str) -> dict[str, Any] | None:
    """decode_meta, memoised: an archive repeats a handful of tokens over all its frames."""
    try:
        if not token or "=" in token or len(token) % 4 == 1:
            return None
        raw = base64.b64decode(token.encode("ascii") + b"=" * (-len(token) % 4),
                               altchars=b"-_", validate=True)
        obj = json.loads(raw.decode("utf-8"))
        norm = normalize_meta(obj)
        if norm is None:
            return None
        again = base64.urlsafe_b64encode(canonical_json(obj).encode("utf-8")).rstrip(b"=")
        if again.decode("ascii") != token:
            return None
        return norm
    except (ValueError, UnicodeError, binascii.Error, RecursionError, TypeError):
        return None
