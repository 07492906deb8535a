"""Properties of the topic format: no input crashes the parser, rendering is a fixed point,
normalising is idempotent."""

from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st

from testkit import DATA, examples
from topic_parse_reference import reference_parse

from scriptorium.memory.topics import (
    Block, Claim, Evidence, Heading, SourceLink, TopicDoc, TopicFormatError,
    parse_topic, parse_topic_bytes, render_topic,
)
from scriptorium.memory.normalize import normalize_topic

P = "topics/a/b.md"
SETTINGS = settings(max_examples=examples(int(__import__("os").environ.get("TOPIC_EXAMPLES", "150"))), deadline=None)


def resolve(topic_path: str, target: str) -> str | None:
    m = re.fullmatch(r"(?:\.\./)+sources/(\w+)_(\w+)\.md#(\w+)", target)
    if m:
        return "/".join(m.groups())
    if re.fullmatch(r"\w+/\w+/\w+", target):
        return target
    return None


def link_for(topic_path: str, source_id: str) -> str:
    provider, thread, message = source_id.split("/")
    return "../" * topic_path.count("/") + f"sources/{provider}_{thread}.md#{message}"


# Fragments a writer (or a fuzzer) might put in a topic file.
words = st.text(st.sampled_from("abc xyz.,^[]()#:`*-\t"), min_size=0, max_size=12)
labels = st.sampled_from(["e1", "e2", "e3", "new-evidence-a", "e-aaaaaaaaaa", "mem_1", "x y", ""])
ids = st.sampled_from(["^b1", "^b2", "^f888f60e", "^bad.id", "^", "^e-1"])
handles = st.sampled_from(["p/t/m1", "p/t/m2", "q/u/m3", "../../sources/p_t.md#m1", "missing",
                           "a b (c)", ""])
whens = st.sampled_from(["2026", "2026-08", "2026-08-01", "undated", "2026-02-30", "", "x"])


@st.composite
def definition_lines(draw) -> str:
    fid = draw(labels)
    srcs = ", ".join(f"[{draw(words)}]({draw(handles)})"
                     for _ in range(draw(st.integers(0, 3))))
    if draw(st.booleans()):
        return f"[^{fid}]: Time: `{draw(whens)}`; Sources: {srcs}"
    return f"[^{fid}]: {draw(whens)} · Sources: {srcs}"


@st.composite
def paragraph_lines(draw) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        parts.append(draw(words))
        parts.append("".join(f"[^{draw(labels)}]" for _ in range(draw(st.integers(0, 2)))))
    parts.append(draw(words))
    tail = " ".join(draw(st.lists(ids, max_size=3)))
    return "".join(parts) + (" " + tail if tail else "")


topicish_lines = st.one_of(
    paragraph_lines(), definition_lines(), st.just(""), st.just("   "),
    st.builds(lambda n, w: "#" * n + " " + w, st.integers(1, 7), words),
    st.sampled_from(["<!-- c -->", "<!-- open", "end -->", '<a id="x"></a>', "```", "~~~",
                     "See [t](other.md#^b1).", "[l](../x.md)"]),
    st.text(max_size=20),
)
topicish = st.lists(topicish_lines, max_size=14).map("\n".join)


@SETTINGS
@given(st.text(max_size=400))
def test_random_text_never_crashes_the_parser(text):
    try:
        parsed = parse_topic(text, P)
    except TopicFormatError as exc:
        assert str(exc).startswith(f"{P}:") and "\n" not in str(exc)
    else:
        assert isinstance(parsed, TopicDoc)
    lenient = parse_topic(text, P, strict=False)
    assert isinstance(lenient, TopicDoc)


@SETTINGS
@given(st.binary(max_size=400))
def test_random_bytes_never_crash_the_parser(data):
    try:
        parse_topic_bytes(data, P)
    except TopicFormatError as exc:
        assert exc.line >= 1
    assert isinstance(parse_topic_bytes(data, P, strict=False), TopicDoc)


@SETTINGS
@given(st.one_of(topicish, st.text(max_size=300)))
def test_rendering_is_a_fixed_point_of_parse_then_render(text):
    once = render_topic(parse_topic(text, P, strict=False))
    twice = render_topic(parse_topic(once, P, strict=False))
    assert twice == once


@st.composite
def valid_docs(draw) -> TopicDoc:
    items: list = []
    next_id = 0
    for h in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            items.append(Heading(draw(st.integers(1, 6)), draw(st.sampled_from(
                ["Budget", "People and places", "Décisions ✓"]))))
        for _ in range(draw(st.integers(1, 3))):
            claims, defs = [], []
            for _ in range(draw(st.integers(1, 3))):
                cites = []
                for _ in range(draw(st.integers(1, 2))):
                    next_id += 1
                    fid = f"e-{next_id:010x}"
                    cites.append(fid)
                    defs.append(Evidence(fid, draw(whens.filter(
                        lambda w: w in ("2026", "2026-08", "2026-08-01", "undated"))),
                        [SourceLink(draw(st.sampled_from(["budget", "plan", "a b"])),
                                    draw(st.sampled_from(["p/t/m1", "../../sources/p_t.md#m2"])))
                         for _ in range(draw(st.integers(1, 2)))]))
                text = draw(st.text(st.sampled_from("abcdef .,!?é"), min_size=1, max_size=30)
                            .filter(lambda t: t.strip() and "^" not in t))
                claims.append(Claim(text.strip(), cites))
            body = "".join(c.text + "".join(f"[^{f}]" for f in c.citations) for c in claims)
            next_id += 1
            items.append(Block(id=f"{next_id:08x}", aliases=[], claims=claims, headings=[],
                               line=0, text=body))
            items.extend(defs)
    return TopicDoc(path=P, blocks=[i for i in items if isinstance(i, Block)], evidence={},
                    items=items)


@SETTINGS
@given(valid_docs())
def test_a_valid_document_survives_render_then_parse(d):
    text = render_topic(d)
    parsed = parse_topic(text, P)  # strict
    assert [b.id for b in parsed.blocks] == [b.id for b in d.blocks]
    assert [[(c.citations) for c in b.claims] for b in parsed.blocks] == \
        [[c.citations for c in b.claims] for b in d.blocks]
    assert render_topic(parsed) == text


@SETTINGS
@given(topicish, st.sets(st.sampled_from(["b1", "b2", "f888f60e"])))
def test_normalising_normalised_output_changes_nothing(text, committed):
    once = normalize_topic(text, P, committed_ids=committed, resolve=resolve, link_for=link_for)
    twice = normalize_topic(once, P, committed_ids=committed, resolve=resolve, link_for=link_for)
    assert twice == once
    # ... and also once the ids it gave are committed (the next transaction's view).
    now = committed | {i for b in parse_topic(once, P, strict=False).blocks for i in b.ids}
    assert normalize_topic(once, P, committed_ids=now, resolve=resolve,
                           link_for=link_for) == once


# Lines as the writers make them and as hand edits break them: citations with odd spacing
# (tabs, no-break and em spaces are whitespace to both parsers), id runs, "x^2", links,
# definitions good and broken, headings of every level, comments and fences.
spacing = st.sampled_from(["", " ", "  ", "\t", "\u00a0", "\u2003", " \u00a0"])
cite = st.builds(lambda sp, fid: f"{sp}[^{fid}]", spacing,
                 st.sampled_from(["e-aaaaaaaaaa", "e-bbbbbbbbbb", "mem_1", "e1", "x y", "", "^"]))
claim_text = st.sampled_from(["The kiln is hot.", "x^2 grows", "See [t](other.md#^b1).",
                              "[l](../x.md) and [m](#^b2)", "Café ☕", "a]b", "", "two\nlines"])
paragraph = st.builds(
    lambda parts, tail, ids: "".join(parts) + tail + "".join(ids),
    st.lists(st.builds(lambda t, cs: t + "".join(cs), claim_text, st.lists(cite, max_size=2)),
             max_size=4),
    st.sampled_from(["", " trailing words", "\u00a0"]),
    st.lists(st.builds(lambda sp, i: f"{sp}^{i}", spacing,
                       st.sampled_from(["b1", "f888f60e", "bad.id", "", "e-1", "b1"])),
             max_size=3))
writer_lines = st.one_of(
    paragraph, definition_lines(), topicish_lines,
    st.sampled_from(["[^e-aaaaaaaaaa]: Time: `2026-08-01`; Sources: [a](p/t/m1)",
                     "[^e-aaaaaaaaaa]: Time: `2026-02-30`; Sources: [a](p/t/m1)",
                     "[^e-bbbbbbbbbb]: 2026 · Sources: [b](../../sources/p_t.md#m2)",
                     "[^broken]: no time here", "[^]: Time: `2026`; Sources: p/t/m1, q/u/m3",
                     "## Section", "#", "####### not a heading", "\r", "<!-- a\nb -->"]))


@SETTINGS
@given(st.one_of(st.lists(writer_lines, max_size=24).map("\n".join),
                 st.lists(writer_lines, max_size=24).map("\r\n".join), st.text(max_size=300)))
def test_the_faster_parser_reads_every_file_as_the_parser_before_it_did(text):
    """The index's parse (lenient, as a hand edit is read) and the strict parse give the same
    blocks, evidence, items and problems as the parser of commit 009abc4."""
    new = parse_topic(text, P, strict=False)
    old = reference_parse(text, P)
    assert new.items == old.items
    assert new.blocks == old.blocks and new.evidence == old.evidence
    assert [(p.line, p.what) for p in new.problems] == [(p.line, p.what) for p in old.problems]


def test_the_faster_parser_agrees_on_the_fixture_markdown():
    """Every Markdown file of the fixtures (topics as the reference's writer left them, and
    the timeline and archive files beside them) parses the same as before."""
    files = sorted(DATA.rglob("*.md"))
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        new, old = parse_topic(text, path.name, strict=False), reference_parse(text, path.name)
        assert (new.items, [(p.line, p.what) for p in new.problems]) == \
            (old.items, [(p.line, p.what) for p in old.problems]), path
