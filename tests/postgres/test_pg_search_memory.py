"""Search on a PostgreSQL home through Memory: the workspace's install indexes its rows in
the install's own transaction (the workspace's transaction hook); hits and order are the
directory home's. Runs once the PostgreSQL memory workspace is in the build."""

from __future__ import annotations

import pytest

pytest.importorskip("scriptorium.memory.pg_workspace", reason="the PostgreSQL memory "
                    "workspace (branch pg-memory) is not in this build yet")
from pgmemkit import Homes  # noqa: E402

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
