"""Normalising only what a write changed gives, byte for byte, what normalising the whole
file gives (scriptorium.memory.normalize_edit), and it reads only what changed."""

from __future__ import annotations

from hypothesis import assume, given, settings, strategies as st

from parse_counting import count_parsed
from test_topics_properties import link_for, resolve
from testkit import examples

from scriptorium.memory.normalize import normalize_topic
from scriptorium.memory.normalize_edit import normalize_edit
from scriptorium.memory.topics import parse_topic

P = "topics/a/b.md"
SETTINGS = settings(max_examples=examples(150), deadline=None)


handles = st.sampled_from(["p/t/m1", "p/t/m2", "q/u/m3", "../../sources/p_t.md#m1", "missing"])
whens = st.sampled_from(["2026", "2026-08", "2026-08-01", "undated"])
words = st.sampled_from(["The kiln is hot.", "Glaze 3 fires.", "x^2 grows", "Café ☕",
                         "See [t](other.md#^b1).", "two\nlines", ""])


@st.composite
def chunk(draw, fids: list[str], kinds: tuple[str, ...] = ("para", "para", "para", "heading",
                                                             "def", "junk"),
          define_all: bool = False) -> list[str]:
    """What a writer adds: a paragraph citing local labels (and maybe an existing footnote),
    its definitions, sometimes a heading or a stray line."""
    kind = draw(st.sampled_from(kinds))
    if kind == "heading":
        return [draw(st.sampled_from(["## Values", "## Notes", "# Title", "### Deep"]))]
    if kind == "junk":
        return [draw(st.sampled_from(["", "   ", "^b1", "plain words", "<a id=\"x\"></a>",
                                      "[^e-zzzzzzzzzz]: broken", "\n"]))]
    labels = draw(st.lists(st.sampled_from(["e1", "e2", "e3", "e9"]
                                           + [f for f in fids[:3]]), min_size=0, max_size=3))
    if kind == "def":
        labels = labels or ["e1"]
        return [f"[^{label}]: Time: `{draw(whens)}`; Sources: [w]({draw(handles)})"
                for label in labels]
    body = draw(words) + "".join(f"[^{label}]" for label in labels)
    body += draw(st.sampled_from(["", " ^b1", " ^new1", " ^b2 ^b9"]))
    defs = [f"[^{label}]: Time: `{draw(whens)}`; Sources: [w]({draw(handles)}), "
            f"[v]({draw(handles)})" for label in dict.fromkeys(labels)
            if not label.startswith("e-") and (define_all or draw(st.integers(0, 3)))]
    return [body, "\n".join(defs)] if defs else [body]


@st.composite
def committed_files(draw) -> str:
    """What normalising a writer's first file gave (committed if it parses strictly)."""
    groups: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        groups += draw(chunk([], ("para", "para", "heading"), define_all=True))
    groups += draw(chunk([], ("para",), define_all=True))
    return normalize_topic("\n\n".join(groups), P, committed_ids=set(), resolve=resolve,
                           link_for=link_for)


@st.composite
def edits(draw) -> tuple[str, str, set[str]]:
    committed = draw(committed_files())
    assume(committed and not parse_topic(committed, P, strict=False).problems)  # committable
    doc = parse_topic(committed, P)
    ids = {i for b in doc.blocks for i in b.ids} | draw(st.sets(st.sampled_from(["b1", "b2"])))
    fids = list(doc.evidence)
    groups = committed[:-1].split("\n\n")
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "insert", "append", "replace", "delete", "grow"]))
        at = draw(st.integers(0, len(groups)))
        if op == "append":
            groups += draw(chunk(fids))
        elif op == "insert":
            groups[at:at] = draw(chunk(fids))
        elif groups and op == "delete":
            del groups[min(at, len(groups) - 1)]
        elif groups and op == "replace":
            groups[min(at, len(groups) - 1):min(at, len(groups) - 1) + 1] = draw(chunk(fids))
        elif groups:  # grow: a paragraph gains a citation, a definition group a line
            i = min(at, len(groups) - 1)
            if groups[i].startswith("[^"):
                groups[i] += f"\n[^e3]: Time: `2026`; Sources: [w]({draw(handles)})"
            else:
                groups[i] = groups[i].replace(" ^", "[^e3] ^", 1) + "\n\n[^e3]: Time: " \
                    "`2026`; Sources: [w](p/t/m2)"
    staged = "\n\n".join(groups) + draw(st.sampled_from(["\n", "", "\n\n\n"]))
    return committed, staged, ids


@SETTINGS
@given(edits(), st.sets(st.sampled_from(["aaaaaaaa", "bbbbbbbb"])))
def test_normalising_only_the_changed_paragraphs_gives_what_the_whole_file_gives(case, taken):
    committed, staged, ids = case
    whole_taken, edit_taken = set(taken), set(taken)
    whole = normalize_topic(staged, P, committed_ids=ids, resolve=resolve, link_for=link_for,
                            taken_ids=whole_taken)
    spliced = normalize_edit(committed, staged, P, committed_ids=ids, resolve=resolve,
                             link_for=link_for, taken_ids=edit_taken)
    if spliced is None:
        assert edit_taken == taken  # declined: nothing changed
    else:
        assert spliced == whole
        assert edit_taken == whole_taken


def _long_topic(paragraphs: int) -> str:
    raw = "# Kiln log\n\n## Values\n\n" + "\n\n".join(
        f"Batch {n} fires at {n % 12} o'clock.[^e{n}]\n\n"
        f"[^e{n}]: Time: `2026-08-01`; Sources: [kiln](p/t/m{n})" for n in range(paragraphs))
    return normalize_topic(raw, P, committed_ids=set(), resolve=resolve, link_for=link_for)


def test_a_paragraph_added_to_a_long_topic_is_normalised_without_parsing_the_rest(monkeypatch):
    committed = _long_topic(300)
    ids = {i for b in parse_topic(committed, P).blocks for i in b.ids}
    staged = committed.replace("## Values\n\n", "## Values\n\nThe state is warm.[^e1]\n\n"
                               "[^e1]: Time: `2026`; Sources: [s](p/t/m1)\n\n", 1) \
        + "\nBatch new fires at noon.[^e2]\n\n[^e2]: Time: `2026`; Sources: [k](q/u/m3)\n"
    parsed = count_parsed(monkeypatch)
    resolved: list[str] = []

    def counting_resolve(path, target):
        resolved.append(target)
        return resolve(path, target)

    spliced = normalize_edit(committed, staged, P, committed_ids=ids, resolve=counting_resolve,
                             link_for=link_for)
    assert spliced is not None
    assert sum(parsed) < 400 and len(resolved) <= 4  # the two new paragraphs, not 300 old
    parsed.clear()
    assert spliced == normalize_topic(staged, P, committed_ids=ids, resolve=resolve,
                                      link_for=link_for)
    assert sum(parsed) >= len(staged) - 2  # the whole file, for comparison


def test_a_hand_edited_file_with_fenced_code_is_normalised_whole():
    committed = _long_topic(3)
    staged = committed + "\n```\ncode\n\nmore\n```\n"
    assert normalize_edit(committed, staged, P, committed_ids=set(), resolve=resolve,
                          link_for=link_for) is None
