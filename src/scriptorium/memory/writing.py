"""The front door: :class:`Memory`, the one object through which the library and the CLI
write, read and keep up long-term memory of a home's sessions.

Each operation is a method here that delegates to the module that holds it: one write step
(archive, install, mark: the order a crash cannot turn into an omission) in
:mod:`.write_step`, the write paths in :mod:`.write_paths`, reading and upkeep in theirs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, cast

from ..config import Settings, load_settings, resolve_home, resolve_location
from ..errors import InvalidInput, NotFound, ReasonCode, ScriptoriumError
from ..sessions import SessionStore
from ..sessions.errors import SessionNotFound
from ..sessions.kinds import is_spawn_root
from ..sessions.node import ROOT
from . import write_paths, write_step
from .failures import Failure
from .migrate import migrate_if_needed
from .progress import Progress
from .records import MARK_KEY, Record, is_record, records, to_source_record, total_tokens
from .side_branches import PendingBranch, side_branch_due
from .results import SessionResult, StepResult
from .search import Hit, attach
from .workspace import Workspace
from .writers import Writer, make_writer

if TYPE_CHECKING:  # pragma: no cover - upkeep modules load on first use: a light import
    from .backfill import BackfillReport
    from .migrate import MigrationReport
    from .reorganize import ReorganizeReport
    from .verify import VerifyReport
    from .pg_watch import PgWatcher
    from .watcher import IdleWatcher, PassReport
    from ..postgres.worker import JobReport, WorkSummary

__all__ = ["Memory", "SessionResult", "StepResult", "to_source_record"]

if TYPE_CHECKING:  # pragma: no cover
    from .context import MemoryContext

def _postgres_url(home: Path | str | None) -> str | None:
    """The home URL when ``home`` (else ``$SCRIPTORIUM_HOME``) names a PostgreSQL home."""
    where = resolve_location(home)
    return where if isinstance(where, str) else None


class Memory:
    """Long-term memory for the sessions of one home: the library's main entry point.

    ``Memory(home)`` opens ``home/sessions`` and ``home/memory`` (home: the argument, else
    ``$SCRIPTORIUM_HOME``, else ``~/.scriptorium``; ``~`` is expanded). Pass ``writer`` to use your
    own :class:`~scriptorium.memory.writers.Writer`; by default the configured kind is used.

    Every operation is a method here (write, status, search, follow, show, migrate, backfill,
    reorganize, verify, watch); the CLI calls each once and holds no logic of its own.
    """

    _closing: list[Callable[[], None]]  # what close() lets go of

    @classmethod
    def open(cls, home: Path | str | None = None, *, settings: Settings | None = None,
             writer: Writer | None = None, create: bool = True,
             recover: bool = True) -> "Memory":
        """Memory for ``home``. ``create=False`` opens without laying out a workspace that is
        not there (reading never creates one); ``recover=False`` also leaves an interrupted
        install alone, so nothing at all changes on disk (a read-only check)."""
        url = _postgres_url(home)
        if url is not None:
            return cls._open_postgres(url, settings=settings, writer=writer)
        home_path = resolve_home(home)
        root = home_path / "memory"
        if create:
            workspace = Workspace.open(root, create=True)
        else:
            workspace = Workspace.open(root, create=False) if recover else Workspace(root)
        return cls(home_path, settings=settings, writer=writer, workspace=workspace)

    @classmethod
    def _open_postgres(cls, url: str, *, settings: Settings | None,
                       writer: Writer | None) -> "Memory":
        """Memory for a PostgreSQL home: one connection pool shared by the session store
        and the workspace (see :mod:`.pg_workspace`). Settings come from the environment
        (a database home has no config.toml)."""
        from ..postgres.connect import PgHome
        from ..sessions.pg_store import PgSessionStore
        from .pg_workspace import PgWorkspace

        pg = PgHome.open(url)
        try:
            # the PostgreSQL store has the directory store's whole public API (its contract)
            store = cast(SessionStore, PgSessionStore(pg))
            memory = cls(url, settings=settings or load_settings(url), writer=writer,
                         store=store, workspace=PgWorkspace.open_home(pg))
        except BaseException:
            pg.close()
            raise
        memory._closing.append(pg.close)
        return memory

    def close(self) -> None:
        """Let go of what :meth:`open` connected (a PostgreSQL home's connections); a
        directory home holds nothing open. Safe to call twice."""
        closing = self._closing
        self._closing = []
        for fn in reversed(closing):
            fn()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __init__(self, home: Path | str | None = None, *, settings: Settings | None = None,
                 writer: Writer | None = None, store: SessionStore | None = None,
                 workspace: Workspace | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        url = _postgres_url(home)
        if url is not None and (store is None or workspace is None):
            raise InvalidInput("a PostgreSQL home is opened with Memory.open(url)")
        # as the CLI: argument, $SCRIPTORIUM_HOME, ~/.scriptorium; a database home is its URL
        self.home: Path | str = url if url is not None else resolve_home(home)
        self.settings = settings or load_settings(self.home)
        self.store = store or SessionStore(Path(self.home) / "sessions")
        self.workspace = workspace or Workspace.open(Path(self.home) / "memory")
        attach(self.workspace)  # the search index is kept current by every install
        self.blocked = self.workspace.blocked_branches()
        self._writer = writer
        self.clock = clock
        self._closing = []
        close_workspace = getattr(self.workspace, "close", None)
        if callable(close_workspace):
            self._closing.append(close_workspace)

    @property
    def writer(self) -> Writer:
        if self._writer is None:
            self._writer = make_writer(self.settings.writer_kind, self.settings)
        return self._writer

    @property
    def workspace_id(self) -> str:
        return self.workspace.workspace_id

    # -- reading what is owed ------------------------------------------------------------

    def branch_records(self, session_id: str, tip: str | None = None) -> list[Record]:
        return records(session_id, self.store.get_branch(session_id, tip))

    def pending(self, session_id: str, tip: str | None = None) -> list[Record]:
        """The unmarked trailing turns of the branch ending at ``tip`` (default: the head).

        The walk goes back from the tip and stops at the first turn marked for this workspace,
        so its cost follows the backlog, not the session's length. (Equal, by a property test,
        to ``unwritten(branch_records(...))``.)
        """
        workspace_id = self.workspace_id

        def written(message: dict[str, Any]) -> bool:
            return message.get(MARK_KEY) == workspace_id and is_record(message)

        tail, root = self.store.branch_tail(session_id, tip, stop=written)
        spawned = root is not None and not root.get("rewound") and is_spawn_root(root)
        in_sub_agent = spawned and root is not None and (
            not tail or tail[0].get("id") != root.get("id"))
        return records(session_id, tail, in_sub_agent=in_sub_agent)

    def live_tips(self, session_id: str) -> list[str | None]:
        """The head first, then every other live, non-archived tip."""
        head = self.store.head(session_id)
        tips: list[str | None] = [head]
        for row in self.store.list_branches(session_id):
            if row.get("archived") or row["tip"] in tips:
                continue
            tips.append(row["tip"])
        return tips

    # -- one write step ------------------------------------------------------------------

    def write_batch(self, session_id: str, batch: Sequence[Record],
                    tip: str | None = None, own_blocks: Sequence[str] = ()) -> StepResult:
        """Archive, write and mark one batch (in the order :mod:`.write_step` explains).
        ``own_blocks``: paragraphs earlier batches of this run created (the writer may
        remove those; any other paragraph citing turns outside the batch it must keep)."""
        return write_step.write_batch(self, session_id, batch, tip, own_blocks)

    # -- recording a turn ----------------------------------------------------------------

    def record_turn(self, session_id: str, role: str, text: str, *, after: str | None = None,
                    node_id: str | None = None, title: str = "") -> dict[str, Any]:
        """Append one user/assistant turn to ``session_id`` (created when new), after the head
        or, with ``after``, as a fork after that node; for an agent that keeps its conversation
        here. Returns ``{"session_id", "node_id", "head_id", "created_session"}``."""
        from ..errors import InvalidInput

        if role not in ("user", "assistant"):
            raise InvalidInput(f"role must be user or assistant, not {role!r}")
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("a turn needs non-blank text")
        created = not self.store.exists(session_id)
        if created:
            self.store.create_session(session_id, title=title)
        msg: dict[str, Any] = {"role": role, "content": text}
        if node_id is not None:
            msg["id"] = node_id
        nid = (self.store.append_after(session_id, after, msg) if after is not None
               else self.store.append_message(session_id, msg))
        return {"session_id": session_id, "node_id": nid,
                "head_id": self.store.head(session_id), "created_session": created}

    # -- the three write paths -----------------------------------------------------------

    def write_turn(self, session_id: str) -> SessionResult:
        """Per-turn path: the head branch only, when its pending turns reach the threshold or
        its newest pending turn is older than the idle allowance."""
        return write_paths.write_turn(self, session_id)

    def write_session(self, session_id: str) -> SessionResult:
        """Session-boundary path (forced): the head branch whatever it holds, then every other
        live tip the ``side_branches`` policy says is due (:meth:`branch_qualifies`; default:
        a line somebody went down or a sub-agent's branch, whatever it holds; a retried reply
        only once it reaches the threshold). Shared prefixes are written once, because each
        walk stops at the marks the earlier branches left."""
        return write_paths.write_session(self, session_id)

    def branch_qualifies(self, session_id: str, tip: str | None) -> bool:
        """Whether the branch ending at ``tip`` is due off the head under the
        ``side_branches`` policy (:meth:`side_branch_due`: by default a line somebody went
        down or a sub-agent's branch; a one-turn retry is a rejected reply and waits)."""
        pending = self.pending(session_id, tip)
        return bool(pending) and self.side_branch_due(session_id, tip, pending)[0]

    def write_branch(self, session_id: str, tip: str) -> SessionResult:
        """Write the branch ending at ``tip`` if it qualifies: for a branch the head just left
        (the watcher is told of the move and need not wait for the session to go quiet)."""
        return write_paths.write_branch(self, session_id, tip)

    def write(self, session_ids: Iterable[str] | None = None, *, force: bool = False,
              progress: Callable[[str], None] | None = None) -> list[SessionResult]:
        """Write the given sessions (default: all), forced (boundary) or per-turn. An unknown
        session id is refused (SessionNotFound) before anything is written; a session whose
        write fails reports its failure in its result, and the others are still written."""
        return list(self.write_each(session_ids, force=force, progress=progress))

    def write_each(self, session_ids: Iterable[str] | None = None, *, force: bool = False,
                   progress: Callable[[str], None] | None = None) -> Iterator[SessionResult]:
        """:meth:`write` one session at a time: each result as soon as its session is done
        (unknown ids are refused here, before anything is written). A caller that reports
        each result and lets it go holds one session's worth of results, not the home's."""
        if session_ids is None:
            ids = [row["session_id"] for row in self.store.list_sessions()]
        else:
            ids = list(session_ids)
            for sid in ids:  # refuse a name nobody has before writing anything
                if not self.store.exists(sid):
                    raise SessionNotFound(f"unknown session {sid!r}")
        return write_paths.write_each(self, ids, force, progress)

    # -- importers ------------------------------------------------------------------------

    def import_sessions(self, kind: str, paths: Iterable[Path | str] | None = None, *,
                        write: bool = False) -> dict[str, Any]:
        """Import Claude Code / pi / Codex / ChatGPT conversations (``kind``) from ``paths``
        (default: the tool's own session folder) into the store, incrementally; with
        ``write`` run the session-boundary write for every session that received nodes.

        Returns ``{"kind", "files": [per source file report], "changed_sessions",
        "nodes_added"}`` plus ``"writes"`` (``SessionResult.to_dict()`` rows) with ``write``.
        """
        from ..importers import import_sources

        result = import_sources(self.store, self.home, kind, paths)
        out = result.to_dict()
        if write:
            out["writes"] = [r.to_dict() for r in
                             self.write(result.changed_sessions, force=True)]
        return out

    # -- branch-aware reading ------------------------------------------------------------

    def context(self, session_id: str, head: str | None = None, *,
                budget: int | None = None) -> "MemoryContext":
        """The memory a model on that branch should see now, as one Markdown block within
        ``budget`` tokens (see :mod:`.context`)."""
        from .context import DEFAULT_BUDGET, memory_context

        return memory_context(self.workspace, self.store, session_id, head,
                              DEFAULT_BUDGET if budget is None else budget)

    # -- side branches -------------------------------------------------------------------

    def side_branch_due(self, session_id: str, tip: str | None,
                        pending: list[Record]) -> tuple[bool, str]:
        """Is the off-head branch ending at ``tip`` due at the session boundary? (see
        :mod:`.side_branches`; the reason says why not)."""
        head = self.store.head(session_id)
        if head is None or tip is None:
            return True, ""
        head_line = self.store.line(session_id, head).nodes
        divergence = self.store.divergences(session_id, head, [tip]).get(tip)
        return side_branch_due(pending, head_line, divergence, self.settings.side_branches,
                               self.settings.trigger_tokens)

    def still_pending(self, session_id: str, *, boundary: bool = True,
                      failure: Failure | None = None) -> list[PendingBranch]:
        """Every branch (archived ones too) that still owes turns, with why it waits: as
        the next write of the given kind (``boundary``: forced) would see it, after a write
        that failed with ``failure``. The rule is :func:`.pending_reasons.pending_reasons`'s,
        the one the view and status show."""
        from .pending_reasons import AfterWrite, pending_reasons

        after = AfterWrite(boundary, failure.to_dict() if failure is not None else None)
        head = self.store.head(session_id)
        return [PendingBranch(tip, tip == head, why.pending_ids, why.tokens, why.code)
                for tip, why in pending_reasons(self, session_id, after=after).items()
                if why.turns]

    # -- migration hook ------------------------------------------------------------------

    def migrate_if_needed(self) -> None:
        """Run the one-time migration off the legacy position cursor before pending work is
        computed (a no-op when runtime.json holds no ``cursors``)."""
        migrate_if_needed(self)

    # -- status --------------------------------------------------------------------------

    def session_status(self, session_id: str) -> dict[str, Any]:
        """Per live branch: the tip, whether it is the head, and what it still owes."""
        head = self.store.head(session_id)
        branches = []
        for tip in self.live_tips(session_id):
            if tip is None or tip == ROOT:  # rewound to the start: no branch yet
                continue
            pending = self.pending(session_id, tip)
            ids = [r.node_id for r in pending]
            branches.append({"tip": tip, "head": tip == head, "pending_turns": len(pending),
                             "pending_tokens": total_tokens(pending), "pending_ids": ids,
                             "blocked": self.blocked.for_branch(session_id, tip, ids)})
        return {"session_id": session_id, "branches": branches}

    # -- reading memory back -------------------------------------------------------------

    def status(self, session_ids: Sequence[str] = ()) -> dict[str, Any]:
        """Workspace id, revision, counts and, per session and live branch, what is still
        pending (default: every session). Read-only."""
        from .status import memory_status

        return memory_status(self, list(session_ids))

    def show(self, ref: str) -> dict[str, Any]:
        """A topic file (path relative to ``topics/`` or the workspace) or one block with its
        footnotes."""
        from .status import show

        return show(self.workspace, ref)

    def search(self, query: str, *, top_k: int = 5, path_prefix: str | None = None,
               since: str | None = None, until: str | None = None, speaker: str | None = None,
               include_sources: bool = False, method: str = "bm25",
               session: str | None = None, head: str | None = None) -> list[Hit]:
        """Search topic claims (and, with ``include_sources``, archived turns); see
        :func:`scriptorium.memory.search.search`. No memory yet: bad arguments are still
        refused, and nothing is found. ``session``/``head``: read as a reader on that branch
        (each hit says on_line, alternative or elsewhere)."""
        from .search import search
        from .search.query import check_arguments

        options: dict[str, Any] = dict(top_k=top_k, path_prefix=path_prefix, since=since,
                                       until=until, speaker=speaker,
                                       include_sources=include_sources, method=method)
        if not self.workspace.root.is_dir():
            check_arguments(query, **options)
            if session is not None:
                from .provenance import BranchReader

                BranchReader(self.store, session, head)  # unknown session or tip: NotFound
            elif head is not None:
                raise InvalidInput("--head needs --session (the conversation the tip belongs to)")
            return []
        return search(self.workspace, query, **options, session=session, head=head,
                      store=self.store)

    def follow(self, source_id: str) -> dict[str, Any]:
        """Where a cited source came from; for a session turn that this home's store still
        holds, ``in_session_store`` and the ``turn`` itself.

        A source that is not in the evidence archive is NotFound: ``SOURCE_NOT_WRITTEN`` when
        the session store holds the turn but memory has not written it yet (the error's
        ``details`` carry what is known, the stored turn included), NOT_FOUND otherwise. The
        CLI and the MCP tool say the same."""
        from .search import follow

        data = follow(self.workspace, source_id)
        sid = data["session_id"]
        if sid is not None:
            data["in_session_store"] = False
            if self.store.exists(sid):
                try:
                    node = self.store.get_node(sid, data["node_id"])
                except ScriptoriumError:  # an unknown node is reported, not raised
                    node = None
                if node is not None:
                    data["in_session_store"] = True
                    data["turn"] = node.to_message(sid)
        if not data["archived"]:
            if not data.get("in_session_store"):
                raise NotFound(f"source {source_id} is neither in the evidence archive nor in "
                               f"the session store")
            raise NotFound(f"source {source_id} is not in the evidence archive yet: session "
                           f"{sid} holds the turn but memory has not written it; run "
                           f"`scriptorium memory write {sid}` (add --force to write it now)",
                           code=ReasonCode.SOURCE_NOT_WRITTEN, details=data)
        return data

    # -- upkeep --------------------------------------------------------------------------

    def migrate(self, progress: Progress | None = None) -> "MigrationReport":
        """Move an old position-cursor installation onto node marks (safe to rerun)."""
        from .migrate import migrate

        return migrate(self, progress=progress)

    def backfill(self, *, budget_tokens: int | None = None,
                 progress: Progress | None = None) -> "BackfillReport":
        """Write archived trusted sources no topic cites, with this memory's writer, in
        batches of ``budget_tokens`` (default 16,000)."""
        from .backfill import DEFAULT_BUDGET_TOKENS, backfill, check_budget

        budget = check_budget(DEFAULT_BUDGET_TOKENS if budget_tokens is None else budget_tokens)
        return backfill(self.workspace, self.writer, budget_tokens=budget, progress=progress)

    def reorganize(self, organizer: str = "embedded") -> "ReorganizeReport":
        """Merge paragraphs that say the same thing (``embedded`` or ``llm``)."""
        from .reorganize import reorganize

        return reorganize(self.workspace, writer_kind=organizer, settings=self.settings,
                          store=self.store)

    def verify(self, session_ids: Sequence[str] = (), *,
               repair: bool = False) -> "VerifyReport":
        """Check that marks form a prefix on every live branch; ``repair`` takes back the
        marks that strand turns."""
        from .verify import verify

        return verify(self, list(session_ids) or None, repair=repair)

    def watcher(self) -> "IdleWatcher | PgWatcher":
        """The idle watcher over this memory (settings: ``watcher_*``). On a PostgreSQL home
        it is a queue worker whose state is in the home (see :mod:`.pg_watch`)."""
        if not isinstance(self.home, Path):
            from .pg_watch import PgWatcher

            return PgWatcher(self)
        from .watcher import IdleWatcher

        return IdleWatcher(self)

    def watch_once(self, now: float | None = None, *,
                   retry_failed: bool = False) -> "PassReport":
        """One polling pass of the watcher over every session (``retry_failed``: also those
        whose last write failed for good); on a PostgreSQL home, every job due now."""
        return self.watcher().run_once(now, retry_failed=retry_failed)

    def work(self, *, stop: threading.Event | None = None, until_idle: bool = False,
             drain: bool = False, idle_seconds: float | None = None,
             interval_seconds: float | None = None,
             on_report: Callable[["JobReport"], None] | None = None,
             on_ready: Callable[[], None] | None = None,
             wake_fds: Sequence[int] = ()) -> "WorkSummary":
        """Run a queue worker of this PostgreSQL home (``memory work``) until ``stop`` is set
        (``until_idle``: or nothing is owed); ``drain``: every owed job is due now. See
        :func:`scriptorium.memory.work.make_worker`; a directory home has none (use watch)."""
        from .work import make_worker

        worker = make_worker(self, idle_seconds=idle_seconds,
                             interval_seconds=interval_seconds, drain=drain)
        try:
            return worker.run(stop, until_idle=until_idle, wake_fds=wake_fds,
                              on_report=on_report, on_ready=on_ready)
        finally:
            worker.close()

    def watch(self, *, stop: threading.Event | None = None, max_passes: int | None = None,
              on_report: Callable[["PassReport"], None] | None = None,
              wake_fds: Sequence[int] = ()) -> None:
        """Run the watcher (told by the head-move log, polling as a safety net) until
        ``stop`` is set or ``max_passes`` ran; see :meth:`IdleWatcher.run_forever` (on a
        PostgreSQL home :meth:`PgWatcher.run_forever`: a queue worker, ``max_passes`` jobs)."""
        self.watcher().run_forever(stop, on_report, max_passes, wake_fds)

