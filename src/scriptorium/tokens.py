"""Offline token counting.

Model tokenizers (tiktoken and friends) download their vocabularies at run time, which we
must never do. Batching only needs a stable, roughly model-sized count, so we approximate a
BPE tokenizer: every run of letters/digits costs one token per 4 characters (rounded up), and
every other non-space character costs one. On English prose this lands within ~15% of
o200k_base; it is deterministic and needs no download.
"""

from __future__ import annotations

import re

_PIECE = re.compile(r"[^\W_]+|[^\w\s]|_", re.UNICODE)


def count_tokens(text: str) -> int:
    """Approximate model tokens in ``text`` (0 for empty or blank text)."""
    total = 0
    for match in _PIECE.finditer(text):
        piece = match.group(0)
        if piece[0].isalnum():
            # CJK and other non-spaced scripts: count characters, as tokenizers roughly do.
            if any(ord(ch) > 0x2E80 for ch in piece):
                total += len(piece)
            else:
                total += (len(piece) + 3) // 4
        else:
            total += 1
    return total
