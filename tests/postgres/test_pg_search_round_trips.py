"""A warm search on a PostgreSQL home asks the server once: the index state, the home's
install counter, the ranking and the replacing claims supersession needs come back in one
round trip, counted on the wire between the client and a real server (:mod:`wirecount`),
with the same hits as the directory home."""

from __future__ import annotations

import pytest

pytest.importorskip("scriptorium.memory.pg_workspace")
from pgmemkit import Homes  # noqa: E402
from test_pg_search_memory import view, written  # noqa: E402
from wirecount import WireCounter  # noqa: E402
from scriptorium.errors import NotFound  # noqa: E402

QUERY = "Falcon budget euros"
OPTIONS = [{}, {"include_sources": True}, {"path_prefix": "falcon-offsite"},
           {"since": "2020-01", "until": "2099-12"}, {"speaker": "user"},
           {"speaker": "user", "include_sources": True}, {"top_k": 1}]


@pytest.fixture
def wire(pg_url):
    with WireCounter(pg_url) as counter:
        yield counter


def same(ours, theirs) -> bool:
    return [v[:4] + v[5:] for v in view(ours)] == [v[:4] + v[5:] for v in view(theirs)]


def test_a_warm_search_is_one_round_trip_and_finds_what_the_directory_home_finds(
        tmp_path, wire):
    dhomes, dmem = written("directory", tmp_path)
    phomes, pmem = written("postgres", tmp_path, wire.url)
    try:
        for options in OPTIONS:
            pmem.search(QUERY, **options)  # warm: the statements are prepared
            wire.reset()
            hits = pmem.search(QUERY, **options)
            assert wire.round_trips == 1, (options, wire.sent)
            assert hits and same(hits, dmem.search(QUERY, **options)), options
        # a reader on a branch: the session's row comes with the ranking, and the store's
        # graph of it is current, so the reader's line costs no round trip of its own
        for options in ({"session": "falcon"}, {"session": "falcon", "head": "n3"}):
            pmem.search(QUERY, **options)
            wire.reset()
            hits = pmem.search(QUERY, **options)
            assert wire.round_trips == 1, (options, wire.sent)
            assert same(hits, dmem.search(QUERY, **options)), options
            assert {h.provenance.branch for h in hits} >= {"on_line"}
        budget = [h for h in pmem.search(QUERY, top_k=10) if "Falcon budget: 1" in h.text]
        assert "(replaces 160 thousand euros)" in budget[0].text  # the value that holds ranks first...
        replaced = next(h for h in budget if "(superseded: now 150" in h.text)
        assert replaced.score < budget[0].score * 0.5  # ...the one it replaces is demoted
    finally:
        phomes.close()
        dhomes.close()


def test_a_warm_search_sees_another_writers_install_and_is_one_round_trip_again(
        tmp_path, wire):
    phomes, pmem = written("postgres", tmp_path, wire.url)
    try:
        assert not pmem.search("Douro hotel")
        other = Homes("postgres", tmp_path / "other", wire.url).open()  # another process
        other.store.append_message("falcon", {"id": "n9", "role": "user",
                                              "content": "The Falcon hotel is Hotel Douro."})
        assert other.write_session("falcon").failure is None
        other.close()
        assert "Douro" in pmem.search("Douro hotel")[0].text  # the counter moved: caught up
        wire.reset()
        assert "Douro" in pmem.search("Douro hotel")[0].text
        assert wire.round_trips == 1, wire.sent
    finally:
        phomes.close()


def test_a_branch_aware_search_reads_the_line_again_once_another_process_moved_the_session(
        tmp_path, wire):
    phomes, pmem = written("postgres", tmp_path, wire.url)
    try:
        def budget_150():
            return next(h for h in pmem.search(QUERY, top_k=10, session="falcon")
                        if "(replaces 160 thousand euros)" in h.text)

        assert budget_150().provenance.branch == "on_line"
        other = Homes("postgres", tmp_path / "other", wire.url).open()  # another process
        other.store.edit("falcon", "n4", "Keep the Falcon budget at 160.", node_id="r4")
        other.close()
        # the claim cites n4, which the edit took off the reader's line (a stale line
        # would still call it on_line)
        assert budget_150().provenance.branch == "alternative"
        wire.reset()
        assert budget_150().provenance.branch == "alternative"
        assert wire.round_trips == 1, wire.sent
        with pytest.raises(NotFound):
            pmem.search(QUERY, session="no-such-session")
    finally:
        phomes.close()
