"""The topic format: every rule of memory reference §2.4 is a test here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scriptorium.errors import InvalidInput
from scriptorium.memory.topics import (
    Block, TopicFormatError, is_local_label, parse_topic, parse_topic_bytes,
    render_topic, repoint_block_links, valid_when, validate_tree,
)
from scriptorium.memory.normalize import normalize_topic

DATA = Path(__file__).parent.parent / "data" / "openprogram-state" / "written" / "memory"
P = "topics/projects/x.md"

DEF_A = "[^e-aaaaaaaaaa]: Time: `2026-08-01`; Sources: [budget](openprogram/s/n1)"
DEF_B = "[^e-bbbbbbbbbb]: Time: `2026-08-02`; Sources: [plan](openprogram/s/n2)"


def doc(*paragraphs: str) -> str:
    return "\n\n".join(paragraphs) + "\n"


def error_of(text: str, path: str = P) -> TopicFormatError:
    with pytest.raises(TopicFormatError) as info:
        parse_topic(text, path)
    return info.value


# -- the reference's own files ---------------------------------------------------------------


@pytest.mark.parametrize("rel", ["topics/infrastructure/production.md",
                                 "topics/projects/lisbon-offsite.md"])
def test_topics_written_by_the_reference_parse_strictly_and_render_byte_for_byte(rel):
    text = (DATA / rel).read_text(encoding="utf-8")
    parsed = parse_topic(text, rel)
    assert parsed.blocks and all(re.fullmatch(r"[0-9a-f]{8}", b.id) for b in parsed.blocks)
    assert all(re.fullmatch(r"e-[0-9a-f]{10}", fid) for fid in parsed.evidence)
    assert render_topic(parsed) == text


def test_the_reference_block_with_two_claims_keeps_each_claims_citation():
    rel = "topics/projects/lisbon-offsite.md"
    parsed = parse_topic((DATA / rel).read_text(encoding="utf-8"), rel)
    (block,) = parsed.blocks
    assert block.id == "ec7521e7" and block.headings == ["Lisbon offsite"] and block.line == 3
    assert [(c.text, c.citations) for c in block.claims] == [
        ("The team offsite is in Lisbon in the first week of May.", ["e-b72bb88e5f"]),
        ("The budget is fifty thousand euros for twelve people.", ["e-f3c64873ae"]),
    ]
    per_person = parsed.evidence["e-f3c64873ae"]
    assert [s.label for s in per_person.sources] == ["budget", "per person"]
    assert per_person.sources[1].target.endswith("offsite.md#source-17da366adf62e73b")
    assert per_person.when == "2026-08-02" and per_person.line == 6


# -- blocks ----------------------------------------------------------------------------------


def test_a_run_of_ids_after_a_merge_keeps_the_last_as_identity_and_the_rest_as_aliases():
    parsed = parse_topic(doc("A claim.[^e-aaaaaaaaaa] ^old1 ^old-2 ^f888f60e", DEF_A), P)
    (block,) = parsed.blocks
    assert block.id == "f888f60e" and block.aliases == ["old1", "old-2"]
    assert block.ids == ["old1", "old-2", "f888f60e"]
    assert parsed.block("old1") is block


def test_adjacent_citations_form_one_group_that_cites_the_text_before_it():
    parsed = parse_topic(doc("One.[^e-aaaaaaaaaa][^e-bbbbbbbbbb] Two.[^e-aaaaaaaaaa] ^b1",
                             DEF_A, DEF_B), P)
    claims = parsed.blocks[0].claims
    assert [(c.text, c.citations) for c in claims] == [
        ("One.", ["e-aaaaaaaaaa", "e-bbbbbbbbbb"]), ("Two.", ["e-aaaaaaaaaa"])]
    assert parsed.blocks[0].citations == ["e-aaaaaaaaaa", "e-bbbbbbbbbb", "e-aaaaaaaaaa"]


def test_a_paragraph_spanning_lines_is_one_block_under_its_headings():
    text = "# Top\n\n## Sub\n\nFirst line\nsecond line.[^e-aaaaaaaaaa]\n^b1\n\n" + DEF_A + "\n"
    (block,) = parse_topic(text, P).blocks
    assert block.id == "b1" and block.line == 5 and block.headings == ["Top", "Sub"]
    assert block.claims[0].text == "First line second line."
    assert block.text == "First line\nsecond line.[^e-aaaaaaaaaa]"


def test_a_sibling_heading_replaces_the_previous_one_in_the_heading_path():
    text = doc("# Top", "## One", "## Two", "A.[^e-aaaaaaaaaa] ^b1", DEF_A)
    assert parse_topic(text, P).blocks[0].headings == ["Top", "Two"]


def test_a_paragraph_without_an_id_is_rejected():
    err = error_of(doc("# T", "A claim.[^e-aaaaaaaaaa]", DEF_A))
    assert "memory block ID required" in str(err) and err.line == 3 and err.path == P
    assert str(err).startswith(f"{P}:3: ")
    assert isinstance(err, InvalidInput) and err.code == "INVALID_TOPIC_FORMAT"


def test_a_legacy_paragraph_citing_only_mem_footnotes_needs_no_id():
    text = doc("Old memory.[^mem_1]", "[^mem_1]: 2025-01 · Sources: [old](openprogram/s/n0)")
    (block,) = parse_topic(text, P).blocks
    assert block.id == "" and block.ids == [] and block.legacy


def test_a_trailing_caret_token_with_other_characters_is_an_invalid_id():
    err = error_of(doc("A claim.[^e-aaaaaaaaaa] ^abc.def", DEF_A))
    assert "invalid block id '^abc.def'" in str(err)


def test_a_caret_inside_the_text_is_not_taken_for_an_id():
    (block,) = parse_topic(doc("E = mc^2 here.[^e-aaaaaaaaaa] ^b1", DEF_A), P).blocks
    assert block.id == "b1" and block.claims[0].text == "E = mc^2 here."


def test_a_block_without_any_citation_is_rejected():
    assert "without a citation" in str(error_of(doc("Just prose. ^b1")))


def test_text_after_the_last_citation_is_rejected():
    err = error_of(doc("Cited.[^e-aaaaaaaaaa] and uncited. ^b1", DEF_A))
    assert "text after the last citation" in str(err)


def test_a_citation_with_no_text_before_it_is_rejected():
    err = error_of(doc("[^e-aaaaaaaaaa] starts the paragraph.[^e-aaaaaaaaaa] ^b1", DEF_A))
    assert "no claim text before it" in str(err)


def test_a_citation_must_be_defined_in_the_same_file():
    err = error_of(doc("Cited.[^e-cccccccccc] ^b1"))
    assert "[^e-cccccccccc] has no definition in this file" in str(err) and err.line == 1


def test_a_duplicate_definition_is_rejected_with_both_lines():
    err = error_of(doc("Cited.[^e-aaaaaaaaaa] ^b1", DEF_A + "\n" + DEF_A))
    assert "duplicate footnote definition [^e-aaaaaaaaaa] (first at line 3)" in str(err)
    assert err.line == 4


def test_an_unused_definition_is_rejected():
    err = error_of(doc("Cited.[^e-aaaaaaaaaa] ^b1", DEF_A + "\n" + DEF_B))
    assert "unused footnote definition [^e-bbbbbbbbbb]" in str(err) and err.line == 4


def test_block_ids_are_unique_within_a_file():
    err = error_of(doc("A.[^e-aaaaaaaaaa] ^b1", DEF_A, "B.[^e-bbbbbbbbbb] ^b1", DEF_B))
    assert "duplicate block id ^b1 (also at line 1)" in str(err) and err.line == 5


def test_an_id_repeated_in_one_run_is_rejected():
    assert "repeated" in str(error_of(doc("A.[^e-aaaaaaaaaa] ^b1 ^b1", DEF_A)))


def test_malformed_and_invalid_citations_are_rejected():
    assert "invalid citation [^a b]" in str(error_of(doc("A.[^a b] ^b1")))
    assert "malformed citation" in str(error_of(doc("A [^oops.[^e-aaaaaaaaaa] ^b1", DEF_A)))


# -- footnote definitions --------------------------------------------------------------------


@pytest.mark.parametrize("when", ["2026", "2026-08", "2026-08-01", "2024-02-29", "undated"])
def test_a_real_date_or_undated_is_a_valid_time(when):
    text = doc("A.[^e-aaaaaaaaaa] ^b1",
               f"[^e-aaaaaaaaaa]: Time: `{when}`; Sources: [x](openprogram/s/n1)")
    assert parse_topic(text, P).evidence["e-aaaaaaaaaa"].when == when
    assert valid_when(when)


@pytest.mark.parametrize("when", ["2026-02-30", "2026-13", "2023-02-29", "26-08-01",
                                  "2026-8-1", "yesterday", "0000", ""])
def test_an_impossible_or_malformed_time_is_rejected(when):
    text = doc("A.[^e-aaaaaaaaaa] ^b1",
               f"[^e-aaaaaaaaaa]: Time: `{when}`; Sources: [x](openprogram/s/n1)")
    assert "invalid time" in str(error_of(text))
    assert not valid_when(when)


def test_backticks_around_the_time_are_optional_but_always_rendered():
    text = doc("A.[^e-aaaaaaaaaa] ^b1",
               "[^e-aaaaaaaaaa]:  Time: 2026-08-01 ;Sources: [x](openprogram/s/n1)")
    assert render_topic(parse_topic(text, P)).endswith(
        "[^e-aaaaaaaaaa]: Time: `2026-08-01`; Sources: [x](openprogram/s/n1)\n")


def test_the_legacy_definition_form_is_read_and_rendered_canonically():
    text = doc("A.[^mem_1] ^b1", "[^mem_1]: 2025-03 · Sources: [old](openprogram/s/n0), "
                                 "[older](D1:3)")
    parsed = parse_topic(text, P)
    ev = parsed.evidence["mem_1"]
    assert ev.when == "2025-03" and [s.target for s in ev.sources] == ["openprogram/s/n0", "D1:3"]
    assert render_topic(parsed).endswith(
        "[^mem_1]: Time: `2025-03`; Sources: [old](openprogram/s/n0), [older](D1:3)\n")


def test_an_empty_source_label_is_rejected():
    text = doc("A.[^e-aaaaaaaaaa] ^b1", "[^e-aaaaaaaaaa]: Time: `2026`; Sources: [ ](x/y/z)")
    assert "empty source label" in str(error_of(text))


def test_a_definition_that_does_not_follow_the_grammar_is_rejected():
    for bad in ["[^e-aaaaaaaaaa]: see the chat", "[^e-aaaaaaaaaa]: Time: `2026`; Sources:",
                "[^e-aaaaaaaaaa]: Time: `2026`; Sources: budget(x/y/z)"]:
        err = error_of(doc("A.[^e-aaaaaaaaaa] ^b1", bad))
        assert "malformed" in str(err) and err.line == 3, bad


def test_an_invalid_footnote_id_in_a_definition_is_rejected():
    text = doc("A.[^e.1] ^b1", "[^e.1]: Time: `2026`; Sources: [x](x/y/z)")
    assert "invalid" in str(error_of(text))


def test_a_source_handle_may_contain_spaces_and_parentheses():
    text = doc("A.[^e-aaaaaaaaaa] ^b1",
               "[^e-aaaaaaaaaa]: Time: `2026`; Sources: [x](openprogram/my chat (2)/n1), [y](a/b/c)")
    ev = parse_topic(text, P).evidence["e-aaaaaaaaaa"]
    assert [s.target for s in ev.sources] == ["openprogram/my chat (2)/n1", "a/b/c"]


# -- what else a topic may hold ----------------------------------------------------------------


def test_fenced_code_comments_and_anchor_lines_are_not_blocks_and_survive_rendering():
    text = doc("# T", "<!-- a note\nspanning lines -->", '<a id="here"></a>',
               "```\nNot a block[^x] ^nope\n\nstill code\n```", "A.[^e-aaaaaaaaaa] ^b1", DEF_A)
    parsed = parse_topic(text, P)
    assert [b.id for b in parsed.blocks] == ["b1"]
    assert render_topic(parsed) == text


def test_a_definition_or_heading_line_ends_a_paragraph():
    text = "A.[^e-aaaaaaaaaa] ^b1\n" + DEF_A + "\nB.[^e-bbbbbbbbbb] ^b2\n# H\n" + DEF_B + "\n"
    parsed = parse_topic(text, P)
    assert [b.id for b in parsed.blocks] == ["b1", "b2"]
    assert render_topic(parsed) == doc("A.[^e-aaaaaaaaaa] ^b1", DEF_A, "B.[^e-bbbbbbbbbb] ^b2",
                                       "# H", DEF_B)


def test_crlf_line_endings_are_read():
    text = doc("# T", "A.[^e-aaaaaaaaaa] ^b1", DEF_A).replace("\n", "\r\n")
    assert [b.id for b in parse_topic(text, P).blocks] == ["b1"]


def test_bytes_that_are_not_utf8_are_a_format_error_naming_the_line():
    data = doc("# T", "A.[^e-aaaaaaaaaa] ^b1", DEF_A).encode() + b"\xff\xfe\n"
    with pytest.raises(TopicFormatError) as info:
        parse_topic_bytes(data, P)
    assert info.value.line == 6 and "UTF-8" in str(info.value)
    assert parse_topic_bytes(data, P, strict=False).problems


def test_a_lenient_parse_lists_every_problem_instead_of_raising():
    text = doc("Prose only.", "A.[^e-cccccccccc] ^b1")
    parsed = parse_topic(text, P, strict=False)
    assert len(parsed.problems) >= 3 and [b.line for b in parsed.blocks] == [1, 3]


# -- links between topics ---------------------------------------------------------------------


def test_a_link_to_another_topic_must_name_a_block():
    for target in ["../people/dave.md", "../people/dave.md#budget", "x.md"]:
        err = error_of(doc(f"See [Dave]({target}).[^e-aaaaaaaaaa] ^b1", DEF_A))
        assert "must name a block" in str(err), target


def test_block_links_are_recorded_with_the_topic_path_they_point_at():
    text = doc("See [Dave](../people/dave.md#^d1) and [here](#^b0).[^e-aaaaaaaaaa] ^b1", DEF_A)
    (block,) = parse_topic(text, P).blocks
    assert block.links == [("topics/people/dave.md", "d1"), (P, "b0")]


def test_links_to_sources_and_the_web_are_not_topic_links():
    text = doc("See [src](../../sources/openprogram/_v2/s.md#source-x) and "
               "[web](https://example.org/a.md).[^e-aaaaaaaaaa] ^b1", DEF_A)
    assert parse_topic(text, P).blocks[0].links == []


def test_validate_tree_rejects_a_block_id_used_in_two_files_even_as_an_alias():
    a = parse_topic(doc("A.[^e-aaaaaaaaaa] ^b1", DEF_A), "topics/a.md")
    b = parse_topic(doc("B.[^e-aaaaaaaaaa] ^b1 ^b2", DEF_A), "topics/b.md")
    with pytest.raises(TopicFormatError) as info:
        validate_tree([a, b])
    assert "duplicate block id ^b1 (also topics/a.md:1)" in str(info.value)
    assert info.value.path == "topics/b.md"


def test_validate_tree_rejects_a_dangling_block_link_and_accepts_links_to_aliases():
    a = parse_topic(doc("A.[^e-aaaaaaaaaa] ^old ^b1", DEF_A), "topics/a.md")
    ok = parse_topic(doc("See [a](a.md#^old).[^e-aaaaaaaaaa] ^b2", DEF_A), "topics/b.md")
    validate_tree([a, ok])
    bad = parse_topic(doc("See [a](a.md#^gone).[^e-aaaaaaaaaa] ^b3", DEF_A), "topics/c.md")
    with pytest.raises(TopicFormatError, match="dangling block link"):
        validate_tree([a, ok, bad])


def test_block_links_are_repointed_to_the_file_that_now_holds_the_block():
    text = "See [a](a.md#^b1) and [b](sub/b.md#^b2) and [w](https://x.org/a.md#^b1)."
    out = repoint_block_links(text, "topics/c.md", {"b1": "topics/sub/a.md", "b2": "topics/sub/b.md"})
    assert out == "See [a](sub/a.md#^b1) and [b](sub/b.md#^b2) and [w](https://x.org/a.md#^b1)."


# -- canonical rendering ------------------------------------------------------------------------


def test_rendering_removes_space_before_citations_and_puts_one_space_before_each_id():
    text = "A claim  [^e-aaaaaaaaaa]   [^e-bbbbbbbbbb]\tmore  [^e-aaaaaaaaaa]   ^a1   ^b1  \n\n" \
           + DEF_A + "\n" + DEF_B + "\n"
    assert render_topic(parse_topic(text, P)).split("\n")[0] == (
        "A claim[^e-aaaaaaaaaa][^e-bbbbbbbbbb]\tmore[^e-aaaaaaaaaa] ^a1 ^b1")


def test_rendering_separates_items_by_one_blank_line_and_groups_definitions():
    text = "\n\n# T\n\n\n\nA.[^e-aaaaaaaaaa] ^b1\n\n" + DEF_A + "\n\n\n"
    assert render_topic(parse_topic(text, P)) == doc("# T", "A.[^e-aaaaaaaaaa] ^b1", DEF_A)


def test_an_empty_document_renders_as_nothing():
    assert render_topic(parse_topic("", P)) == ""


# -- the normaliser ----------------------------------------------------------------------------


def resolve(topic_path: str, target: str) -> str | None:
    """A fake archive: handles a/b/c resolve to themselves, links ../sources/<x>.md#<y> to x/y."""
    m = re.fullmatch(r"(?:\.\./)+sources/(\w+)_(\w+)\.md#(\w+)", target)
    if m:
        return "/".join(m.groups())
    if re.fullmatch(r"[\w-]+/[\w-]+/[\w-]+", target) and not target.startswith("missing"):
        return target
    return None


def link_for(topic_path: str, source_id: str) -> str | None:
    depth = topic_path.count("/")
    provider, thread, message = source_id.split("/")
    return "../" * depth + f"sources/{provider}_{thread}.md#{message}"


def norm(text: str, path: str = P, committed=(), **kw) -> str:
    return normalize_topic(text, path, committed_ids=set(committed), resolve=resolve,
                           link_for=link_for, **kw)


WRITER_TEXT = doc(
    "# Offsite",
    "The offsite is in Lisbon.[^e1] The budget is 50k.[^e2][^new-evidence-x] ^made-up",
    "[^e1]: Time: `2026-08-01`; Sources: [plan](openprogram/off/n1)\n"
    "[^e2]: Time: `2026-08-01`; Sources: [budget](openprogram/off/n2)\n"
    "[^new-evidence-x]: 2026-08-02 · Sources: [people](openprogram/off/n3)",
)


def test_the_normaliser_gives_local_evidence_labels_stable_e_ids_and_blocks_8_hex_ids():
    out = norm(WRITER_TEXT)
    parsed = parse_topic(out, P)  # strict: the output is valid
    (block,) = parsed.blocks
    assert re.fullmatch(r"[0-9a-f]{8}", block.id) and block.aliases == []
    assert len(parsed.evidence) == 3
    assert all(re.fullmatch(r"e-[0-9a-f]{10}", fid) for fid in parsed.evidence)
    assert "made-up" not in out and "[^e1]" not in out
    assert norm(WRITER_TEXT) == out  # same input, same ids


def test_the_normaliser_renders_plain_handles_as_canonical_relative_links():
    parsed = parse_topic(norm(WRITER_TEXT), P)
    targets = [s.target for ev in parsed.evidence.values() for s in ev.sources]
    assert targets == ["../../sources/openprogram_off.md#n1", "../../sources/openprogram_off.md#n2",
                       "../../sources/openprogram_off.md#n3"]


def test_a_bare_source_handle_is_rejected_by_strict_parsing_with_the_fix_named():
    text = doc("A.[^e-aaaaaaaaaa] ^b1", "[^e-aaaaaaaaaa]: Time: `2026`; Sources: openprogram/s/n1")
    with pytest.raises(TopicFormatError, match=r"bare handle 'openprogram/s/n1'.*\[label\]"):
        parse_topic(text, P)


def test_the_normaliser_links_bare_source_handles_in_a_footnote():
    text = doc("A.[^e1] B.[^e2]", "[^e1]: Time: `2026`; Sources: openprogram/off/n1",
               "[^e2]: Time: `2026`; Sources: openprogram/off/n2, openprogram/off/n3")
    parsed = parse_topic(norm(text), P)
    links = [(s.label, s.target) for ev in parsed.evidence.values() for s in ev.sources]
    assert links == [("source", "../../sources/openprogram_off.md#n1"),
                     ("source", "../../sources/openprogram_off.md#n2"),
                     ("source", "../../sources/openprogram_off.md#n3")]


def test_a_bare_handle_that_does_not_resolve_still_fails_validation():
    text = doc("A.[^e1]", "[^e1]: Time: `2026`; Sources: missing/s/n1")
    out = norm(text)
    assert "[source](missing/s/n1)" in out


def test_a_target_that_does_not_resolve_is_left_for_validation_to_report():
    text = doc("A.[^e1]", "[^e1]: Time: `2026`; Sources: [x](missing/s/n1)")
    assert "(missing/s/n1)" in norm(text)


def test_committed_ids_and_aliases_are_kept_and_invented_ones_stripped():
    text = doc("A.[^e-aaaaaaaaaa] ^old ^invented ^f888f60e", DEF_A,
               "B.[^e-bbbbbbbbbb] ^also-invented", DEF_B)
    parsed = parse_topic(norm(text, committed={"old", "f888f60e"}), P)
    first, second = parsed.blocks
    assert first.ids == ["old", "f888f60e"]
    assert re.fullmatch(r"[0-9a-f]{8}", second.id) and second.aliases == []


def test_an_uncommitted_identity_after_a_committed_alias_leaves_the_alias_as_identity():
    out = norm(doc("A.[^e-aaaaaaaaaa] ^old ^new1", DEF_A), committed={"old"})
    assert parse_topic(out, P).blocks[0].ids == ["old"]


def test_an_orphan_local_citation_is_bound_to_the_definitions_after_its_paragraph():
    text = doc("A.[^e7] B.[^e8] ^x", "[^e1]: Time: `2026`; Sources: [a](p/t/a)\n"
                                     "[^e2]: Time: `2026`; Sources: [b](p/t/b)")
    parsed = parse_topic(norm(text), P)
    (block,) = parsed.blocks
    sources = [parsed.evidence[c.citations[0]].sources[0].label for c in block.claims]
    assert sources == ["a", "b"]


def test_a_local_label_reused_in_two_paragraphs_binds_to_the_definition_after_each():
    text = doc("A.[^e1]", "[^e1]: Time: `2026`; Sources: [a](p/t/a)",
               "B.[^e1]", "[^e1]: Time: `2026`; Sources: [b](p/t/b)")
    parsed = parse_topic(norm(text), P)
    labels = [parsed.evidence[b.citations[0]].sources[0].label for b in parsed.blocks]
    assert labels == ["a", "b"]


def test_two_identical_new_paragraphs_get_distinct_ids():
    para = "Same.[^e1]"
    text = doc(para, "[^e1]: Time: `2026`; Sources: [a](p/t/a)",
               "Same.[^e2]", "[^e2]: Time: `2026`; Sources: [a](p/t/a)")
    parsed = parse_topic(norm(text), P)
    assert len({b.id for b in parsed.blocks}) == 2 and len(parsed.evidence) == 2


def test_new_ids_avoid_ids_taken_elsewhere_in_the_transaction():
    taken: set[str] = set()
    first = parse_topic(norm(WRITER_TEXT, taken_ids=taken), P).blocks[0].id
    assert first in taken
    second = parse_topic(norm(WRITER_TEXT, taken_ids=taken), P).blocks[0].id
    assert second != first and second in taken


def test_definitions_of_a_deleted_paragraph_are_pruned():
    text = doc("A.[^e-aaaaaaaaaa] ^b1", DEF_A + "\n" + DEF_B)
    assert parse_topic(norm(text, committed={"b1"}), P).evidence.keys() == {"e-aaaaaaaaaa"}


def test_a_topic_without_blocks_normalises_to_nothing_and_empty_sections_are_pruned():
    assert norm(doc("# Title", "<!-- nothing left -->")) == ""
    kept = doc("# T", "## Kept", "A.[^e-aaaaaaaaaa] ^b1", DEF_A)
    text = doc("# T", "## Gone", "<!-- c -->", "### Also gone", "## Kept",
               "A.[^e-aaaaaaaaaa] ^b1", DEF_A)
    assert norm(text, committed={"b1"}) == norm(kept, committed={"b1"})
    assert [type(i).__name__ for i in parse_topic(norm(text, committed={"b1"}), P).items] == [
        "Heading", "Heading", "Block", "Evidence"]


def test_legacy_paragraphs_get_no_id():
    text = doc("Old.[^mem_1]", "[^mem_1]: 2025-01 · Sources: [o](p/t/o)")
    assert parse_topic(norm(text), P).blocks[0].id == ""


def test_a_prose_paragraph_is_left_for_strict_validation_to_reject():
    out = norm(doc("A.[^e1]", "[^e1]: Time: `2026`; Sources: [a](p/t/a)", "Prose without cite."))
    with pytest.raises(TopicFormatError, match="paragraph without a citation") as info:
        parse_topic(out, P)
    assert info.value.line == 5


def test_the_normaliser_is_a_fixed_point_on_the_references_files():
    for rel in ["topics/infrastructure/production.md", "topics/projects/lisbon-offsite.md"]:
        text = (DATA / rel).read_text(encoding="utf-8")
        ids = {i for b in parse_topic(text, rel).blocks for i in b.ids}
        out = normalize_topic(text, rel, committed_ids=ids, resolve=lambda p, t: None,
                              link_for=lambda p, s: None)
        assert out == text


def test_local_label_shapes():
    assert all(is_local_label(x) for x in ["e1", "e42", "new-evidence-3", "7"])
    assert not any(is_local_label(x) for x in ["e-82dd4f837c", "mem_1", "budget", "e1a"])


def test_a_block_dataclass_reports_ids_in_order():
    b = Block(id="z", aliases=["x", "y"], claims=[], headings=[], line=1, text="")
    assert b.ids == ["x", "y", "z"] and b.citations == []


def test_a_comment_anchor_or_fence_line_ends_a_paragraph():
    for breaker in ["<!-- note -->", '<a id="x"></a>', "```\ncode\n```"]:
        text = f"A.[^e-aaaaaaaaaa] ^b1\n{breaker}\nB.[^e-bbbbbbbbbb] ^b2\n\n{DEF_A}\n{DEF_B}\n"
        assert [b.id for b in parse_topic(text, P).blocks] == ["b1", "b2"], breaker
