"""Which line of a conversation a memory claim came from, derived from what it cites.

No file format changes: a claim's source ids already name (session, node)
(``openprogram/<session>/<node>``), and the session DAG says whether a node lies on a reader's
line (:mod:`scriptorium.sessions.lines`). For a reader at (session S, tip H) a claim is

- ``on_line``: every node of S it cites is on H's line;
- ``alternative``: it cites a node of S off H's line — said on another branch; it names the
  fork point (the last shared turn) and what opened that branch;
- ``elsewhere``: it cites nothing from S (another conversation, or no session at all).

A session whose DAG cannot be read makes the classes unavailable with an error
(BRANCH_UNAVAILABLE); there is never a silent fall-back to branch-blind answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..errors import CorruptFile, NotFound, ReasonCode, ScriptoriumError
from ..sessions import SessionStore
from ..sessions.lines import Divergence, Line
from .records import PROVIDER

ON_LINE = "on_line"
ALTERNATIVE = "alternative"
ELSEWHERE = "elsewhere"


class BranchUnavailable(CorruptFile):
    """The session's DAG cannot be walked, so no claim can be placed on or off its lines."""

    code = ReasonCode.BRANCH_UNAVAILABLE


@dataclass(frozen=True)
class Provenance:
    """Where a claim stands for one reader. ``note`` says in words which branch an
    ``alternative`` claim was said on ("on the branch that edited u3")."""

    branch: str
    fork_point: str | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"branch": self.branch}
        if self.branch == ALTERNATIVE:
            out["fork_point"] = self.fork_point
            out["branch_note"] = self.note
        return out

    def label(self) -> str:
        """The text view: ``on_line``, ``elsewhere``, ``alternative: <note>``."""
        return f"{self.branch}: {self.note}" if self.note else self.branch


def cited_nodes(sources: Iterable[str], session_id: str) -> list[str]:
    """The node ids of ``session_id`` among source ids (session turns only), in order."""
    prefix = f"{PROVIDER}/{session_id}/"
    out: list[str] = []
    for source in sources:
        if isinstance(source, str) and source.startswith(prefix):
            node = source[len(prefix):]
            if node and node not in out:
                out.append(node)
    return out


# Divergence kind -> phrase ({of}: the node edited/retried/spawned from, {opening}: the node
# that opened the other branch).
_PHRASES = {
    "edit": "on the branch that edited {of}",
    "retry": "on the branch that retried {of}",
    "edited": "on the original branch, before {opening} was edited into {of}",
    "retried": "on the original branch, before {opening} was retried as {of}",
    "spawn": "in a sub-agent spawned from {of} on another branch",
    "rewound": "on a part of the conversation that was rewound",
    "fork": "on another branch",
}


def describe(div: Divergence) -> str:
    """A short phrase naming the branch a node off the reader's line was said on."""
    if div.kind == "missing":
        return "on a branch no longer in the session"
    fork = f" (fork point {div.fork_point})" if div.fork_point else " (no shared turn)"
    phrase = _PHRASES.get(div.kind, _PHRASES["fork"])
    return phrase.format(of=div.of, opening=div.opening) + fork


class BranchReader:
    """A reader standing at (session, tip): classifies claims by the line they came from.

    Unknown session or tip: NotFound (exit 3). A DAG that cannot be walked:
    BranchUnavailable (exit 4), naming the session.
    """

    def __init__(self, store: SessionStore, session_id: str, head: str | None = None):
        self.store = store
        self.session_id = session_id
        try:
            self.line: Line = store.line(session_id, head)
        except NotFound:
            raise
        except ScriptoriumError as exc:
            if not isinstance(exc, CorruptFile):
                raise
            raise BranchUnavailable(f"session {session_id}: branch classes unavailable, its "
                                    f"conversation graph cannot be read ({exc})") from None

    @property
    def head(self) -> str:
        return self.line.tip

    def branch_of(self, sources: Sequence[str]) -> str:
        """The class alone (no fork point): line membership only, for ranking many hits."""
        nodes = cited_nodes(sources, self.session_id)
        if not nodes:
            return ELSEWHERE
        return ON_LINE if all(n in self.line.nodes for n in nodes) else ALTERNATIVE

    def classify_many(self, source_lists: Sequence[Sequence[str]]) -> list[Provenance]:
        """One provenance per list of cited source ids (one DAG read for all of them)."""
        cited = [cited_nodes(sources, self.session_id) for sources in source_lists]
        off = {n for nodes in cited for n in nodes if n not in self.line.nodes}
        divergences: dict[str, Divergence] = {}
        if off:
            try:
                divergences = self.store.divergences(self.session_id, self.head, sorted(off))
            except CorruptFile as exc:
                raise BranchUnavailable(f"session {self.session_id}: branch classes "
                                        f"unavailable ({exc})") from None
        out: list[Provenance] = []
        for nodes in cited:
            if not nodes:
                out.append(Provenance(ELSEWHERE))
                continue
            first_off = next((n for n in nodes if n not in self.line.nodes), None)
            if first_off is None:
                out.append(Provenance(ON_LINE))
                continue
            div = divergences[first_off]
            out.append(Provenance(ALTERNATIVE, div.fork_point, describe(div)))
        return out

    def classify(self, sources: Sequence[str]) -> Provenance:
        return self.classify_many([sources])[0]


class LineOracle:
    """Do two sets of cited turns lie on mutually exclusive branches of one session?

    Two nodes of one session are compatible when one is on the other's line (a shared
    prefix, or a sub-agent's work for that line); otherwise no reader can stand on both.
    A session the store does not hold puts no constraint; a node that is gone or a DAG that
    cannot be read counts as exclusive, so an organizer never merges across lines it
    cannot see.
    """

    def __init__(self, store: SessionStore | None):
        self.store = store
        self._known: dict[str, bool] = {}

    def exclusive(self, a: Iterable[str], b: Iterable[str]) -> bool:
        by_session: dict[str, tuple[set[str], set[str]]] = {}
        for side, sources in enumerate((a, b)):
            for source in sources:
                parts = source.split("/", 2) if isinstance(source, str) else []
                if len(parts) == 3 and parts[0] == PROVIDER and parts[1] and parts[2]:
                    by_session.setdefault(parts[1], (set(), set()))[side].add(parts[2])
        for sid, (left, right) in by_session.items():
            if not left or not right or not self._has(sid):
                continue
            for x in left:
                for y in right:
                    if x != y and not self._compatible(sid, x, y):
                        return True
        return False

    def _has(self, sid: str) -> bool:
        if sid not in self._known:
            try:
                self._known[sid] = self.store is not None and self.store.exists(sid)
            except ScriptoriumError:  # an id that cannot name a session directory
                self._known[sid] = False
        return self._known[sid]

    def _compatible(self, sid: str, x: str, y: str) -> bool:
        assert self.store is not None
        try:
            return y in self.store.line(sid, x) or x in self.store.line(sid, y)
        except ScriptoriumError:
            return False
