"""Reorganize merges paragraphs that say the same thing and never silently loses a block."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from testkit import json_error, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scriptorium.errors import ConcurrentUpdate, InvalidInput
from scriptorium.memory.citations import block_sources, cited_sources
from scriptorium.memory.reorganize import (Organized, ReorganizeRefused, reorganize,
                                           same_thing)
from scriptorium.memory.search import SearchIndex, search
from scriptorium.memory.transaction import TransactionError
from scriptorium.memory.workspace import Workspace
from scriptorium.memory.writers.embedded import EmbeddedWriter

from search_support import archive, block_ids, open_ws, write_paragraphs

TS = "2026-08-01T10:00:00+00:00"


@pytest.fixture
def ws(homes) -> Workspace:
    """The memory workspace of an empty home of either kind, its search index attached."""
    return homes.open().workspace


@pytest.fixture
def dir_ws(tmp_path: Path) -> Workspace:
    """A directory home's workspace, for the tests that read its git log or SQLite index."""
    return open_ws(tmp_path / "memory")


def turns(ws: Workspace, n: int, session: str = "s") -> list[str]:
    return archive(ws, [(session, f"n{i}", "user", f"turn {i}", TS) for i in range(n)])


def every_id(ws: Workspace) -> set[str]:
    return {i for doc in ws.topic_docs() for b in doc.blocks for i in b.ids}


def git_messages(ws: Workspace) -> list[str]:
    return [c["message"] for c in ws.git.log()]


# -- the crash redo ----------------------------------------------------------------------------


class ForgetfulWriter(EmbeddedWriter):
    """A writer that does not notice what memory already cites (not idempotent)."""

    def write(self, request):
        request.cited = frozenset()
        return super().write(request)


def test_a_turn_written_twice_after_a_crash_redo_ends_up_as_one_paragraph(homes):
    mem = homes.open(ForgetfulWriter(), trigger_tokens=10_000)
    mem.store.create_session("trip", title="Trip")
    mem.store.append_message("trip", {"id": "t0", "role": "user",
                                      "content": "I always want an aisle seat on flights."})
    batch = mem.pending("trip")
    # The install happened, then the process died before the mark: the redo writes it again.
    assert mem.write_batch("trip", batch).failure is None
    assert mem.write_batch("trip", batch).failure is None
    ws = mem.workspace
    doc = ws.topic_docs()[0]
    assert len(doc.blocks) == 2 and doc.blocks[0].text.split("[^")[0] == \
        doc.blocks[1].text.split("[^")[0]
    first, redo = doc.blocks[0].id, doc.blocks[1].id

    report = reorganize(ws)

    assert report.status == "ok" and report.changed_files == [doc.path]
    assert report.merged == [{"kept": first, "aliases": [redo], "path": doc.path,
                              "from": [doc.path], "text": report.merged[0]["text"]}]
    after = ws.read_topic(doc.path)
    assert len(after.blocks) == 1
    block = after.blocks[0]
    assert block.ids == [redo, first] and block.id == first  # ` ^redo ^first`: last is identity
    assert block_sources(ws, after, block) == ["openprogram/trip/t0"]
    assert len(after.evidence) == 1  # the two equivalent footnotes became one
    assert ws.find_block(redo)[1].id == first
    assert [h.block_id for h in search(ws, "aisle seat", top_k=10)] == [first]
    assert git_messages(ws)[0] == "memory: reorganize topics"


# -- merging -----------------------------------------------------------------------------------


def test_near_duplicates_in_two_files_merge_keeping_every_id_and_every_citation(ws):
    ids = turns(ws, 3)
    write_paragraphs(ws, "topics/a.md", [
        [("Dave prefers window seats on long flights.", [ids[0]], "2026-08-01")],
        [("Dave's budget is 400 euros.", [ids[2]], "2026-08-01")]], heading="Dave")
    write_paragraphs(ws, "topics/b.md", [
        [("Dave prefers window seats on long-haul flights.", [ids[1]], "2026-08-03")]],
        heading="Travel")
    kept, absorbed = block_ids(ws, "topics/a.md")[0], block_ids(ws, "topics/b.md")[0]
    before_sources = cited_sources(ws)

    report = reorganize(ws)

    assert report.status == "ok"
    assert sorted(report.changed_files) == ["topics/a.md", "topics/b.md"]
    assert report.merged[0]["kept"] == kept and report.merged[0]["aliases"] == [absorbed]
    assert not (ws.root / "topics/b.md").exists()  # nothing left in it
    doc = ws.read_topic("topics/a.md")
    block = doc.block(kept)
    assert block.ids == [absorbed, kept]
    assert block_sources(ws, doc, block) == ["openprogram/s/n0", "openprogram/s/n1"]
    assert sorted(ev.when for ev in doc.evidence.values()) == [
        "2026-08-01", "2026-08-01", "2026-08-03"]
    assert cited_sources(ws) == before_sources
    assert (report.before_blocks, report.after_blocks) == (3, 2)
    hit = search(ws, "window seats")[0]
    assert hit.block_id == kept and hit.sources == ["openprogram/s/n0", "openprogram/s/n1"]


def test_a_block_link_to_a_merged_paragraph_still_resolves(ws):
    ids = turns(ws, 3)
    write_paragraphs(ws, "topics/a.md", [[("The kiln fires at 1200 degrees.", [ids[0]],
                                           "2026-08-01")]])
    write_paragraphs(ws, "topics/b.md", [[("The kiln fires at 1200 degrees!", [ids[1]],
                                           "2026-08-02")]])
    target = block_ids(ws, "topics/b.md")[0]
    write_paragraphs(ws, "topics/c.md", [[(f"See [the kiln](b.md#^{target}) for the heat.",
                                           [ids[2]], "2026-08-02")]])
    reorganize(ws)
    text = (ws.root / "topics/c.md").read_text()
    assert f"(a.md#^{target})" in text
    assert ws.read_topic("topics/a.md").block(target) is not None


@pytest.mark.parametrize("a,b", [
    ("The meeting is on Monday at 10.", "The meeting is on Monday at 11."),
    ("Dave likes the window seat on long flights.",
     "Dave does not like the window seat on long flights."),
    ("The user prefers tea in the morning.", "The user prefers coffee in the evening."),
    ("Ship it.", "Ship it now please, before the release on the weekend."),
])
def test_paragraphs_that_say_different_things_are_not_merged(ws, a, b):
    assert not same_thing(a, b)
    ids = turns(ws, 2)
    write_paragraphs(ws, "topics/a.md", [[(a, [ids[0]], "2026-08-01")],
                                         [(b, [ids[1]], "2026-08-01")]])
    revision = ws.revision()
    report = reorganize(ws)
    assert report.status == "unchanged" and report.merged == [] and report.changed_files == []
    assert ws.revision() == revision
    assert git_messages(ws)[0] != "memory: reorganize topics"


@pytest.mark.parametrize("a,b", [
    ("The user said: I prefer aisle seats.", "The user said: I prefer aisle seats."),
    ("Dave prefers window seats on long flights.", "dave PREFERS window seats, on long flights"),
    ("用户喜欢喝咖啡。", "用户喜欢喝咖啡！"),
])
def test_the_same_statement_worded_nearly_alike_is_recognised(a, b):
    assert same_thing(a, b)


def test_a_three_way_duplicate_becomes_one_paragraph_with_three_ids(ws):
    ids = turns(ws, 3)
    for i, rel in enumerate(["topics/x.md", "topics/y.md", "topics/z.md"]):
        write_paragraphs(ws, rel, [[("Mara's birthday party is on the 9th of June.",
                                     [ids[i]], "2026-06-01")]])
    report = reorganize(ws)
    assert len(report.merged) == 1 and len(report.merged[0]["aliases"]) == 2
    docs = ws.topic_docs()
    assert [d.path for d in docs] == ["topics/x.md"]
    assert len(docs[0].blocks[0].ids) == 3
    assert block_sources(ws, docs[0], docs[0].blocks[0]) == ids


def test_a_file_that_does_not_parse_is_left_alone_and_reported(ws):
    ids = turns(ws, 2)
    write_paragraphs(ws, "topics/a.md", [[("Same words here for merging.", [ids[0]], "2026-08-01")],
                                         [("Same words here for merging.", [ids[1]], "2026-08-01")]])
    (ws.root / "topics/broken.md").write_text("# Broken\n\nA paragraph with no citation.\n")
    report = reorganize(ws)
    assert report.skipped == ["topics/broken.md"] and report.status == "ok"
    assert (ws.root / "topics/broken.md").read_text().endswith("no citation.\n")


# -- the loss guard ----------------------------------------------------------------------------


def _four_blocks(ws: Workspace) -> list[str]:
    ids = turns(ws, 4)
    write_paragraphs(ws, "topics/a.md", [[(f"Fact number {w} stands alone.", [ids[i]],
                                           "2026-08-01")]
                                         for i, w in enumerate(["one", "two", "three", "four"])])
    return block_ids(ws, "topics/a.md")


def _dropping(n: int):
    """An organizer that deletes the first ``n`` paragraphs (and their definitions)."""

    def organize(stage: Path, workspace, **_options) -> Organized:
        path = stage / "topics/a.md"
        chunks = path.read_text().split("\n\n")
        out, dropped = [], 0
        for chunk in chunks:
            if re.search(r" \^[0-9a-f]{8}$", chunk) and dropped < n:
                dropped += 1
                continue
            out.append(chunk)
        cited = set(re.findall(r"\[\^(e-[0-9a-f]+)\](?!:)", "\n\n".join(out)))
        out = [c for c in out if not (c.startswith("[^") and c[2:c.index("]")] not in cited)]
        path.write_text("\n\n".join(out))
        return Organized([], f"deleted {n}")

    return organize


def test_a_rewrite_that_drops_more_than_a_quarter_of_the_blocks_is_refused(ws):
    ids = _four_blocks(ws)
    revision, log = ws.revision(), git_messages(ws)
    with pytest.raises(ReorganizeRefused, match="2 of 4"):
        reorganize(ws, organizer=_dropping(2))
    assert ws.revision() == revision and git_messages(ws) == log
    assert block_ids(ws, "topics/a.md") == ids
    assert not list(ws.runtime_dir.glob("tx-*"))  # the stage is gone too


def test_dropping_at_most_a_quarter_is_allowed_and_reported(ws):
    ids = _four_blocks(ws)
    report = reorganize(ws, organizer=_dropping(1))
    assert report.status == "ok" and report.dropped == [ids[0]]
    assert block_ids(ws, "topics/a.md") == ids[1:]


def test_ids_kept_as_aliases_count_as_kept(ws):
    ids = _four_blocks(ws)

    def fold_all(stage: Path, workspace) -> Organized:
        path = stage / "topics/a.md"
        text = path.read_text()
        for old in ids[1:]:
            text = text.replace(f" ^{old}", "")
        # every paragraph's claims in one paragraph, all four ids on it
        paragraphs = re.findall(r"^(Fact number .*?)$", text, flags=re.M)
        defs = re.findall(r"^\[\^e-.*$", text, flags=re.M)
        claims = " ".join(p.replace(f" ^{ids[0]}", "") for p in paragraphs)
        path.write_text("# Notes\n\n" + claims + " " + " ".join(f"^{i}" for i in ids[1:])
                        + f" ^{ids[0]}\n\n" + "\n".join(defs) + "\n")
        return Organized([], "folded", merges_reported=False)

    report = reorganize(ws, organizer=fold_all)
    assert report.status == "ok" and report.dropped == []
    assert (report.before_blocks, report.after_blocks) == (4, 1)
    assert report.merged == [{"kept": ids[0], "aliases": ids[1:], "path": "topics/a.md"}]
    assert every_id(ws) == set(ids)


def test_a_reorganize_may_not_cite_new_evidence(ws):
    ids = _four_blocks(ws)
    extra = archive(ws, [("s", "new", "user", "never cited", TS)])[0]
    revision = ws.revision()

    def add_source(stage: Path, workspace) -> Organized:
        path = stage / "topics/a.md"
        text = path.read_text().replace("Fact number one stands alone.",
                                        "Fact number one stands alone.[^e99]", 1)
        path.write_text(text + f"\n[^e99]: Time: `2026-08-01`; Sources: [x]({extra})\n")
        return Organized([], "added")

    with pytest.raises(TransactionError) as info:
        reorganize(ws, organizer=add_source)
    assert info.value.code == "NOT_EVIDENCE"
    assert ws.revision() == revision and block_ids(ws, "topics/a.md") == ids


# -- the transaction around it -----------------------------------------------------------------


def test_nothing_to_merge_changes_nothing(ws):
    _four_blocks(ws)
    revision, log = ws.revision(), git_messages(ws)
    report = reorganize(ws)
    assert report.status == "unchanged" and report.changed_files == [] and report.merged == []
    assert ws.revision() == revision and git_messages(ws) == log


def test_a_workspace_without_topics_reports_empty(ws):
    report = reorganize(ws)
    assert report.status == "empty" and report.before_blocks == 0


def _glaze_twice(ws: Workspace) -> None:
    ids = turns(ws, 2)
    write_paragraphs(ws, "topics/a.md", [[("Same words about the glaze recipe.", [ids[0]],
                                           "2026-08-01")],
                                         [("Same words about the glaze recipe.", [ids[1]],
                                           "2026-08-01")]])


def test_search_follows_a_reorganize_at_once(ws):
    _glaze_twice(ws)
    assert len(search(ws, "glaze")) == 2
    reorganize(ws)
    assert len(search(ws, "glaze")) == 1


def test_the_sqlite_index_follows_a_reorganize_inside_the_transaction(dir_ws):
    _glaze_twice(dir_ws)
    search(dir_ws, "glaze")
    reorganize(dir_ws)
    index = SearchIndex.of(dir_ws)
    assert not index.is_stale()
    assert index.count("claim") == 1


def test_a_busy_workspace_is_a_retryable_concurrent_update(ws):
    _four_blocks(ws)
    held, release = threading.Event(), threading.Event()

    def hold():
        with ws.lock():
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(5)
    try:
        with pytest.raises(ConcurrentUpdate) as info:
            reorganize(ws, lock_timeout=0.2)
        assert info.value.retryable
    finally:
        release.set()
        thread.join()


def test_an_unknown_writer_kind_is_refused(ws):
    with pytest.raises(InvalidInput):
        reorganize(ws, writer_kind="magic")


# -- property: nothing is ever lost ------------------------------------------------------------

SENTENCES = ["The studio opens at nine on weekdays.", "Clay orders arrive every second Tuesday.",
             "The blue glaze needs a slower cooling cycle.", "Nora teaches the Thursday class.",
             "The large kiln is reserved for bisque firings."]


@pytest.mark.slow
@settings(max_examples=examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["topics/a.md", "topics/b.md"]),
                          st.integers(0, len(SENTENCES) - 1), st.integers(0, 3)),
                min_size=1, max_size=7))
def test_reorganize_keeps_every_id_and_citation_and_leaves_no_duplicate(tmp_path_factory,
                                                                        paragraphs):
    ws = open_ws(tmp_path_factory.mktemp("prop") / "memory")
    ids = turns(ws, 4)
    for rel in ("topics/a.md", "topics/b.md"):
        mine = [[(SENTENCES[s], [ids[t]], "2026-08-01")] for r, s, t in paragraphs if r == rel]
        if mine:
            write_paragraphs(ws, rel, mine)
    before_ids, before_sources = every_id(ws), cited_sources(ws)

    reorganize(ws)

    assert every_id(ws) == before_ids
    assert cited_sources(ws) == before_sources
    texts = [b.text.split("[^")[0] for d in ws.topic_docs() for b in d.blocks]
    assert len(texts) == len(set(texts)) == len({s for _, s, _ in paragraphs})
    for doc in ws.topic_docs():
        for block in doc.blocks:  # each statement cites exactly the turns it was written from
            said = {ids[t] for _, s, t in paragraphs if SENTENCES[s] == block.text.split("[^")[0]}
            assert set(block_sources(ws, doc, block)) == said
    assert reorganize(ws).status == "unchanged"  # a second pass finds nothing to do


# -- the llm organizer -------------------------------------------------------------------------

from scriptorium.config import Settings  # noqa: E402

from openai_stub import ScriptedServer, final, reply, tool_call  # noqa: E402


def _llm_settings(server) -> Settings:
    return Settings(llm_base_url=server.base_url, llm_model="stub-model", llm_api_key_env="",
                    llm_timeout_seconds=10)


def _duplicate_pair(ws: Workspace) -> tuple[str, str, str]:
    ids = turns(ws, 2)
    write_paragraphs(ws, "topics/a.md", [
        [("The user prefers aisle seats.", [ids[0]], "2026-08-01")],
        [("The user likes an aisle seat on planes.", [ids[1]], "2026-08-02")]])
    first, second = block_ids(ws, "topics/a.md")
    return first, second, (ws.root / "topics/a.md").read_text()


def test_the_llm_organizer_merges_through_the_same_transaction(ws):
    first, second, text = _duplicate_pair(ws)
    fids = re.findall(r"\[\^(e-[0-9a-f]{10})\]:", text)
    defs = [line for line in text.splitlines() if line.startswith("[^e-")]
    merged = (f"# Notes\n\nThe user prefers aisle seats.[^{fids[0]}][^{fids[1]}] "
              f"^{second} ^{first}\n\n" + "\n".join(defs) + "\n")
    script = [reply(tool_call("read", path="topics/a.md")),
              reply(tool_call("write", path="topics/a.md", content=merged)),
              final("Merged two paragraphs about aisle seats.")]
    with ScriptedServer(script) as server:
        report = reorganize(ws, writer_kind="llm", settings=_llm_settings(server))
        system = server.requests[0]["messages"][0]["content"]
    assert "reorganize" in system.lower() and "^keptid" in system
    assert report.status == "ok" and report.writer == "llm"
    assert report.merged == [{"kept": first, "aliases": [second], "path": "topics/a.md"}]
    doc = ws.read_topic("topics/a.md")
    assert [b.ids for b in doc.blocks] == [[second, first]]
    assert set(block_sources(ws, doc, doc.blocks[0])) == {"openprogram/s/n0", "openprogram/s/n1"}
    assert git_messages(ws)[0] == "memory: reorganize topics"


def test_an_llm_organizer_that_deletes_too_much_is_refused(ws):
    ids = _four_blocks(ws)
    text = (ws.root / "topics/a.md").read_text()
    keep = text.split("\n\n")[:3]  # heading, first paragraph, its definition
    script = [reply(tool_call("write", path="topics/a.md", content="\n\n".join(keep) + "\n")),
              final("Removed what looked obsolete.")]
    revision = ws.revision()
    with ScriptedServer(script) as server:
        with pytest.raises(ReorganizeRefused, match="3 of 4"):
            reorganize(ws, writer_kind="llm", settings=_llm_settings(server))
    assert ws.revision() == revision and block_ids(ws, "topics/a.md") == ids


def test_an_unreachable_model_fails_with_a_model_code_and_changes_nothing(ws):
    _duplicate_pair(ws)
    revision = ws.revision()
    settings = Settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="m", llm_api_key_env="",
                        llm_timeout_seconds=2)
    with pytest.raises(Exception) as info:
        reorganize(ws, writer_kind="llm", settings=settings)
    assert getattr(info.value, "code", "").startswith("MODEL_")
    assert ws.revision() == revision


# -- the command -------------------------------------------------------------------------------


def test_the_reorganize_command_prints_what_changed(homes):
    ws, cli = homes.open().workspace, homes.cli()
    _glaze_twice(ws)
    first, second = block_ids(ws, "topics/a.md")
    result = cli("memory", "reorganize")
    assert result.exit_code == 0
    assert f"merged into ^{first} (topics/a.md): ^{second}" in result.output
    assert "changed topics/a.md" in result.output
    again = cli.json("memory", "reorganize")
    assert again["status"] == "unchanged" and again["changed_files"] == [] and \
        again["merged"] == []
    assert {"status", "changed_files", "merged", "before_blocks", "after_blocks"} <= set(again)


def test_the_reorganize_command_reports_a_refusal_as_one_line(homes, monkeypatch):
    ws, cli = homes.open().workspace, homes.cli()
    _four_blocks(ws)
    import scriptorium.memory.reorganize as mod
    monkeypatch.setattr(mod, "embedded_organizer", _dropping(4))
    result = cli("memory", "reorganize", "--json")
    assert result.exit_code != 0
    assert json_error(result)["code"] == "REORGANIZE_REFUSED"
    assert "refused" in result.stderr and len(result.stderr.strip().splitlines()) == 1
