"""A model-driven write may take nothing from the rest of memory, and a turn that lost its
citation anyway is an error that verify reports and ``--repair`` re-offers.

* The transaction rejects (FOREIGN_CITATION_REMOVED) a write that removes a paragraph citing
  turns outside its batch, or drops such a citation from a paragraph it keeps; a paragraph
  the same run created may go.
* ``memory verify``: a marked turn that topics cited once (the workspace history shows it)
  and no topic cites now is ``citation_lost`` (error); ``--repair`` takes its mark back and the
  next write writes it again. A turn a writer folded into another's paragraph was never cited
  and stays ``marked_not_cited`` (info).

The model is the scripted OpenAI-compatible server (``openai_stub``) behind the real client.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from openai_stub import ScriptedServer, final, reply, tool_call
from scriptorium.config import load_settings
from scriptorium.memory.citations import cited_sources
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.verify import verify
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writers.llm import LLMWriter
from scriptorium.memory.writing import Memory
from pgmemkit import Homes
from testkit import Cli

KEY_ENV = "SCRIPTORIUM_TEST_LLM_KEY"


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")


def memory(home: Path | Homes, writer=None, trigger_tokens: int = 16_000) -> Memory:
    """Memory on either kind of home (``Homes``), or on a home directory (for the test that
    edits a topic file by hand)."""
    if isinstance(home, Homes):
        return home.open(writer or EmbeddedWriter(), trigger_tokens=trigger_tokens)
    return Memory(home, settings=load_settings(home, {"trigger_tokens": trigger_tokens}),
                  writer=writer or EmbeddedWriter())


def llm(server: ScriptedServer) -> LLMWriter:
    return LLMWriter(base_url=server.base_url, model="stub-model", api_key_env=KEY_ENV,
                     timeout_seconds=5.0)


def other_session_written(home: Path | Homes) -> Memory:
    """Session "a", written by the embedded writer into topics/trip.md."""
    mem = memory(home)
    mem.store.create_session("a", title="Trip")
    mem.store.append_message("a", {"id": "u1", "role": "user", "content": "Book Lisbon."})
    mem.store.append_message("a", {"id": "a1", "role": "assistant", "content": "Booked it."})
    assert mem.write_session("a").failure is None
    return mem


def add_session_b(mem: Memory) -> None:
    mem.store.create_session("b", title="Trip")
    mem.store.append_message("b", {"id": "v1", "role": "user", "content": "Porto in May."})


def refs_in(body: dict) -> list[str]:
    task = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return [json.loads(line)["ref"] for line in task.splitlines() if line.startswith('{"ref":')]


def paragraph(ref: str, label: str = "e1", text: str = "The user chose Porto.") -> str:
    return f"{text}[^{label}]\n\n[^{label}]: Time: `undated`; Sources: [porto]({ref})\n"


def replaces_the_file(body: dict):
    """A model that rewrites topics/trip.md with only its own batch: session a's paragraph
    is gone."""
    return reply(tool_call("write", path="topics/trip.md",
                           content="# Trip\n\n" + paragraph(refs_in(body)[0])))


def appends(body: dict):
    return reply(tool_call("edit", path="topics/trip.md", old_string="# Trip\n",
                           new_string="# Trip\n\n" + paragraph(refs_in(body)[0])))


def marked(mem: Memory, sid: str) -> set[str]:
    return {n.id for n in mem.store.get_nodes(sid)
            if n.metadata.get(MARK_KEY) == mem.workspace_id}


def test_a_write_that_deletes_another_sessions_paragraph_is_rejected_precisely(homes):
    mem = other_session_written(homes)
    before = (mem.workspace.topics_dir / "trip.md").read_text()
    add_session_b(mem)
    with ScriptedServer([replaces_the_file, final(), replaces_the_file, final()]) as server:
        result = memory(homes, llm(server)).write_session("b")
        repair_prompt = json.dumps(server.requests[2]["messages"])
    assert result.failure.reason_code == "COMMIT_REJECTED"
    assert "FOREIGN_CITATION_REMOVED" in result.failure.message
    assert "openprogram/a/" in result.failure.message
    assert "FOREIGN_CITATION_REMOVED" in repair_prompt  # the repair run was told why
    assert (mem.workspace.topics_dir / "trip.md").read_text() == before
    assert marked(mem, "b") == set()
    assert verify(mem).kinds("citation_lost") == []


def test_a_repair_run_that_keeps_the_other_paragraph_is_installed(homes):
    mem = other_session_written(homes)
    add_session_b(mem)
    with ScriptedServer([replaces_the_file, final(), appends, final()]) as server:
        result = memory(homes, llm(server)).write_session("b")
    assert result.failure is None, result.failure
    assert marked(mem, "b") == {"v1"}
    mem.workspace.refresh()  # this reader's view of what another writer installed
    assert {"openprogram/a/u1", "openprogram/a/a1", "openprogram/b/v1"} <= \
        cited_sources(mem.workspace)


def test_blanking_another_sessions_citation_inside_a_kept_paragraph_is_rejected(homes):
    mem = other_session_written(homes)
    text = (mem.workspace.topics_dir / "trip.md").read_text()
    block_id = re.search(r" \^([0-9a-f]{8})$", text, re.M).group(1)
    add_session_b(mem)

    def blanks(body):  # keeps the ^id, but the paragraph now cites only this batch
        return reply(tool_call("write", path="topics/trip.md", content=(
            f"# Trip\n\nThe user chose Porto.[^e1] ^{block_id}\n\n"
            f"[^e1]: Time: `undated`; Sources: [porto]({refs_in(body)[0]})\n")))

    with ScriptedServer([blanks, final(), blanks, final()]) as server:
        result = memory(homes, llm(server)).write_session("b")
    assert result.failure.reason_code == "COMMIT_REJECTED"
    assert "FOREIGN_CITATION_REMOVED" in result.failure.message
    assert f"^{block_id}" in result.failure.message
    assert marked(mem, "b") == set()


def test_a_paragraph_the_same_run_created_may_be_removed_by_its_next_batch(homes):
    mem = memory(homes, trigger_tokens=1)  # one turn per batch: two batches in one run
    mem.store.create_session("b", title="Trip")
    mem.store.append_message("b", {"id": "v1", "role": "user", "content": "Porto in May."})
    mem.store.append_message("b", {"id": "v2", "role": "user", "content": "No, Faro."})

    def first(body):
        return reply(tool_call("write", path="topics/trip.md",
                               content="# Trip\n\n" + paragraph(refs_in(body)[0])))

    def second(body):  # the correction replaces the paragraph the first batch wrote
        return reply(tool_call("write", path="topics/trip.md", content="# Trip\n\n" + paragraph(
            refs_in(body)[0], text="The user chose Faro, not Porto.")))

    with ScriptedServer([first, final(), second, final()]) as server:
        mem = memory(homes, llm(server), trigger_tokens=1)
        result = mem.write_session("b")
    assert result.failure is None, result.failure
    assert marked(mem, "b") == {"v1", "v2"}


# -- verify: a turn that lost its citation ------------------------------------------------------


def test_a_turn_whose_paragraph_was_deleted_is_an_error_and_repair_rewrites_it(home):
    mem = other_session_written(home)
    path = mem.workspace.topics_dir / "trip.md"
    path.write_text("# Trip\n")  # a hand edit (or a restored old copy) drops the paragraph
    report = verify(mem)
    assert not report.ok
    lost = report.kinds("citation_lost")
    assert sorted(p.node_id for p in lost) == ["a1", "u1"]
    assert report.kinds("marked_not_cited") == []

    cli = Cli(home)
    assert cli("memory", "verify").exit_code == 1
    repaired = cli.json("memory", "verify", "--repair")
    assert repaired["ok"] is True
    assert marked(mem, "a") == set()  # offered again
    assert memory(home).write_session("a").failure is None
    assert marked(mem, "a") == {"u1", "a1"}
    assert {"openprogram/a/u1", "openprogram/a/a1"} <= cited_sources(mem.workspace)
    after = verify(mem)
    assert after.ok and after.problems == []


def test_a_folded_turn_that_was_never_cited_stays_information(homes):
    class Folding(EmbeddedWriter):
        def write(self, request):
            from dataclasses import replace
            return super().write(replace(request, batch=list(request.batch)[:1]))

    mem = memory(homes, Folding())
    mem.store.create_session("a", title="Trip")
    mem.store.append_message("a", {"id": "u1", "role": "user", "content": "Book Lisbon."})
    mem.store.append_message("a", {"id": "a1", "role": "assistant", "content": "Booked it."})
    assert mem.write_session("a").failure is None
    report = verify(mem)
    assert report.ok
    assert [p.node_id for p in report.kinds("marked_not_cited")] == ["a1"]
    assert report.kinds("citation_lost") == []
