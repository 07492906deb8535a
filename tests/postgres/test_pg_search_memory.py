"""Search on a PostgreSQL home through Memory: the workspace's install indexes its rows in
the install's own transaction (the workspace's transaction hook); hits and order are the
directory home's. Runs once the PostgreSQL memory workspace is in the build."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("scriptorium.memory.pg_workspace", reason="the PostgreSQL memory "
                    "workspace (branch pg-memory) is not in this build yet")
from pgmemkit import Homes  # noqa: E402

from scriptorium.memory.provenance import BranchReader  # noqa: E402
from scriptorium.memory.search import search  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))
from branch_support import SID, falcon  # noqa: E402

TURNS = [("user", "We are planning the Falcon offsite in Porto."),
         ("assistant", "Noted: the Falcon offsite in Porto."),
         ("user", "The Falcon budget is 160 thousand euros."),
         ("assistant", "Noted."),
         ("user", "Actually make the Falcon budget 150 thousand euros."),
         ("user", "Casa Verde should cater the Falcon dinner.")]


def written(kind, tmp_path, pg_url=None):
    homes = Homes(kind, tmp_path / kind, pg_url)
    mem = homes.open()
    mem.store.create_session("falcon", title="Falcon offsite")
    for i, (role, text) in enumerate(TURNS):
        mem.store.append_message("falcon", {"id": f"n{i}", "role": role, "content": text})
    assert mem.write_session("falcon").failure is None
    return homes, mem


def view(hits):
    return [(h.path, h.line, h.claim, h.text, h.sources, round(h.score, 4)) for h in hits]


def test_memory_on_a_postgresql_home_searches_as_the_directory_home_does(tmp_path, pg_url):
    dhomes, dmem = written("directory", tmp_path)
    phomes, pmem = written("postgres", tmp_path, pg_url)
    try:
        for q in ["Falcon budget euros", "caterer dinner", "Porto offsite"]:
            for kw in ({}, {"include_sources": True}, {"session": "falcon"}):
                ours, theirs = pmem.search(q, top_k=5, **kw), dmem.search(q, top_k=5, **kw)
                assert ours and [(p, l, c, t, r) for p, l, c, t, _, r in view(ours)] == \
                    [(p, l, c, t, r) for p, l, c, t, _, r in view(theirs)]
        index = pmem.workspace.pg_search_index
        walks = index.walks
        pmem.store.append_message("falcon", {"id": "n9", "role": "user",
                                             "content": "The Falcon hotel is Hotel Douro."})
        assert pmem.write_session("falcon").failure is None
        assert "Douro" in pmem.search("Falcon hotel")[0].text
        assert index.walks == walks  # indexed inside the install's own transaction
        other = phomes.open()  # another process's view of the same home
        assert "Douro" in other.search("Falcon hotel Douro")[0].text
    finally:
        phomes.close()
        dhomes.close()


def test_a_reader_asking_for_its_own_conversation_gets_only_what_cites_it_on_both_paths(
        tmp_path, pg_url):
    """``own_session`` (memory context's first query) on a PostgreSQL home: with the
    session's row read in the ranking's round trip (a reader made after the ranking) and
    with a reader given, only claims citing the reader's conversation, as the directory
    home answers."""
    query = "Falcon dinner wine cellar caterer"
    answers, opened = {}, []
    for kind, url in (("directory", None), ("postgres", pg_url)):
        homes = Homes(kind, tmp_path / kind, url)
        opened.append(homes)
        mem = falcon(homes)
        mem.store.create_session("gull", title="Gull offsite")
        for node, role, text in (("g1", "user", "The Falcon dinner wine is from the Gull cellar."),
                                 ("g2", "assistant", "Noted: the Gull cellar has the wine.")):
            mem.store.append_message("gull", {"id": node, "role": role, "content": text})
        assert mem.write(["gull"], force=True)[0].failure is None
        assert any("Gull" in h.text for h in mem.search(query, top_k=8))
        answers[kind] = [search(mem.workspace, query, top_k=8, own_session=True, **kw)
                         for kw in (dict(session=SID, store=mem.store),
                                    dict(reader=BranchReader(mem.store, SID, None)))]
    try:
        theirs = answers["directory"][0]
        assert theirs and not any("Gull" in h.text for h in theirs)
        for ours in answers["postgres"]:
            assert [(h.path, h.text, h.provenance) for h in ours] == \
                [(h.path, h.text, h.provenance) for h in theirs]
    finally:
        for homes in opened:
            homes.close()
