"""What a workspace's runtime dir keeps besides the lock: the counters of ``runtime.json``
(loaded tolerantly, so a broken file never stops writing) and the ``generation`` counter
every install moves (readers learn that memory changed without a stat per topic file).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

GENERATION_FILE = "generation"


@dataclass
class RuntimeState:
    """Counters kept in ``<runtime>/runtime.json``. ``cursors`` is the legacy per-session
    position cursor, readable only so migration can retire it (None once retired)."""

    creation_order: dict[str, int] = field(default_factory=dict)
    write_commits_since_global: int = 0
    local_batches: int = 0
    local_tokens: int = 0
    last_global_at: str | None = None
    cursors: dict[str, Any] | None = None

    @classmethod
    def from_obj(cls, obj: Any) -> "RuntimeState":
        """Tolerant: anything that is not an object gives defaults; bad fields are dropped."""
        state = cls()
        if not isinstance(obj, dict):
            return state
        order = obj.get("creation_order")
        if isinstance(order, dict):
            state.creation_order = {k: v for k, v in order.items()
                                    if isinstance(k, str) and _count(v) is not None}
        for name in ("write_commits_since_global", "local_batches", "local_tokens"):
            value = _count(obj.get(name))
            if value is not None:
                setattr(state, name, value)
        if isinstance(obj.get("last_global_at"), str):
            state.last_global_at = obj["last_global_at"]
        if isinstance(obj.get("cursors"), dict):
            state.cursors = obj["cursors"]
        return state

    def to_obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "creation_order": dict(self.creation_order),
            "write_commits_since_global": self.write_commits_since_global,
            "local_batches": self.local_batches,
            "local_tokens": self.local_tokens,
            "last_global_at": self.last_global_at,
        }
        if self.cursors is not None:
            out["cursors"] = self.cursors
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_obj(), ensure_ascii=False, indent=2) + "\n"


def parse_runtime(data: bytes | None) -> RuntimeState:
    """``runtime.json``'s bytes, tolerantly: missing, not UTF-8, not JSON ⇒ defaults."""
    try:
        obj = json.loads(data.decode("utf-8")) if data is not None else None
    except ValueError:
        obj = None
    return RuntimeState.from_obj(obj)


def with_created(data: bytes | None, created: Sequence[str]) -> bytes:
    """``runtime.json``'s bytes with ``created`` ranked after every block ranked so far (a
    block already ranked keeps its place), as ``parse_runtime(data)`` then ``dumps()`` gives.

    ``creation_order`` holds every block of the home, and an install only adds its own: a
    file in the form ``dumps`` writes (the reference's) is spliced as bytes, its last entry
    holding the highest rank, so no dict of the whole order is built per install. Any other
    file (one line, legacy cursors, ids needing escapes, ranks out of order, hand edits,
    broken) and any id that is not plain take the full parse."""
    fast = _splice(data, created) if data is not None else None
    return fast if fast is not None else with_created_parsed(data, created)


def with_created_parsed(data: bytes | None, created: Sequence[str]) -> bytes:
    """:func:`with_created` the long way, for any file: the whole order parsed into a dict,
    ranked, dumped again (what every install did before the splice)."""
    state = parse_runtime(data)
    order = state.creation_order
    rank = max(order.values(), default=-1) + 1
    for block_id in created:
        if block_id not in order:
            order[block_id] = rank
            rank += 1
    return state.dumps().encode("utf-8")


# Our form, as ``dumps`` writes it (indent 2, as the reference) with no legacy ``cursors``:
# keys of plain printable ASCII (no quote, no backslash: dumped as they are), canonical ranks.
_HEAD = b'{\n  "creation_order": {'
_RANK = rb"(?:0|[1-9][0-9]*)"
_ENTRY = rb'\n    "[\x20\x21\x23-\x5b\x5d-\x7e]*": ' + _RANK
_ENTRIES = re.compile(rb"%s(?:,%s)*+\n  " % (_ENTRY, _ENTRY))  # possessive: no stack
_TAIL = re.compile(rb'\},\n  "write_commits_since_global": %s,\n  "local_batches": %s,\n  '
                   rb'"local_tokens": %s,\n  "last_global_at": (?:null|"[^"\\\x00-\x1f]*")\n\}\n\Z'
                   % (_RANK, _RANK, _RANK))
_CLOSE = b"\n  "  # what ends a non-empty creation_order before its brace
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]+")
_TAIL_MAX = 512  # a tail longer than this (a huge last_global_at) takes the full parse


def _splice(data: bytes, created: Sequence[str]) -> bytes | None:
    """The spliced file, or None when ``data`` is not in our form (or an id is not plain)."""
    if not data.startswith(_HEAD) or not all(_PLAIN_ID.fullmatch(b) for b in created):
        return None
    start = len(_HEAD)
    tail = _TAIL.search(data, max(start, len(data) - _TAIL_MAX))
    if tail is None:
        return None
    end = tail.start()
    if end == start:
        rank = 0
    else:
        if _ENTRIES.fullmatch(data, start, end) is None:
            return None
        end -= len(_CLOSE)  # the last entry ends here
        last = data[data.rindex(b": ", start, end) + 2:end]
        rank = int(last)
        if _any_greater(data, start, end, rank):
            return None  # a rank above the last entry's: the full parse finds the highest
        rank += 1
    try:  # the tail's last_global_at is dumped raw: it must read back as it is
        data[end:].decode("utf-8")
    except ValueError:
        return None
    added: list[bytes] = []
    seen: set[str] = set()
    for block_id in created:
        key = b'\n    "%s": ' % block_id.encode("ascii")
        if block_id in seen or data.find(key, start, end) >= 0:
            continue
        seen.add(block_id)
        added.append(key + b"%d" % rank)
        rank += 1
    if not added:
        return data
    view = memoryview(data)  # one copy of the file: the result, no slices on the way
    if end == start:  # an empty creation_order: ``{}`` opens up
        return b"".join((view[:end], b",".join(added), _CLOSE, view[end:]))
    return b"".join((view[:end], b",", b",".join(added), view[end:]))


_RANKS_PER_PATTERN = 100


def _any_greater(data: bytes, start: int, end: int, rank: int) -> bool:
    """Does ``data[start:end]`` hold a rank greater than ``rank``? The pattern asks for ranks
    at least the hundred ``rank`` lies in, so one compiled pattern serves a hundred installs
    (one per rank kept ``re``'s cache full: 512 patterns, 0.6 MB, over a ``write --all``);
    the few matches inside that hundred are compared as numbers."""
    floor = rank - rank % _RANKS_PER_PATTERN
    return max(map(int, _rank_at_least(floor).findall(data, start, end)), default=-1) > rank


@lru_cache(maxsize=2)  # a write --all moves up through the hundreds: keep the current one
def _rank_at_least(floor: int) -> re.Pattern[bytes]:
    """A rank (after its ``: ``, before ``,`` or the end) at least ``floor``: more digits, or
    as many with a larger digit at the first place they differ, or ``floor`` itself."""
    digits = str(floor)
    alternatives = [r"[0-9]{%d,}" % (len(digits) + 1), digits]
    for i, d in enumerate(digits):
        if d != "9":
            alternatives.append(f"{digits[:i]}[{int(d) + 1}-9][0-9]{{{len(digits) - i - 1}}}")
    return re.compile((r": (%s)(?=,|\n|\Z)" % "|".join(alternatives)).encode("ascii"))


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def read_generation(runtime_dir: Path) -> int | None:
    """The install counter of the workspace whose runtime dir this is (None: none yet)."""
    try:
        with open(os.path.join(runtime_dir, GENERATION_FILE), "rb") as fh:
            return int(fh.read(32))
    except (OSError, ValueError):
        return None
