"""What a home copy (:mod:`scriptorium.home_copy`) asks of a PostgreSQL workspace: take the
source's identity, list every install's files, replay one install. Mixed into
:class:`~.pg_workspace.PgWorkspace`, whose ``pg``, ``_push`` and ``_write_mirror`` it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from .directory import WORKSPACE_ID_RE


class CopyOps:
    """The copy side of a PostgreSQL workspace (see the module docstring)."""

    if TYPE_CHECKING:  # what the workspace it is mixed into provides
        pg: Any
        location: str
        _workspace_id: str | None

        def _push(self, writes: dict[str, bytes | None],
                  revision: dict[str, Any] | None = None,
                  base: dict[str, int] | None = None) -> int: ...

        def _write_mirror(self, rel: str, data: bytes | None) -> None: ...

    def adopt_workspace_id(self, workspace_id: str) -> None:
        """Take ``workspace_id`` as this home's identity (see WorkspaceDir)."""
        if not WORKSPACE_ID_RE.fullmatch(workspace_id):
            raise InvalidInput(f"not a workspace id: {workspace_id!r}")
        with self.pg.connection() as conn:
            conn.execute("INSERT INTO memory_identity (one, workspace_id) VALUES (true, %s) "
                         "ON CONFLICT (one) DO NOTHING", (workspace_id,))
            found = conn.execute("SELECT workspace_id FROM memory_identity").fetchone()[0]
        if found != workspace_id:
            raise InvalidInput(f"{self.location} is the memory of workspace {found}, not "
                               f"{workspace_id}: copy into an empty home")
        self._workspace_id = workspace_id

    def history(self) -> list[tuple[str, dict[str, bytes | None]]]:
        """Every install, oldest first: ``(message, {topic path: bytes or None})``."""
        with self.pg.connection() as conn:
            revisions = conn.execute("SELECT rev, message FROM memory_revisions "
                                     "ORDER BY rev").fetchall()
            files = conn.execute("SELECT rev, path, content FROM memory_file_history "
                                 "ORDER BY rev, path").fetchall()
        by_rev: dict[int, dict[str, bytes | None]] = {rev: {} for rev, _ in revisions}
        for rev, path, content in files:
            by_rev[rev][path] = None if content is None else bytes(content)
        return [(message, by_rev[rev]) for rev, message in revisions if by_rev[rev]]

    def replay(self, message: str, files: dict[str, bytes | None]) -> None:
        """One install of a copied history, as one generation with its revision row."""
        changed = sorted(rel for rel in files if rel.startswith("topics/"))
        self._push(dict(files), {"message": message, "changed": changed, "created": [],
                                 "removed": []} if changed else None)
        for rel, data in files.items():
            self._write_mirror(rel, data)
