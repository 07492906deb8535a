"""How the SQLite index stores a document's row: the JSON it writes without the encoder is
the encoder's, for any strings."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from testkit import examples

from scriptorium.memory.search.rows import _json, day_number


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.text(st.sampled_from('ab "\\\x00\x1f\x7fé☕\n\t/,[]'), max_size=6),
                max_size=4) | st.lists(st.text(max_size=8), max_size=3))
def test_lists_of_strings_are_stored_as_json_dumps_writes_them(values):
    assert _json(values) == json.dumps(values, ensure_ascii=False)
    assert json.loads(_json(values)) == values


@settings(max_examples=examples(300), deadline=None)
@given(st.dates(), st.dates())
def test_stored_day_numbers_order_and_span_as_the_dates_do(a, b):
    """A date range is stored as its first day's number and a span; a window test on the
    numbers gives what comparing the dates gives."""
    lo, hi = sorted((a, b))
    first, last = day_number(lo.isoformat()), day_number(hi.isoformat())
    assert (first < last) == (lo < hi) and first + (last - first) == last
    assert day_number("0000-01-01") < first <= last < day_number("9999-12-31") or \
        hi.isoformat() == "9999-12-31"
