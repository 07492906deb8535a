"""Near-duplicate paragraphs: when two topic blocks say the same thing.

Deterministic: normalised word sets (Jaccard), then an order-aware ratio; numbers and
negations must agree. :func:`find_duplicates` groups blocks greedily and stays far from
quadratic through prefix filtering; an ``exclusive`` predicate (the line oracle) vetoes
groups that would join claims from mutually exclusive branches of one conversation.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from .topics import Block

JACCARD_MIN = 0.85
RATIO_MIN = 0.85

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATIONS = frozenset({"not", "no", "never", "none", "nothing", "nobody", "neither", "nor",
                        "cannot", "without", "don't", "doesn't", "didn't", "won't", "isn't",
                        "aren't", "wasn't", "weren't", "can't", "shouldn't", "wouldn't",
                        "couldn't", "不", "没", "别", "未", "无"})
_NEGATION_SUFFIX = "n't"


# -- similarity --------------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    """Casefolded words, with CJK text split into characters (it has no spaces)."""
    out: list[str] = []
    for word in _WORD_RE.findall(text.casefold().replace("’", "'")):
        if _CJK_RE.search(word):
            rest = _CJK_RE.sub(" ", word).split()
            out.extend(rest)
            out.extend(_CJK_RE.findall(word))
        else:
            out.append(word)
    return out


def _guards(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """Numbers and negations: two texts differing in these do not say the same thing."""
    folded = text.casefold().replace("’", "'")
    numbers = frozenset(_NUMBER_RE.findall(folded))
    words = re.findall(r"[^\W_]+(?:'[^\W_]+)?", folded)
    negations = frozenset(w for w in words if w in _NEGATIONS or w.endswith(_NEGATION_SUFFIX))
    negations |= frozenset(ch for ch in folded if ch in _NEGATIONS)
    return numbers, negations


@dataclass
class _Entry:
    doc_index: int
    block: Block
    text: str
    tokens: list[str]
    token_set: frozenset[str]
    guards: tuple[frozenset[str], frozenset[str]]
    sources: tuple[str, ...] = ()


# (sources of a group so far, sources of a candidate) -> may they never be merged?
Exclusive = Callable[[Any, Any], bool]


def same_thing(a: str, b: str, *, jaccard_min: float = JACCARD_MIN,
               ratio_min: float = RATIO_MIN) -> bool:
    """Do two paragraph texts say the same thing? Identical words always do; otherwise the
    word sets must overlap (Jaccard), the word sequences must align (difflib ratio), and
    numbers and negations must be the same."""
    ta, tb = tokens(a), tokens(b)
    return _similar(ta, frozenset(ta), _guards(a), tb, frozenset(tb), _guards(b),
                    jaccard_min, ratio_min)


def _similar(ta: list[str], sa: frozenset[str], ga: Any, tb: list[str], sb: frozenset[str],
             gb: Any, jaccard_min: float, ratio_min: float) -> bool:
    if not ta or not tb:
        return False
    if ta == tb:
        return True
    if ga != gb:
        return False
    union = len(sa | sb)
    if not union or len(sa & sb) / union < jaccard_min:
        return False
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio() >= ratio_min


def find_duplicates(entries: list[_Entry], jaccard_min: float = JACCARD_MIN,
                    ratio_min: float = RATIO_MIN,
                    exclusive: Exclusive | None = None) -> dict[int, list[int]]:
    """Groups of near-duplicates: kept entry index -> indexes merged into it (in order).

    Greedy and order-preserving: each entry joins the first earlier *kept* entry it
    resembles, so a group never chains through a member that only resembles another member.
    Candidates come from prefix filtering (a pair above the Jaccard threshold must share one
    of each set's rarest words), so this stays far from quadratic on large workspaces.
    ``exclusive`` vetoes joining a group whose cited turns (all members') lie on a branch
    exclusive of the entry's.
    """
    freq: Counter[str] = Counter()
    group_sources: dict[int, set[str]] = {}
    for e in entries:
        freq.update(e.token_set)
    index: dict[str, list[int]] = {}
    kept: dict[int, list[int]] = {}
    for i, e in enumerate(entries):
        if not e.token_set:
            continue
        ordered = sorted(e.token_set, key=lambda t: (freq[t], t))
        size = len(ordered)
        prefix = ordered[: size - math.ceil(jaccard_min * size) + 1]
        seen: set[int] = set()
        target = None
        for token in prefix:
            for j in index.get(token, ()):
                if j in seen:
                    continue
                seen.add(j)
                other = entries[j]
                if len(other.token_set) < jaccard_min * size or \
                        size < jaccard_min * len(other.token_set):
                    continue
                if target is not None and j > target:
                    continue
                if _similar(other.tokens, other.token_set, other.guards, e.tokens,
                            e.token_set, e.guards, jaccard_min, ratio_min) and (
                        exclusive is None or not exclusive(group_sources[j], e.sources)):
                    target = j
        if target is not None:
            kept[target].append(i)
            group_sources[target].update(e.sources)
            continue
        kept[i] = []
        group_sources[i] = set(e.sources)
        for token in prefix:
            index.setdefault(token, []).append(i)
        # A kept entry must also be findable from entries whose prefix holds its other words.
        for token in ordered[len(prefix):]:
            index.setdefault(token, []).append(i)
    return {k: v for k, v in kept.items() if v}
