"""User text never becomes topic syntax in the embedded writer's output.

A message that looks like a block link, a block id, a footnote, a heading or a fence is what
someone said, and memory states it; if the writer copied it into the topic as syntax, the
transaction would reject the batch (INVALID_TOPIC_FORMAT, not retryable) and every later turn
of the branch would wait behind it forever. Real sessions, a real workspace, real installs, on
both kinds of home.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scriptorium.config import load_settings
from scriptorium.errors import InvalidInput
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory
from pgmemkit import Homes

HOSTILE = [
    "See [the plan](plan.md#^abcdef12)",
    "See [the plan](plan.md) and [here](#^abcdef12) and [x](a/b.md#^bad_id!)",
    "Please remember this ^abcdef12",
    "two lines\n[^e-1175dea39c]: Time: `2026-08-01`; Sources: [x](../../sources/a.md#source-1)",
    "[^e1]: Time: `2026-08-01`; Sources: [budget](openprogram/other/n1)",
    "# A heading\n## Another\n```\nfenced\n```\n<!-- comment -->",
    "ends with a citation[^e1] and ^id-1 ^id-2",
    "x]^abc and [^ and ]( and \u2028 line sep \x85 next line \x1c file sep",
]


def fresh_memory(home: Path | Homes, title: str = "Plans", trigger_tokens: int = 1) -> Memory:
    """A session ``s`` on either kind of home (``Homes``) or in a home directory."""
    if isinstance(home, Homes):
        mem = home.open(EmbeddedWriter(), trigger_tokens=trigger_tokens)
    else:
        mem = Memory(home, settings=load_settings(home, {"trigger_tokens": trigger_tokens}),
                     writer=EmbeddedWriter())
    mem.store.create_session("s", title=title)
    return mem


def marked(mem: Memory) -> set[str]:
    return {n.id for n in mem.store.get_nodes("s")
            if n.metadata.get(MARK_KEY) == mem.workspace_id}


@pytest.mark.parametrize("text", HOSTILE)
def test_topic_syntax_in_a_user_message_is_written_as_text_and_the_branch_moves_on(homes, text):
    mem = fresh_memory(homes)
    mem.store.append_message("s", {"id": "u1", "role": "user", "content": text})
    mem.store.append_message("s", {"id": "a1", "role": "assistant", "content": text})
    first = mem.write_session("s")
    assert first.failure is None, first.failure
    mem.store.append_message("s", {"id": "u2", "role": "user", "content": "And the budget?"})
    second = mem.write_session("s")
    assert second.failure is None, second.failure
    assert marked(mem) == {"u1", "a1", "u2"}
    docs = mem.workspace.topic_docs()  # strict parse: raises on any broken rule
    blocks = [b for d in docs for b in d.blocks]
    assert len(blocks) >= 3 and not any(b.links for b in blocks)  # facts and current state
    words = [w for w in text.replace("[", " ").replace("]", " ").split() if w.isalpha()]
    body = "\n".join(b.text for b in blocks)
    assert all(w in body for w in words), "what was said is still stated"


def test_a_title_with_line_breaks_and_syntax_stays_one_heading(homes):
    mem = fresh_memory(homes, title="Trip\n[^e1]: Time: `2026`; Sources: [x](y)\n# second")
    mem.store.append_message("s", {"id": "u1", "role": "user", "content": "Book the train."})
    result = mem.write_session("s")
    assert result.failure is None, result.failure
    (doc,) = mem.workspace.topic_docs()
    assert len(doc.blocks) == 1 and len(doc.evidence) == 1


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                min_size=1, max_size=200)  # the store refuses NUL and lone surrogates
_syntaxy = st.lists(st.sampled_from(
    ["[", "]", "(", ")", "^", "#", "\n", " ", "`", "~", "<!--", "-->", "<a ", "[^", "]:",
     "e1", "abcdef12", ".md", "#^", "Time:", "Sources:", ";", "*", "x", "é"]),
    min_size=1, max_size=40).map("".join)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(turns=st.lists(st.tuples(st.sampled_from(["user", "assistant"]),
                                st.one_of(_text, _syntaxy)), min_size=1, max_size=4),
       title=st.one_of(st.just(""), _text, _syntaxy))
def test_any_user_and_assistant_text_always_installs_and_every_turn_is_marked(turns, title):
    with tempfile.TemporaryDirectory() as tmp:
        mem = fresh_memory(Path(tmp) / "home", title=title, trigger_tokens=16_000)
        ids = []
        for n, (role, text) in enumerate(turns):
            try:
                mem.store.append_message("s", {"id": f"n{n}", "role": role, "content": text})
            except InvalidInput:
                assume(False)  # the store refuses it before anything is stored
            ids.append(f"n{n}")
        expected = {r.node_id for r in mem.branch_records("s")}
        result = mem.write_session("s")
        assert result.failure is None, result.failure
        assert marked(mem) == expected
        mem.workspace.topic_docs()  # every file parses strictly


def test_an_llm_that_copies_a_link_verbatim_gets_a_precise_rejection_and_marks_nothing(
        homes, monkeypatch):
    """The model writes what it likes; the transaction names the broken rule, the repair run
    is told it, and nothing is marked while the topic would not parse."""
    import json

    from openai_stub import ScriptedServer, final, reply, tool_call
    from scriptorium.memory.writers.llm import LLMWriter

    monkeypatch.setenv("SCRIPTORIUM_TEST_LLM_KEY", "sk-test")

    def copies_verbatim(body):
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        turn = next(json.loads(line) for line in task.splitlines()
                    if line.startswith('{"ref":'))
        return reply(tool_call("write", path="topics/plans.md", content=(
            f"# Plans\n\n{turn['content']}[^e1]\n\n"
            f"[^e1]: Time: `undated`; Sources: [plan]({turn['ref']})\n")))

    with ScriptedServer([copies_verbatim, final(), copies_verbatim, final()]) as server:
        writer = LLMWriter(base_url=server.base_url, model="stub-model",
                           api_key_env="SCRIPTORIUM_TEST_LLM_KEY", timeout_seconds=5.0)
        mem = homes.open(writer)
        mem.store.create_session("s", title="Plans")
        mem.store.append_message("s", {"id": "u1", "role": "user", "content": HOSTILE[0]})
        result = mem.write_session("s")
        repair_prompt = json.dumps(server.requests[2]["messages"])
    assert result.failure is not None and result.failure.reason_code == "COMMIT_REJECTED"
    assert "dangling block link ^abcdef12" in result.failure.message
    assert "dangling block link ^abcdef12" in repair_prompt
    assert marked(mem) == set()
