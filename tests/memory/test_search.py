"""Search: BM25 over topic claims (and archived turns), filters, and following a hit back,
on both kinds of home (a PostgreSQL home ranks with its own full-text search)."""

from __future__ import annotations

import json
import os

import pytest

from scriptorium.errors import InvalidInput
from scriptorium.memory.citations import block_sources
from scriptorium.memory.search import SearchIndex, follow, search
from scriptorium.memory.sources import SourceIdError
from scriptorium.memory.workspace import Workspace

from search_support import archive, open_ws, write_offsite, write_paragraphs

TS = "2026-08-01T10:00:00+00:00"


@pytest.fixture
def ws(homes) -> Workspace:
    """The memory workspace of an empty home of either kind, its search index attached."""
    return homes.open().workspace


@pytest.fixture
def offsite(ws: Workspace) -> Workspace:
    """Two topics: an offsite plan (two claims in one block) and production notes."""
    return write_offsite(ws)


def texts(hits) -> list[str]:
    return [h.text for h in hits]


# -- what a hit says -------------------------------------------------------------------------


def test_a_hit_names_its_block_path_score_text_and_the_sources_the_claim_cites(offsite):
    hits = search(offsite, "budget euros")
    top = hits[0]
    assert top.text == "The budget is fifty thousand euros for twelve people."
    assert top.path == "topics/projects/lisbon-offsite.md"
    assert top.kind == "claim" and top.score > 0
    doc = offsite.read_topic(top.path)
    block = doc.block(top.block_id)
    assert block is not None and top.block_id == block.id
    assert top.sources == ["openprogram/offsite/o2"]
    assert set(top.sources) <= set(block_sources(offsite, doc, block))
    assert top.dates == ["2026-05-03"] and top.headings == ["Lisbon offsite", "Plan"]
    as_json = top.to_dict()
    assert {"block_id", "path", "score", "text", "sources"} <= set(as_json)
    json.dumps(as_json)


def test_each_claim_of_a_block_is_its_own_result_with_its_own_citation(offsite):
    hits = search(offsite, "Lisbon", top_k=10)
    lisbon = [h for h in hits if "Lisbon in the first week" in h.text]
    assert len(lisbon) == 1 and lisbon[0].claim == 0
    assert lisbon[0].sources == ["openprogram/offsite/o1"]
    budget = search(offsite, "fifty thousand")[0]
    assert budget.block_id == lisbon[0].block_id and budget.claim == 1


def test_words_of_the_topic_path_and_headings_find_its_claims(offsite):
    assert {h.path for h in search(offsite, "infrastructure", top_k=10)} == {
        "topics/infrastructure/production.md"}
    travel = search(offsite, "travel")
    assert texts(travel) == ["Flights for twelve people are booked."]


def test_other_word_forms_match_through_the_porter_stemmer(offsite):
    assert "Flights for twelve people are booked." in texts(search(offsite, "booking flight"))
    assert "Deploys happen on Tuesdays after 14:00 UTC only." in texts(
        search(offsite, "deploying"))


def test_the_best_match_ranks_first_and_top_k_limits_the_hits(offsite):
    hits = search(offsite, "twelve people booked flights", top_k=10)
    assert hits[0].text == "Flights for twelve people are booked."
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(search(offsite, "twelve people booked flights", top_k=1)) == 1


def test_a_query_matching_nothing_returns_no_hits(offsite):
    assert search(offsite, "zebra xylophone") == []


def test_cjk_text_is_found_by_a_word_inside_a_sentence(ws):
    ids = archive(ws, [("s", "c1", "user", "我喜欢喝咖啡，不喜欢喝茶", TS),
                       ("s", "c2", "user", "明天去北京开会", TS)])
    write_paragraphs(ws, "topics/喜好.md", [
        [("用户喜欢喝咖啡，不喜欢喝茶。", [ids[0]], "2026-08-01")],
        [("用户明天去北京开会。", [ids[1]], "2026-08-01")]], heading="喜好")
    assert texts(search(ws, "咖啡")) == ["用户喜欢喝咖啡，不喜欢喝茶。"]
    assert texts(search(ws, "北京")) == ["用户明天去北京开会。"]
    assert texts(search(ws, "开会"))[0] == "用户明天去北京开会。"


# -- filters ---------------------------------------------------------------------------------


def test_a_path_prefix_keeps_hits_under_that_folder_or_file(offsite):
    everything = {h.path for h in search(offsite, "twelve production", top_k=20)}
    assert len(everything) == 2
    for prefix in ("projects", "topics/projects", "projects/", "./projects",
                   "projects/lisbon-offsite.md", "projects/lisbon-offsite"):
        got = {h.path for h in search(offsite, "twelve production", top_k=20,
                                      path_prefix=prefix)}
        assert got == {"topics/projects/lisbon-offsite.md"}, prefix
    # A prefix is a path, not a string prefix: "proj" names no folder.
    assert search(offsite, "twelve production", path_prefix="proj") == []


@pytest.mark.parametrize("prefix", ["../secrets", "projects/../../x", "/etc", "", "a\\b"])
def test_a_path_prefix_that_could_leave_the_workspace_is_refused(offsite, prefix):
    with pytest.raises(InvalidInput):
        search(offsite, "twelve", path_prefix=prefix)


def test_a_date_window_keeps_claims_whose_evidence_dates_overlap_it(offsite):
    def window(**kw) -> set[str]:
        return set(texts(search(offsite, "twelve lisbon deploys production", top_k=20, **kw)))

    may = window(since="2026-05", until="2026-05")
    assert may == {"The team offsite is in Lisbon in the first week of May.",
                   "The budget is fifty thousand euros for twelve people."}
    # A month-level date (2026-05) overlaps a day inside that month.
    assert window(since="2026-05-20", until="2026-05-20") == {
        "The team offsite is in Lisbon in the first week of May."}
    assert window(until="2025") == {"Deploys happen on Tuesdays after 14:00 UTC only."}
    assert window(since="2026-06-10") == {
        "Flights for twelve people are booked.",
        "Production runs PostgreSQL 16 behind pgbouncer on port 6432."}
    assert window(since="2027") == set()


@pytest.mark.parametrize("kw", [{"since": "2026-13"}, {"until": "2026-02-30"},
                                {"since": "yesterday"}, {"since": "2026-08", "until": "2026-07"}])
def test_an_invalid_date_or_an_empty_window_is_refused(offsite, kw):
    with pytest.raises(InvalidInput):
        search(offsite, "twelve", **kw)


def test_a_speaker_filter_on_topic_claims_keeps_only_claims_citing_that_speakers_turns(offsite):
    hits = search(offsite, "twelve", top_k=10)
    assert hits
    kept = search(offsite, "twelve", speaker="user", top_k=10)
    assert all(h.kind == "claim" for h in kept)
    assert search(offsite, "twelve", speaker="nobody-at-all", top_k=10) == []


@pytest.mark.parametrize("top_k", [0, -1, 1001, True, "5"])
def test_a_top_k_out_of_range_is_refused(offsite, top_k):
    with pytest.raises(InvalidInput):
        search(offsite, "twelve", top_k=top_k)


@pytest.mark.parametrize("query", ["", "   ", "?!…", "--"])
def test_a_query_without_words_is_refused(offsite, query):
    with pytest.raises(InvalidInput):
        search(offsite, query)


def test_an_unknown_method_is_refused(offsite):
    with pytest.raises(InvalidInput):
        search(offsite, "twelve", method="grep")


# -- archived sources ------------------------------------------------------------------------


def test_archived_turns_are_searched_only_on_request(offsite):
    assert all(h.kind == "claim" for h in search(offsite, "pgbouncer", top_k=10))
    hits = search(offsite, "pgbouncer", top_k=10, include_sources=True)
    turn = [h for h in hits if h.kind == "source"]
    assert len(turn) == 1
    assert turn[0].source_id == "openprogram/deploy/d1" == turn[0].sources[0]
    assert turn[0].path == "sources/openprogram/_v2/deploy.md"
    assert turn[0].text == "Production runs PostgreSQL 16 behind pgbouncer"
    assert turn[0].block_id is None and turn[0].dates == ["2026-08-01"]


def test_the_speaker_filter_matches_a_turns_speaker_id_display_name_or_label(ws):
    archive(ws, [("chat", "m1", "user", "Let us order pizza tonight", TS),
                 ("chat", "m2", "user", "Pizza sounds good to me", TS),
                 ("chat", "m3", "assistant", "I can find a pizza place", TS)],
            speaker={"m1": ("u-ana", "Ana"), "m2": ("u-bo", "Bo")})
    by = lambda s: {h.source_id for h in search(ws, "pizza", include_sources=True,  # noqa: E731
                                                 speaker=s, top_k=10)}
    assert by("ana") == by("U-ANA") == {"openprogram/chat/m1"}
    assert by("Bo") == {"openprogram/chat/m2"}
    assert by("assistant") == {"openprogram/chat/m3"}
    assert by("nobody") == set()


def test_source_hits_respect_the_path_prefix_and_date_window(offsite):
    hits = search(offsite, "pgbouncer tuesdays lisbon", include_sources=True, top_k=20,
                  path_prefix="sources/openprogram/deploy.md", since="2026")
    assert [h.source_id for h in hits] == ["openprogram/deploy/d1"]


# -- following a hit back to its turn --------------------------------------------------------


def test_a_hit_is_followed_to_the_session_turn_it_came_from(homes):
    mem = homes.open(trigger_tokens=10_000)
    mem.store.create_session("trip", title="Trip planning")
    mem.store.append_message("trip", {"id": "t0", "role": "user",
                                      "content": "I prefer aisle seats on long flights."})
    mem.store.append_message("trip", {"id": "t1", "role": "assistant", "predecessor": "t0",
                                      "content": "Noted: aisle seats from now on."})
    assert mem.write_session("trip").failure is None
    hits = search(mem.workspace, "aisle seats")
    assert hits and hits[0].sources
    turn = follow(mem.workspace, hits[0].sources[0])
    assert turn["session_id"] == "trip" and turn["archived"] is True
    node = mem.store.get_node("trip", turn["node_id"])
    assert node.output == turn["content"]
    assert "aisle" in turn["content"]


def test_following_an_id_the_archive_lacks_still_names_session_and_node(ws):
    got = follow(ws, "openprogram/s-1/n/with/slash")
    assert (got["session_id"], got["node_id"], got["archived"]) == ("s-1", "n/with/slash", False)
    other = follow(ws, "claude-code/abc/def")
    assert other["session_id"] is None and other["provider"] == "claude-code"


@pytest.mark.parametrize("bad", ["", "no-slashes", "a//b", "../x/y"])
def test_following_a_malformed_source_id_is_refused(ws, bad):
    with pytest.raises(SourceIdError):
        follow(ws, bad)


# -- compatibility ---------------------------------------------------------------------------


def test_the_reference_systems_memory_is_searchable_and_followable(written_home):
    ws = Workspace.open(written_home / "memory")
    hits = search(ws, "budget per person")
    top = hits[0]
    assert top.block_id == "ec7521e7" and top.claim == 1
    assert top.text == "The budget is fifty thousand euros for twelve people."
    assert len(top.sources) == 2 and all(s.startswith("openprogram/offsite/") for s in top.sources)
    assert all(follow(ws, s)["session_id"] == "offsite" for s in top.sources)
    port = search(ws, "pgbouncer port", path_prefix="infrastructure")
    assert port[0].block_id == "74c5db67"
    assert search(ws, "deploys", since="2026-08-01", until="2026-08-01")[0].block_id == "ef3d9036"


def test_searching_does_not_change_the_workspace_revision(offsite):
    before = offsite.revision()
    search(offsite, "twelve", include_sources=True)
    assert offsite.revision() == before


def test_a_directory_homes_index_is_a_file_of_its_runtime_dir(tmp_path):
    ws = write_offsite(open_ws(tmp_path / "memory"))
    search(ws, "twelve", include_sources=True)
    assert SearchIndex.of(ws).path.parent == ws.runtime_dir
    assert os.path.exists(ws.runtime_dir / "search.sqlite")
