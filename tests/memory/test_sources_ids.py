"""Source ids, percent-encoded paths and anchors (memory reference §2.1)."""

from __future__ import annotations

import pytest

from scriptorium.errors import InvalidInput
from scriptorium.memory.sources import (SourceIdError, is_v2_safe_id, legacy_path, make_source_id,
                                        pct_decode, pct_encode, source_anchor, split_source_id,
                                        v2_path)
from scriptorium.memory.sources.ids import clean_timestamp


def test_the_reference_example_anchor():
    assert source_anchor("openprogram/s-91/n7") == "source-e35a9abf875fbc00"


def test_an_id_splits_on_its_first_two_slashes():
    assert split_source_id("p/t/m/with/slashes") == ("p", "t", "m/with/slashes")
    assert make_source_id("p", "t", "m/x") == "p/t/m/x"


@pytest.mark.parametrize("bad", ["", "p", "p/t", "p//m", "/t/m", "p/t/", "./t/m", "../t/m", None])
def test_a_malformed_id_is_refused_with_an_invalid_input_error(bad):
    with pytest.raises(SourceIdError) as err:
        split_source_id(bad)
    assert isinstance(err.value, InvalidInput) and "\n" not in str(err.value)


@pytest.mark.parametrize("parts", [("", "t", "m"), ("p", "", "m"), ("p", "t", ""), ("a/b", "t", "m"),
                                   ("p", "a/b", "m"), (".", "t", "m"), ("..", "t", "m"), ("p", 3, "m")])
def test_make_source_id_refuses_parts_that_would_not_split_back(parts):
    with pytest.raises(SourceIdError):
        make_source_id(*parts)


def test_pct_keeps_only_ascii_alnum_and_four_marks():
    assert pct_encode("aZ09-_.~") == "aZ09-_.~"
    assert pct_encode("a/b c") == "a%2Fb%20c"
    assert pct_encode("é") == "%C3%A9"
    assert pct_encode("!*'()%") == "%21%2A%27%28%29%25"
    assert pct_decode(pct_encode("日本/x y")) == "日本/x y"


def test_paths_are_pure_functions_of_the_id():
    assert v2_path("openprogram/s 1/m") == "sources/openprogram/_v2/s%201.md"
    assert legacy_path("channel-x/a:b/m") == "sources/channel-x/a%3Ab.md"


@pytest.mark.parametrize("sid,safe", [
    ("openprogram/s-91/n7", True), ("p/t/m with space", True), ("p/t/日本", True),
    ("p/t/a[b", False), ("p/t/a]b", False), ("p/t/a<b", False), ("p/t/a>b", False),
    ("p/t/a\rb", False), ("p/t/a\nb", False), ("p/t/a\x00b", False), ("p/t/a\u2028b", False),
    ("p/t", False), ("../t/m", False), (42, False),
])
def test_v2_safe_ids_are_printable_without_brackets_or_line_breaks(sid, safe):
    assert is_v2_safe_id(sid) is safe


def test_timestamps_can_be_cleaned_for_callers_that_prefer_it():
    assert clean_timestamp("[2026-01-01\r\n]") == "2026-01-01"
    assert clean_timestamp(None) == ""
