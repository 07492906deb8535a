"""An install ranks the blocks it creates in runtime.json by splicing the file's bytes: the
result is what the full parse (load, rank, dump) gives, for any file, byte for byte when the
file is in the form we write."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from scriptorium.memory import runtime_state
from scriptorium.memory.runtime_state import RuntimeState, parse_runtime, with_created, \
    with_created_parsed

PLAIN = st.text("abcdef0123456789-_", min_size=1, max_size=8)
ODD = st.text(min_size=0, max_size=6)  # quotes, backslashes, newlines, non-ASCII, ...
IDS = st.one_of(PLAIN, PLAIN, PLAIN, PLAIN, ODD)


@st.composite
def homes(draw) -> tuple[bytes, bool]:
    """A runtime.json: ours (as installs leave it, ranks rising, or any ranks), the same
    object on one line, with legacy cursors, or broken; and whether it is in our form."""
    keys = draw(st.lists(st.one_of(PLAIN, ODD) if draw(st.booleans()) else PLAIN, unique=True,
                         max_size=12))
    if draw(st.integers(0, 3)):
        ranks = list(range(draw(st.integers(0, 3)), 10**6))[:len(keys)]
    else:
        ranks = draw(st.lists(st.integers(0, 10**4), min_size=len(keys), max_size=len(keys)))
    state = RuntimeState(dict(zip(keys, ranks)), draw(st.integers(0, 99)),
                         draw(st.integers(0, 99)), draw(st.integers(0, 10**6)),
                         draw(st.one_of(st.none(), st.text(max_size=30))))
    form = draw(st.sampled_from(["ours"] * 4 + ["one-line", "cursors", "broken"]))
    if form == "one-line":
        return (json.dumps(state.to_obj(), ensure_ascii=False) + "\n").encode(), False
    if form == "cursors":
        state.cursors = {"s-1": {"message_id": "n1", "ordinal": 1}}
    data = state.dumps().encode("utf-8")
    if form == "broken":
        return data[:draw(st.integers(0, len(data)))], False
    return data, form == "ours"


@settings(max_examples=300, deadline=None)
@given(homes(), st.data())
def test_ranking_created_blocks_gives_what_the_full_parse_gives(home, data):
    before, ours = home
    known = list(parse_runtime(before).creation_order)
    new = PLAIN if data.draw(st.booleans()) else IDS
    created = data.draw(st.lists(st.one_of(new, st.sampled_from(known)) if known else new,
                                 min_size=1, max_size=6))
    spliced = with_created(before, created)
    expected = with_created_parsed(before, created)
    got, want = parse_runtime(spliced), parse_runtime(expected)
    assert got == want and list(got.creation_order) == list(want.creation_order)
    if ours:
        assert spliced == expected


def refuse_whole_parse(*args, **kwargs):
    raise AssertionError("the file in our form was parsed whole")


def test_a_file_in_our_form_is_spliced_without_being_parsed(monkeypatch):
    state = RuntimeState({f"{i:08x}": i for i in range(500)}, 1, 2, 3, "2026-08-10T03:00:04+00:00")
    data = state.dumps().encode()
    monkeypatch.setattr(runtime_state.json, "loads", refuse_whole_parse)
    out = with_created(data, ["0000abcd", "00000001", "0000abcd", "0000abce"])
    monkeypatch.undo()
    state.creation_order.update({"0000abcd": 500, "0000abce": 501})
    assert out == state.dumps().encode()


def test_a_missing_file_ranks_from_zero():
    assert parse_runtime(with_created(None, ["a", "b", "a"])).creation_order == {"a": 0, "b": 1}


def test_splicing_holds_no_more_than_the_new_file():
    """The splice's heap peak is the file it returns (plus a constant), never a structure per
    entry: no dict, no list of ranks, no regex backtracking stack over the order."""
    import tracemalloc

    data = RuntimeState({f"{i:08x}": i for i in range(20000)}).dumps().encode()
    tracemalloc.start()
    try:
        out = with_created(data, ["0000abcd-new"])
        top = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(out) > len(data) and top < len(data) + 64 * 1024
