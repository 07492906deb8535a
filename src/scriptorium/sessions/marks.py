"""Rewriting node metadata: the marker's write path (``merge_node_metadata_batch``) and
rewind's stamps. A batch is one durable step: every new node file written and fsynced
together, renamed, then one directory fsync (DESIGN §3: marks touch nothing else)."""

from __future__ import annotations

import json

from ..errors import InvalidInput
from ..faults import fault_point
from ..fsutil import atomic_write_many, check_name, json_object
from .errors import NodeNotFound
from .node import Node, node_from_json

from .ops import Op


class MarkOps:
    """Mixed into SessionStore; every public method takes the session lock once."""

    def merge_node_metadata_batch(self, sid: str,
                                  patches: dict[str, dict]) -> None:
        """Merge each patch into its node's metadata, touching nothing else (not meta.json,
        not ``updated_at``, not the index's directory fingerprint: DESIGN §3, a mark never
        records the index as synced, so this process's next read re-lists ``history/``).
        The marker's write path. A ``None`` value removes that key (JSON merge-patch), which
        is how a mark is taken back."""
        if not isinstance(patches, dict):
            raise InvalidInput(f"session {sid}: patches must be a dict of node id to dict")
        for nid, patch in patches.items():
            check_name(nid, "node id")
            if not isinstance(patch, dict):
                raise InvalidInput(f"session {sid}: patch for node {nid} must be a dict")
        if not patches:
            return
        with self._writing(sid) as op:
            missing = [nid for nid in patches if nid not in op.idx.nodes]
            if missing:
                raise NodeNotFound(f"node {missing[0]} not found in session {sid}")
            self._rewrite_metadata_locked(op, patches, crash_points=True)

    def _rewrite_metadata_locked(self, op: Op, patches: dict[str, dict], *,
                                 crash_points: bool = False) -> None:
        """Merge each patch into its node file as it is on disk (never the cache) and
        replace them all in one durable step (temp files fsynced together, renamed, one
        directory fsync): a crash leaves each file old or new, and every mark is durable
        once this returns. ``crash_points``: the marker's named steps ``mark-staged`` (every
        temp file durable, nothing renamed) and ``mid-mark`` (one file renamed)."""
        idx = op.idx
        staged: list[tuple[str, bytes, Node]] = []
        for node_id, patch in patches.items():
            name = idx.file_of[node_id]
            path = idx.hist / name
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise NodeNotFound(
                    f"node {node_id} of session {op.sid} vanished ({path})") from None
            raw = json_object(data, f"node file {path}")
            md = dict(node_from_json(raw, path).metadata)  # refuses a damaged file
            for key, value in patch.items():
                if key == "predecessor":
                    continue
                if value is None:
                    md.pop(key, None)
                else:
                    md[key] = value
            raw["metadata"] = md
            out = json.dumps(raw, ensure_ascii=False).encode("utf-8")
            staged.append((name, out, node_from_json(raw, name)))  # = parse_node(out)

        def staged_point() -> None:
            if crash_points:
                fault_point("mark-staged")

        def adopt(i: int) -> None:
            name, out, node = staged[i]
            idx.record_own_write(name, node, out)
            if i == 0 and crash_points:
                fault_point("mid-mark")

        atomic_write_many([(idx.hist / name, out) for name, out, _ in staged],
                          before_rename=staged_point, after_rename=adopt)
