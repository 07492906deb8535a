"""Property: the index a cold open builds in its one pass over ``history/`` (ids indexed as
the files are read, id -> file derived only when asked, nothing sorted) answers exactly as
the index built node by node, and as a naive recomputation: which file wins an id claimed
by two files, the seq order with its ties, the first turn and every branch root."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from testkit import examples

from scriptorium.sessions.graph import NodeGraph
from scriptorium.sessions.index import SessionIndex
from scriptorium.sessions.node import ROOT, Node

IDS = ["a", "b", "c", "d", "e", ROOT]

specs = st.lists(st.tuples(st.sampled_from(IDS), st.integers(0, 6),
                           st.sampled_from(["user", "llm", "code"]),
                           st.sampled_from([None, ROOT, "zz", *IDS]), st.booleans()),
                 min_size=1, max_size=14)


def write(hist: Path, spec: list) -> dict[str, Node]:
    """The node files (canonical or reference-style 4-digit names, so two files can share
    an id or a seq), by file name."""
    files: dict[str, Node] = {}
    for nid, seq, role, pred, short in spec:
        node = Node(id=nid, seq=seq, role=role, predecessor=pred if pred != nid else None)
        name = f"{seq:04d}-{role[0]}-{nid}.json" if short else node.filename()
        (hist / name).write_text(json.dumps(node.to_json()))
        files[name] = node
    return files


def naive(files: dict[str, Node]) -> tuple[dict[str, str], list[str], int | None]:
    """id -> winning file (earliest by (seq, name)), the ids in (seq, file) order, and the
    seq of the first turn."""
    winner: dict[str, str] = {}
    for name in sorted(files, key=lambda f: (files[f].seq, f)):
        winner.setdefault(files[name].id, name)
    order = sorted(winner, key=lambda i: (files[winner[i]].seq, winner[i]))
    firsts = [files[winner[i]].seq for i in order if files[winner[i]].conversational
              and files[winner[i]].chain_level and not files[winner[i]].is_root]
    return winner, order, (firsts[0] if firsts else None)


def naive_root(nodes: dict[str, Node], start: str) -> str | None:
    """Where the predecessor line through ``start`` begins; None for a cycle (whose answer
    depends on where a walk entered it)."""
    seen, cur = set(), start
    while True:
        node = nodes.get(cur)
        if node is None:
            return cur
        if cur in seen:
            return None
        seen.add(cur)
        pred = node.predecessor
        if not pred or cur == ROOT or (pred == ROOT and ROOT not in nodes):
            return cur
        cur = pred


@settings(max_examples=examples(60), deadline=None)
@given(specs, st.randoms(use_true_random=False))
def test_a_cold_open_indexes_as_the_node_by_node_index_and_a_naive_recomputation(spec, rnd):
    with tempfile.TemporaryDirectory() as tmp:
        sdir = Path(tmp) / "s"
        (sdir / "history").mkdir(parents=True)
        files = write(sdir / "history", spec)
        cold = SessionIndex("s", sdir)
        cold.refresh()
        names = list(files)
        rnd.shuffle(names)
        warm = NodeGraph("s")
        for i, name in enumerate(names):
            warm._put(name, (i, 0, 0), Node(**{k: getattr(files[name], k)
                                                for k in ("id", "seq", "role", "predecessor")}))
        winner, order, first = naive(files)
        for graph in (cold, warm):
            assert {i: graph.file_name(i) for i in winner} == winner
            assert {i: graph.nodes[i].seq for i in winner} == {
                i: files[w].seq for i, w in winner.items()}
            assert graph.first_conversational_seq() == first
            starts = list(winner)
            rnd.shuffle(starts)  # the memo must not depend on the order roots are asked
            for nid in starts:
                expected = naive_root(graph.nodes, nid)
                if expected is not None:
                    assert graph.branch_root(nid) == expected
            assert [n.id for n in graph.ordered()] == order
            assert graph.file_of == winner
            assert graph.max_seq == max(n.seq for n in files.values())
