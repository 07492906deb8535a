"""How the SQLite index stores a document's row: the JSON it writes without the encoder is
the encoder's, for any strings."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from testkit import examples

from scriptorium.memory.search.rows import _json


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.text(st.sampled_from('ab "\\\x00\x1f\x7fé☕\n\t/,[]'), max_size=6),
                max_size=4) | st.lists(st.text(max_size=8), max_size=3))
def test_lists_of_strings_are_stored_as_json_dumps_writes_them(values):
    assert _json(values) == json.dumps(values, ensure_ascii=False)
    assert json.loads(_json(values)) == values
