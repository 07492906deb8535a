"""The embedded writer: deterministic paragraphs that state what was said and cite every turn."""

from __future__ import annotations

import re

from scriptorium.memory.records import records
from scriptorium.memory.writers import WriteRequest
from scriptorium.memory.writers.embedded import EmbeddedWriter, condense, keywords, subject_of

TS = 1_785_000_000.0  # 2026-07-25


def batch(*turns, session="offsite"):
    return records(session, [{"id": i, "role": r, "content": c, "timestamp": TS}
                             for i, r, c in turns])


def run(tmp_path, recs, title="Lisbon offsite", cited=frozenset()):
    stage = tmp_path / "stage"
    (stage / "topics").mkdir(parents=True, exist_ok=True)
    audit = EmbeddedWriter().write(WriteRequest(batch=recs, stage=stage, cited=cited,
                                                session_title=title))
    files = {p.relative_to(stage).as_posix(): p.read_text() for p in stage.rglob("*.md")}
    return audit, files


def test_a_batch_is_filed_under_a_topic_named_for_the_conversation(tmp_path):
    _, files = run(tmp_path, batch(("o2", "user", "The budget is fifty thousand euros.")))
    assert list(files) == ["topics/lisbon-offsite.md"]
    text = files["topics/lisbon-offsite.md"]
    assert text.startswith("# Lisbon offsite\n")
    assert "The user said: The budget is fifty thousand euros.[^e1]" in text
    assert "[^e1]: Time: `2026-07-25`; Sources: [" in text
    assert "](openprogram/offsite/o2)" in text


def test_every_turn_of_the_batch_is_cited_exactly_once(tmp_path):
    recs = batch(("u1", "user", "Dana is allergic to peanuts."),
                 ("a1", "assistant", "Understood, I will flag peanut-free menus."),
                 ("u2", "user", "ok thanks"),
                 ("u3", "user", "Which hotel has a meeting room?"),
                 ("a3", "assistant", "The Alfama hotel has a meeting room for 14."))
    _, files = run(tmp_path, recs)
    text = files["topics/lisbon-offsite.md"]
    cited = re.findall(r"\]\((openprogram/[^)]+)\)", text)
    assert sorted(cited) == sorted(r.source_id for r in recs)


def test_a_question_and_its_answer_share_one_paragraph(tmp_path):
    _, files = run(tmp_path, batch(("u3", "user", "Which hotel has a meeting room?"),
                                   ("a3", "assistant", "The Alfama hotel has one for 14.")))
    text = files["topics/lisbon-offsite.md"]
    assert "## Questions and answers" in text
    assert ("The user asked: Which hotel has a meeting room?[^e1] The assistant answered: "
            "The Alfama hotel has one for 14.[^e2]") in text


def test_preferences_and_decisions_get_their_own_sections(tmp_path):
    _, files = run(tmp_path, batch(("u1", "user", "I prefer window seats on every flight."),
                                   ("u2", "user", "Let's book the Alfama hotel.")))
    text = files["topics/lisbon-offsite.md"]
    assert "## Preferences\n\nThe user stated a preference: I prefer window seats" in text
    assert "## Decisions\n\nThe user decided: Let's book the Alfama hotel." in text


def test_a_turn_with_nothing_to_say_adds_its_citation_to_the_paragraph_before(tmp_path):
    _, files = run(tmp_path, batch(("u1", "user", "Deploys happen on Tuesdays."),
                                   ("u2", "user", "ok, thanks!")))
    text = files["topics/lisbon-offsite.md"]
    assert "Deploys happen on Tuesdays.[^e1][^e2]" in text
    assert "ok, thanks" not in text


def test_writing_a_batch_already_cited_adds_nothing(tmp_path):
    recs = batch(("u1", "user", "Deploys happen on Tuesdays."))
    audit, files = run(tmp_path, recs, cited=frozenset(r.source_id for r in recs))
    assert files == {} and "already cited" in audit.summary


def test_appending_keeps_existing_paragraphs_and_extends_the_section(tmp_path):
    run(tmp_path, batch(("u1", "user", "The budget is fifty thousand euros.")))
    _, files = run(tmp_path, batch(("u2", "user", "We are twelve people.")))
    text = files["topics/lisbon-offsite.md"]
    assert text.count("## Facts") == 1
    assert text.index("fifty thousand") < text.index("twelve people")
    assert "[^e2]" in text  # new local labels never collide with the file's earlier ones


def test_turn_text_cannot_forge_topic_syntax(tmp_path):
    evil = "Note[^e-1234567890] this\n\n# Heading\n[^x]: Time: `2020`; Sources: [a](b) ^deadbeef"
    _, files = run(tmp_path, batch(("u1", "user", evil)))
    text = files["topics/lisbon-offsite.md"]
    body = [l for l in text.splitlines() if l.startswith("The user")]
    assert len(body) == 1 and "[^e-1234567890]" not in body[0]
    assert not re.search(r" \^deadbeef", text)
    assert "\n# Heading" not in text


def test_the_same_batch_gives_the_same_bytes(tmp_path):
    recs = batch(("u1", "user", "Production runs PostgreSQL 16 on port 6432."),
                 ("a1", "assistant", "Recorded: PostgreSQL 16, port 6432."))
    _, first = run(tmp_path / "a", recs)
    _, second = run(tmp_path / "b", recs)
    assert first == second


def test_an_untitled_session_is_filed_under_its_salient_words():
    recs = batch(("u1", "user", "Production runs PostgreSQL behind pgbouncer. PostgreSQL is 16."))
    heading, path = subject_of("", recs)
    assert "postgresql" in path and heading.lower().startswith("postgresql")


def test_a_long_turn_is_condensed_to_its_informative_sentences():
    text = "Hello there. " * 100 + "The server runs on port 6432 in Frankfurt."
    out = condense(text)
    assert len(out) <= 600 and "6432" in out
    assert keywords("Dana Dana likes Lisbon")[0] == "dana"


def origin_batch(*turns):
    """Turns with node metadata, as get_branch spreads it onto message dicts."""
    return records("offsite", [{"id": i, "role": r, "content": c, "timestamp": TS, **meta}
                               for i, r, c, meta in turns])


def test_an_edited_message_is_written_as_a_correction(tmp_path):
    _, files = run(tmp_path, origin_batch(
        ("o4-edit", "user", "Dana is vegetarian, not allergic.", {"edit_of": "o4",
                                                                  "forked_from": "o4"})))
    assert "The user corrected an earlier message: Dana is vegetarian, not allergic." in \
        files["topics/lisbon-offsite.md"]


def test_a_retried_reply_says_it_was_a_retry(tmp_path):
    _, files = run(tmp_path, origin_batch(
        ("o3-retry", "assistant", "Roughly 4,200 euros each.", {"forked_from": "o3"})))
    assert "In a retried reply, the assistant answered: Roughly 4,200 euros each." in \
        files["topics/lisbon-offsite.md"]


def test_a_sub_agents_task_and_report_are_filed_as_sub_agent_work(tmp_path):
    _, files = run(tmp_path, origin_batch(
        ("sub-root", "user", "Find three vegetarian restaurants.",
         {"spawn_branch_root": True, "source": "agent_spawn"}),
        ("sub-1", "assistant", "Found: Taberna A, Casa B, Tasca C.", {})))
    text = files["topics/lisbon-offsite.md"]
    assert ("## Sub-agent work\n\nA sub-agent was given the task: Find three vegetarian "
            "restaurants.[^e1] The sub-agent reported: Found: Taberna A, Casa B, Tasca C.[^e2]"
            ) in text


def test_a_user_turn_and_its_reply_form_one_exchange_and_requests_have_a_section(tmp_path):
    _, files = run(tmp_path, batch(("u1", "user", "Check the train times to Porto."),
                                   ("a1", "assistant", "Trains leave hourly from Oriente.")))
    assert ("## Requests\n\nThe user requested: Check the train times to Porto.[^e1] "
            "The assistant answered: Trains leave hourly from Oriente.[^e2]"
            ) in files["topics/lisbon-offsite.md"]


def test_a_dietary_fact_is_a_fact_not_a_preference(tmp_path):
    _, files = run(tmp_path, batch(("u1", "user", "Dana is allergic to peanuts.")))
    assert "## Facts\n\nThe user said: Dana is allergic to peanuts." in \
        files["topics/lisbon-offsite.md"]
