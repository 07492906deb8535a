"""Branch-aware retrieval: a reader at (session, tip) sees which claims hold on its line."""

from __future__ import annotations

import json

import pytest

from scriptorium.errors import InvalidInput, NotFound
from scriptorium.memory.provenance import BranchUnavailable, Provenance
from scriptorium.memory.search import search
from scriptorium.memory.search.query import Hit, prefer_line

from storekit import damage
from testkit import Cli

from branch_support import SID, falcon, say


@pytest.fixture(scope="module")
def shared(shared_homes):
    """The falcon conversation on each kind of home (the tests only read it)."""
    return falcon(shared_homes)


@pytest.fixture
def mem(homes):
    """The falcon conversation on a fresh home of each kind (for tests that add to it)."""
    return falcon(homes)


def top(mem, query, head=None, **kw):
    return mem.search(query, session=SID, head=head, top_k=5, **kw)


def first_value(hits, *values):
    """The first value any hit states (the user's question states none)."""
    return next(v for h in hits for v in values if v in h.text)


def test_a_reader_on_each_branch_finds_its_own_value_first(shared):
    mem = shared
    assert "150" in top(mem, "Falcon budget euros")[0].text  # head line: the edited budget
    assert "160" in top(mem, "Falcon budget euros", head="a2")[0].text
    caterers = ("Tasca Azul", "Casa Verde")
    assert first_value(top(mem, "caterer Falcon dinner"), *caterers) == "Tasca Azul"
    assert first_value(top(mem, "caterer Falcon dinner", head="a3"), *caterers) == "Casa Verde"
    blind = search(mem.workspace, "caterer Falcon dinner")
    assert first_value(blind, *caterers) == "Casa Verde"  # branch-blind: one of them, always


def test_every_hit_carries_its_branch_and_an_alternative_names_its_fork_point(shared):
    mem = shared
    hits = top(mem, "Falcon budget euros", head="a2")
    assert all(h.branch in ("on_line", "alternative", "elsewhere") for h in hits)
    alt = next(h for h in hits if "150" in h.text)
    data = alt.to_dict()
    assert data["branch"] == "alternative" and data["fork_point"] == "a1"
    assert data["branch_note"] == "on the branch that edited u2 (fork point a1)"
    on = next(h for h in hits if "160" in h.text)
    assert on.to_dict()["branch"] == "on_line" and "fork_point" not in on.to_dict()


def test_the_original_reply_of_a_retry_is_an_alternative_named_for_the_retry(shared):
    mem = shared
    old = next(h for h in top(mem, "caterer Falcon dinner") if "Casa Verde" in h.text)
    assert old.branch == "alternative"
    assert old.provenance.note == \
        "on the original branch, before a3 was retried as a3r (fork point u3)"


def test_a_sub_agents_work_is_on_the_line_it_was_spawned_from_only(shared):
    mem = shared
    hotel = lambda head: next(h for h in top(mem, "hotel rooms Douro", head=head)  # noqa: E731
                              if "Douro" in h.text)
    assert hotel(None).branch == "on_line"
    assert hotel("a2").branch == "alternative"
    assert hotel("a2").provenance.fork_point == "a1"


def test_claims_from_another_conversation_are_elsewhere(mem):
    mem.store.create_session("other", title="Falcon review")
    mem.store.append_message("other", {"role": "user",
                                       "content": "The Falcon budget review is on Friday."})
    mem.write_session("other")
    hits = top(mem, "Falcon budget review Friday")
    assert hits[0].sources[0].startswith("openprogram/other/") and hits[0].branch == "elsewhere"


def test_without_a_session_search_is_unchanged(shared):
    mem = shared
    blind = search(mem.workspace, "Falcon budget euros", top_k=5)
    assert all(h.provenance is None and "branch" not in h.to_dict() for h in blind)
    assert [h.to_dict() for h in blind] == [h.to_dict() for h in mem.search(
        "Falcon budget euros", top_k=5)]


def _hit(text, score, branch):
    hit = Hit(block_id="b" + text, path="topics/x.md", score=score, text=text, sources=[])
    hit.provenance = Provenance(branch)
    return hit


class _Fixed:
    """A reader whose answers are given (ranking alone is under test)."""

    def __init__(self, hits):
        self.classes = [h.provenance for h in hits]

    def classify_many(self, _sources):
        return self.classes


def test_alternatives_rank_below_on_line_hits_of_similar_relevance_but_not_far_better_ones():
    hits = [_hit("alt", 1.0, "alternative"), _hit("on", 0.8, "on_line"),
            _hit("else", 0.7, "elsewhere")]
    assert [h.text for h in prefer_line(_Fixed(hits), hits)] == ["on", "else", "alt"]
    hits = [_hit("alt", 3.0, "alternative"), _hit("on", 1.0, "on_line")]
    assert [h.text for h in prefer_line(_Fixed(hits), hits)] == ["alt", "on"]


def test_unknown_session_or_tip_is_not_found_and_head_alone_is_bad_input(shared):
    mem = shared
    with pytest.raises(NotFound):
        mem.search("budget", session="nope")
    with pytest.raises(NotFound):
        mem.search("budget", session=SID, head="zz")
    with pytest.raises(InvalidInput):
        mem.search("budget", head="a2")


def test_an_unreadable_dag_is_an_error_for_that_session_not_a_branch_blind_answer(mem):
    damage(mem.store, SID, "a1", predecessor="gone")
    with pytest.raises(BranchUnavailable, match=f"session {SID}"):
        mem.search("Falcon budget", session=SID)
    assert search(mem.workspace, "Falcon budget")  # branch-blind search still works


def test_cli_search_with_session_prints_branch_in_json_and_text(shared):
    cli = Cli(shared.home)
    data = cli.json("memory", "search", "Falcon budget euros", "--session", SID, "--head", "a2")
    assert data["hits"] and all("branch" in h for h in data["hits"])
    assert data["hits"][0]["branch"] == "on_line" and "160" in data["hits"][0]["text"]
    text = cli("memory", "search", "Falcon budget euros", "--session", SID, "--head", "a2")
    assert "(on_line)" in text.output
    assert "(alternative: on the branch that edited u2 (fork point a1))" in text.output
    plain = cli.json("memory", "search", "Falcon budget euros")
    assert all("branch" not in h for h in plain["hits"])


@pytest.mark.parametrize("args, code, words", [
    (["--session", "nope"], 3, "nope"),
    (["--session", SID, "--head", "zz"], 3, "zz"),
    (["--head", "a2"], 2, "--session"),
])
def test_cli_bad_session_or_tip_is_one_line_error(shared, args, code, words):
    cli = Cli(shared.home)
    result = cli("memory", "search", "budget", *args)
    assert result.exit_code == code
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_cli_broken_dag_exits_4_naming_the_session(mem):
    cli = Cli(mem.home)
    damage(mem.store, SID, "a1", predecessor="gone")
    result = cli("memory", "search", "budget", "--session", SID, "--json")
    assert result.exit_code == 4
    assert "branch classes unavailable" in result.stderr and SID in result.stderr
    assert json.loads(cli("memory", "search", "budget", "--json").stdout)["hits"]


def test_a_new_turn_on_the_line_is_seen_by_the_next_query(mem):
    say(mem, "u4", "user", "The Falcon budget is now 140 thousand euros.")
    say(mem, "a4", "assistant", "Noted: 140 thousand euros for Falcon.")
    mem.write_session(SID)
    hits = top(mem, "Falcon budget thousand euros")
    assert {h.branch for h in hits if "140" in h.text} == {"on_line"}
    assert {h.branch for h in hits if "160" in h.text} <= {"alternative"}


@pytest.mark.parametrize("kind, of, opening, fork, phrase", [
    ("edit", "u3", "u3e", "a2", "on the branch that edited u3 (fork point a2)"),
    ("retry", "a3", "a3r", "u3", "on the branch that retried a3 (fork point u3)"),
    ("edited", "u3e", "u3", "a2", "on the original branch, before u3 was edited into u3e "
                                  "(fork point a2)"),
    ("spawn", "a9", "sub", "a2", "in a sub-agent spawned from a9 on another branch "
                                 "(fork point a2)"),
    ("rewound", None, "u4", "a3", "on a part of the conversation that was rewound "
                                  "(fork point a3)"),
    ("fork", None, "u1x", None, "on another branch (no shared turn)"),
    ("missing", None, None, None, "on a branch no longer in the session"),
])
def test_an_alternative_is_described_by_how_its_branch_was_opened(kind, of, opening, fork,
                                                                   phrase):
    from scriptorium.memory.provenance import describe
    from scriptorium.sessions.lines import Divergence

    assert describe(Divergence("n", fork, opening, kind, of)) == phrase
