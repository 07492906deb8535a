"""Rewriting node metadata: the marker's write path (``merge_node_metadata_batch``) and
rewind's stamps. A batch is one durable step (fsbatch: every new node file written and made
durable together, renamed in batch order, then one directory fsync), so a mark stays on its
node and node files are whole JSON at every instant (DESIGN §3: marks touch nothing else)."""

from __future__ import annotations

import json
import os

from ..errors import InvalidInput
from ..faults import fault_point
from ..fsbatch import atomic_write_many
from ..fsutil import check_name, json_object
from .errors import NodeNotFound
from .node import Node, node_from_json
from .nodefiles import read_node_file

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
        """Merge each patch into its node file as it is on disk (never the cache: a
        reference writer may have rewritten it in place) and replace them all in one durable
        step (fsbatch: new files written, made durable together, renamed, one directory
        fsync): a crash leaves each file whole, old or new, and every mark is durable once
        this returns. ``crash_points``: the marker's named steps ``mark-staged`` (every new
        file durable, nothing renamed), ``mid-mark`` (one file renamed) and
        ``mark-renamed`` (after each rename, for a kill at the N-th)."""
        idx = op.idx
        hist = os.fspath(idx.hist)
        names: list[str] = []
        items: list[tuple[str, bytes]] = []
        nodes: list[Node] = []
        for node_id, patch in patches.items():
            name = idx.file_name(node_id)
            path = os.path.join(hist, name)
            got = read_node_file(path)  # never through a symlink
            if got is None:
                raise NodeNotFound(f"node {node_id} of session {op.sid} vanished ({path})")
            raw = json_object(got[1], f"node file {path}")
            node = node_from_json(raw, path)  # refuses a damaged file; a new object
            md = node.metadata = dict(node.metadata)
            for key, value in patch.items():
                if key == "predecessor":
                    continue
                if value is None:
                    md.pop(key, None)
                else:
                    md[key] = value
            raw["metadata"] = md
            names.append(name)
            items.append((path, json.dumps(raw, ensure_ascii=False).encode("utf-8")))
            nodes.append(node)  # = parse_node(the new bytes)

        def staged_point() -> None:
            if crash_points:
                fault_point("mark-staged")

        def adopt(i: int) -> None:
            idx.record_own_write(names[i], nodes[i], items[i][1])
            if crash_points:
                if i == 0:
                    fault_point("mid-mark")
                fault_point("mark-renamed")

        atomic_write_many(items, before_rename=staged_point, after_rename=adopt)
