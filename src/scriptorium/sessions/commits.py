"""The per-turn git history of a session: lazy init, one commit per completed turn, and the
log. A commit stages what the index saw change rather than the whole tree, so its cost does
not include a stat of every node file; it stores the big ``history/`` tree object without
deflating it, and the history is packed every PACK_EVERY commits (deltas make the stored trees
small again)."""

from __future__ import annotations


from ..errors import InvalidInput, ScriptoriumError
from ..fsutil import atomic_write_text
from ..gitrepo import GitRepo, PackPolicy
from .index import SessionIndex
from .node import Node
from .nodefiles import LOCK_NAME

from .ops import Op

GITIGNORE = f"{LOCK_NAME}\n*.tmp\nlarge_nodes/\nfile_backups/\n"
FULL_STAGE_EVERY = 64  # commits between two full ``git add -A`` (amortised)
PACK_EVERY = 32  # commits between two packings of the session's history (amortised)


class CommitOps:
    """Mixed into SessionStore; the commit runs inside the caller's locked operation."""

    def commit_turn(self, sid: str, message: str) -> str | None:
        """Commit everything in the session dir (lazy git init); None if nothing changed."""
        if not isinstance(message, str) or not message.strip():
            raise InvalidInput(f"session {sid}: commit message must be a non-empty string")
        with self._writing(sid) as op:
            return self._commit(op, message)

    def _commit(self, op: Op, message: str, *,
                soft: bool = False) -> str | None:
        """Commit the session dir. ``soft``: the change is already durable, so a failure is
        recorded in ``op.warnings`` (the history is behind, nothing is lost) instead of
        raised, and the next commit takes the change in.

        Most commits stage only the files the index saw change, so a turn's commit does not
        stat every node file; everything (``add -A``) is staged by the first commit of this
        process (changes made before it started), every FULL_STAGE_EVERY commits after (files
        a reference writer keeps outside history/) and after a failed commit."""
        idx = op.idx
        sdir = idx.dir
        try:
            if not (sdir / ".gitignore").exists():
                atomic_write_text(sdir / ".gitignore", GITIGNORE, mode=0o644)
                idx.uncommitted.add(".gitignore")
            repo = GitRepo(sdir)
            created = repo.ensure(initial_message="session init", include_existing=False)
            if created or idx.stage_all or idx.commits_since_full >= FULL_STAGE_EVERY:
                sha = repo.commit_all(message)
                idx.commits_since_full = 0
            else:
                sha = repo.commit_paths(message, sorted(idx.uncommitted), tree_compression=0)
                idx.commits_since_full += 1
        except ScriptoriumError as exc:
            idx.stage_all = True  # the next commit takes everything in
            if not soft:
                raise
            op.warnings.append(f"session {op.sid}: stored, but history was not committed "
                               f"({exc.code}: {exc})")
            return None
        idx.uncommitted.clear()
        idx.stage_all = False
        if sha is not None:
            try:
                self._maybe_pack(repo)
            except (ScriptoriumError, OSError) as exc:  # the commit stands; a later one packs
                op.warnings.append(f"session {op.sid}: committed, but the history was not "
                                   f"packed ({exc})")
        return sha

    @staticmethod
    def _maybe_pack(repo: GitRepo) -> None:
        """Pack the loose objects every PACK_EVERY commits (the policy memory's history
        shares, :meth:`GitRepo.pack_if_due`). A turn's commit writes the whole ``history/``
        tree anew (the flat layout of DESIGN §3), stored loose and undeflated: at 10,000
        nodes about 0.5 MB a commit, which a packing turns into deltas of a few hundred
        bytes. So the loose size is not a trigger here (it would pack every commit of a big
        session), and the packing is the quick one."""
        repo.pack_if_due(PackPolicy(every=PACK_EVERY, quick=True))

    def _maybe_commit(self, op: Op, node: Node,
                      commit: bool | None) -> str | None:
        if commit is False or (commit is None and not self.git):
            return None
        user = self._turn_user(op.idx, node)
        if commit is None and user is None:
            return None
        text = (user or node).text().strip()
        first = text.splitlines()[0][:60] if text else node.id
        return self._commit(op, f"turn: {first}", soft=True)

    @staticmethod
    def _turn_user(idx: SessionIndex, node: Node) -> Node | None:
        """The user turn ``node`` completes, if ``node`` is a chain-level reply."""
        if (node.role != "llm" or not node.chain_level or node.is_summary or node.is_runtime
                or not node.predecessor):
            return None
        user = idx.nodes.get(node.predecessor)
        if user is None or user.role != "user" or user.is_root:
            return None
        return user

    def git_log(self, sid: str, limit: int = 50) -> list[dict]:
        """The session's per-turn commits, newest first (empty before the first commit)."""
        return GitRepo(self._require(sid)).log(limit)
