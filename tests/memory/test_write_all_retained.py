"""What a long ``write --all`` leaves behind per install stays bounded (issue 12: its peak RSS
must not grow with the sessions written). Each install ranks its new blocks in runtime.json;
the check that no rank above the last entry's exists once compiled a new pattern per rank,
and ``re`` keeps up to 512 compiled patterns alive. Asserted by what is compiled and what is
ranked, never by timing or RSS."""

from __future__ import annotations

import pytest

from scriptorium.memory import runtime_state
from scriptorium.memory.runtime_state import RuntimeState, parse_runtime, with_created, \
    with_created_parsed


@pytest.fixture(autouse=True)
def fresh_pattern_cache():
    runtime_state._rank_at_least.cache_clear()
    yield
    runtime_state._rank_at_least.cache_clear()


def test_thousands_of_installs_compile_one_rank_pattern_per_hundred_ranks():
    data = None
    installs = 2500
    for i in range(installs):
        data = with_created(data, [f"b{i:05d}"])
    info = runtime_state._rank_at_least.cache_info()
    assert info.misses == installs // 100  # 0-99, 100-199, ..., 2400-2499
    assert info.currsize <= 2
    order = parse_runtime(data).creation_order
    assert order == {f"b{i:05d}": i for i in range(installs)}


@pytest.mark.parametrize("higher", [1501, 1599, 1600, 1999, 5000, 10**6])
def test_a_rank_above_the_last_entrys_is_found_within_or_beyond_its_hundred(higher):
    """The last entry ranks 1500; an earlier entry ranking ``higher`` means the file is not
    in rising order, so the full parse ranks the new block after the highest."""
    order = {f"b{i:05d}": i for i in range(1200, 1500)}
    order["odd"] = higher
    order["last"] = 1500
    data = RuntimeState(order).dumps().encode()
    out = with_created(data, ["new"])
    assert out == with_created_parsed(data, ["new"])
    assert parse_runtime(out).creation_order["new"] == higher + 1


@pytest.mark.parametrize("lower", [0, 999, 1000, 1499, 1500])
def test_ranks_at_or_below_the_last_entrys_keep_the_splice(lower, monkeypatch):
    order = {"early": lower, "last": 1500}
    data = RuntimeState(order).dumps().encode()
    monkeypatch.setattr(runtime_state, "with_created_parsed",
                        lambda *a: pytest.fail("a file in rising order was parsed whole"))
    out = with_created(data, ["new"])
    monkeypatch.undo()
    assert out == with_created_parsed(data, ["new"])
    assert parse_runtime(out).creation_order["new"] == 1501
