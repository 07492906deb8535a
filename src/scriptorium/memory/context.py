"""The memory a model on one branch should see now: one Markdown block for its prompt.

Claims relevant to the branch's recent turns, found by branch-aware searches: first the
claims that best answer the newest turn (the one the model is about to respond to, so a
question asked just now is not drowned by the turns before it), looked for in this
conversation's claims and then in all of memory, then those matching the most salient words
of the recent turns together; claims on the reader's line first, then claims
from other conversations, then what was said on other branches of this one, labelled with the
branch it was said on. A claim a later one replaces ranks below it (as in search). Every line names its block id, so a model (or a person) can open the
paragraph and its evidence. The block stays within a token budget
counted with the project's offline counter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from ..tokens import count_tokens
from .provenance import ALTERNATIVE, ELSEWHERE, ON_LINE, BranchReader
from .records import is_record, message_text
from .search import search
from .search.query import BRANCH_DEPTH
from .writers.embedded import keywords

if TYPE_CHECKING:  # pragma: no cover
    from ..sessions import SessionStore

DEFAULT_BUDGET = 800
MIN_BUDGET = 32
MAX_BUDGET = 200_000
RECENT_TURNS = 6
QUERY_WORDS = 16
NEWEST_DEPTH = 8  # claims answering the newest turn that lead the context
SECTIONS = ((ON_LINE, "On this branch"), (ELSEWHERE, "From other conversations"),
            (ALTERNATIVE, "Said on other branches of this conversation (not on this one)"))


@dataclass
class ContextBlock:
    """One claim in the context, with where it stands for the reader."""

    block_id: str | None
    path: str
    text: str
    branch: str
    score: float
    sources: list[str] = field(default_factory=list)
    fork_point: str | None = None
    branch_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"block_id": self.block_id, "path": self.path, "text": self.text,
                               "branch": self.branch, "score": self.score,
                               "sources": list(self.sources)}
        if self.branch == ALTERNATIVE:
            out["fork_point"] = self.fork_point
            out["branch_note"] = self.branch_note
        return out


@dataclass
class MemoryContext:
    """``markdown`` is what goes into the prompt; ``tokens`` its size (≤ the budget)."""

    session_id: str
    head: str
    tokens: int
    markdown: str
    blocks: list[ContextBlock] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "head": self.head, "tokens": self.tokens,
                "markdown": self.markdown, "blocks": [b.to_dict() for b in self.blocks]}


def check_budget(budget: Any) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) \
            or not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise InvalidInput(f"invalid token budget {budget!r} ({MIN_BUDGET}..{MAX_BUDGET})")
    return budget


def recent_turns(store: "SessionStore", session_id: str, head: str,
                 count: int = RECENT_TURNS) -> list[dict]:
    """The last ``count`` turns memory would record on the branch ending at ``head``."""
    seen: list[dict] = []

    def enough(message: dict) -> bool:
        if len(seen) >= count:
            return True
        if is_record(message):
            seen.append(message)
        return False

    store.branch_tail(session_id, head, stop=enough)
    return seen


def memory_context(workspace: Any, store: "SessionStore", session_id: str,
                   head: str | None = None, budget: int = DEFAULT_BUDGET) -> MemoryContext:
    """The Markdown block for a model at (session, head); see the module docstring."""
    budget = check_budget(budget)
    reader = BranchReader(store, session_id, head)
    recent = recent_turns(store, session_id, reader.head)
    texts = [message_text(m.get("content")) for m in recent]  # newest first
    newest = keywords(texts[0], QUERY_WORDS) if texts else []
    hits = []
    for words, depth, own in ((newest, NEWEST_DEPTH, True), (newest, NEWEST_DEPTH, False),
                              (keywords(" ".join(texts), QUERY_WORDS), BRANCH_DEPTH, False)):
        if words:
            hits += search(workspace, " ".join(words), top_k=depth, reader=reader,
                           own_session=own)
    candidates: list[ContextBlock] = []
    seen: set[tuple[str | None, str]] = set()
    for hit in hits:
        key = (hit.block_id, hit.text)
        if key in seen:
            continue
        seen.add(key)
        prov = hit.provenance
        assert prov is not None
        candidates.append(ContextBlock(hit.block_id, hit.path, hit.text, prov.branch,
                                       hit.score, list(hit.sources), prov.fork_point,
                                       prov.note))
    title = f"## Memory for this conversation (session {session_id}, at {reader.head})"
    lines, used, chosen = [title], count_tokens(title), []
    if used > budget:
        return MemoryContext(session_id, reader.head, 0, "", [])
    for branch, heading in SECTIONS:
        opened = False
        for block in (b for b in candidates if b.branch == branch):
            note = f"[{block.branch_note}] " if branch == ALTERNATIVE else ""
            line = f"- {note}{block.text} (^{block.block_id})"
            cost = count_tokens(line) + (0 if opened else count_tokens(f"{heading}:"))
            if used + cost > budget:
                continue
            if not opened:
                lines += ["", f"{heading}:"]
                opened = True
            lines.append(line)
            used += cost
            chosen.append(block)
    markdown = "\n".join(lines) + "\n"
    return MemoryContext(session_id, reader.head, count_tokens(markdown), markdown, chosen)
