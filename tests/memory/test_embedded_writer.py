"""The embedded writer: facts that hold, each citing its turns, filed by subject."""

from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st

from scriptorium.config import load_settings
from scriptorium.memory.records import records
from scriptorium.memory.search import search
from scriptorium.memory.topics import parse_topic
from scriptorium.memory.writers import WriteRequest
from scriptorium.memory.writers.embedded import EmbeddedWriter, keywords, subject_of
from scriptorium.memory.writers.facts import (ACTIONS, ANSWERS, CONSTRAINTS, DATES, DECISIONS,
                                              PEOPLE, PREFERENCES, QUESTIONS, VALUES, facts_of,
                                              resolve_lines)
from scriptorium.memory.writing import Memory

TS = 1_785_000_000.0  # 2026-07-25


def batch(*turns, session="offsite"):
    return records(session, [{"id": i, "role": r, "content": c, "timestamp": TS}
                             for i, r, c in turns])


def run(tmp_path, recs, title="Lisbon offsite", cited=frozenset(), line=frozenset()):
    stage = tmp_path / "stage"
    (stage / "topics").mkdir(parents=True, exist_ok=True)
    audit = EmbeddedWriter().write(WriteRequest(batch=recs, stage=stage, cited=cited,
                                                session_title=title, line=line))
    files = {p.relative_to(stage).as_posix(): p.read_text() for p in stage.rglob("*.md")}
    return audit, files


def kinds(*turns):
    return [(f.kind, f.text) for f in facts_of(batch(*turns))]


# -- facts, labelled by what they are --------------------------------------------------------


def test_a_question_in_the_assistants_mouth_is_a_question_not_a_commitment():
    (kind, text), = kinds(("a1", "assistant", "Should we look at the load balancer first?"))
    assert kind == QUESTIONS and text.startswith("The assistant asked:")
    assert "committed" not in text


def test_a_decision_is_labelled_only_when_something_was_decided():
    assert kinds(("u1", "user", "We decided to go with PagerDuty."))[0][0] == DECISIONS
    assert all(k != DECISIONS for k, _ in kinds(("u1", "user", "Maybe PagerDuty or Opsgenie.")))


def test_action_items_name_their_owner():
    facts = facts_of(batch(("u1", "user", "Bo will review the runbook by Friday."),
                           ("a1", "assistant", "I'll draft the escalation policy."),
                           ("u2", "user", "Can you send the agenda to the team?")))
    owners = [(f.kind, f.owner) for f in facts if f.kind == ACTIONS]
    # a request put as a question is work for the one asked, not an open question
    assert owners == [(ACTIONS, "Bo"), (ACTIONS, "the assistant"), (ACTIONS, "the assistant")]
    assert facts[0].text.startswith("Bo to do:")


def test_values_dates_roles_preferences_and_constraints_are_told_apart():
    got = dict(kinds(("u1", "user", "The venue budget is 4000 euros."),
                     ("u2", "user", "The offsite starts on 14 May."),
                     ("u3", "user", "Dana is our travel coordinator."),
                     ("u4", "user", "I prefer window seats."),
                     ("u5", "user", "Dana is allergic to peanuts.")))
    assert got[VALUES].startswith("Venue budget: 4000 euros")
    assert "14 May" in got[DATES]
    assert got[PEOPLE].startswith("Dana: travel coordinator")
    assert "window seats" in got[PREFERENCES]
    assert "peanuts" in got[CONSTRAINTS]


def test_a_user_question_answered_by_the_next_turn_is_an_answered_question():
    facts = facts_of(batch(("u1", "user", "Which hotel has a meeting room?"),
                           ("a1", "assistant", "The Alfama hotel has a meeting room.")))
    assert [f.kind for f in facts] == [ANSWERS]  # the answer is told once, with its question
    assert [r.node_id for r in facts[0].records] == ["u1", "a1"]
    assert "Answer (the assistant): The Alfama hotel has a meeting room." in facts[0].text


def test_a_question_answered_with_a_value_is_told_by_the_value_citing_both_turns():
    facts = facts_of(batch(("a1", "assistant", "What alert threshold do you want?"),
                           ("u1", "user", "Set the alert threshold to 160 ms.")))
    assert [f.kind for f in facts] == [VALUES]
    assert facts[0].key == "alert threshold" and facts[0].value == "160 ms"
    assert [r.node_id for r in facts[0].records] == ["a1", "u1"]


def test_a_request_the_other_side_commits_to_is_one_action_item_citing_both():
    facts = facts_of(batch(("u1", "user", "Can you send Joana the final headcount by Wednesday?"),
                           ("a1", "assistant", "I'll send Joana the final headcount by Wednesday.")))
    assert [(f.kind, f.owner) for f in facts] == [(ACTIONS, "the assistant")]
    assert facts[0].text == "The assistant to do: send Joana the final headcount by Wednesday."
    assert [r.node_id for r in facts[0].records] == ["u1", "a1"]


def test_a_request_answered_at_once_is_an_answered_question_not_an_open_action():
    facts = facts_of(batch(("u1", "user", "Remind me why we picked this approach."),
                           ("a1", "assistant", "It keeps the moving parts small.")))
    assert [f.kind for f in facts] == [ANSWERS]
    assert "Answer (the assistant): It keeps the moving parts small." in facts[0].text


def test_an_acknowledgement_that_says_the_turn_back_adds_no_claim():
    facts = facts_of(batch(("u1", "user", "Flights must land before noon on 14 October."),
                           ("a1", "assistant", "Noted: arrivals before noon on 14 October.")))
    assert [(f.kind, [r.node_id for r in f.records]) for f in facts] == \
        [(CONSTRAINTS, ["u1", "a1"])]


def test_a_count_without_a_named_measure_is_on_the_line_of_what_it_counts():
    facts = resolve_lines(facts_of(batch(
        ("u1", "user", "We expect 18 attendees."),
        ("u2", "user", "The attendee count changed, we are 20 attendees now."))))
    assert [(f.key, f.value, f.replaces) for f in facts] == \
        [("attendees", "18 attendees", ""), ("attendees", "20 attendees", "18 attendees")]
    assert facts[1].text.startswith("Attendees: 20 (the user:")


def test_every_turn_of_the_batch_is_cited_even_those_with_nothing_to_note(tmp_path):
    recs = batch(("u0", "user", "ok"),
                 ("u1", "user", "Dana is allergic to peanuts."),
                 ("a1", "assistant", "Understood."),
                 ("u2", "user", "ok thanks"))
    _, files = run(tmp_path, recs)
    cited = set(re.findall(r"\]\((openprogram/[^)]+)\)", files["topics/lisbon-offsite.md"]))
    assert cited == {r.source_id for r in recs}
    assert "ok thanks" not in files["topics/lisbon-offsite.md"]


# -- what holds --------------------------------------------------------------------------------


def test_a_correction_on_the_same_line_supersedes_the_older_value(tmp_path):
    recs = batch(("u1", "user", "Set the alert threshold to 160 ms."),
                 ("a1", "assistant", "Done, the alert threshold is 160 ms."),
                 ("u2", "user", "Make it 150 instead."))
    _, files = run(tmp_path, recs, title="Alerting")
    text = files["topics/alerting.md"]
    assert "Alert threshold: 150 ms (the user: Make it 150 instead.) (replaces 160 ms)" in text
    olds = [l for l in text.splitlines() if l.startswith("Alert threshold: 160 ms")]
    # the assistant's confirmation adds its turn to the claim it confirms
    assert len(olds) == 1 and re.fullmatch(
        r"Alert threshold: 160 ms \(the user: Set the alert threshold to 160 ms\.\) "
        r"\(superseded: now 150 ms\)\[\^e\d+\]\[\^e\d+\]", olds[0])
    state = text.split("## Current state", 1)[1].split("\n## ", 1)[0]
    assert "- Alert threshold: 150 ms (was 160 ms)[^" in state


def test_a_value_keeps_its_scale_word_and_unit():
    facts = facts_of(batch(("u1", "user", "The venue budget is 359 thousand euros."),
                           ("u2", "user", "We expect 2 million users by June.")))
    assert [(f.key, f.value) for f in facts if f.kind == VALUES] == \
        [("venue budget", "359 thousand euros"), ("users", "2 million users")]


def test_values_on_different_lines_do_not_supersede_each_other():
    facts = facts_of(batch(("u1", "user", "The venue budget is 4000 euros."),
                           ("u2", "user", "We expect 40 guests.")))
    resolve_lines(facts)
    assert not any(f.superseded_by or f.replaces for f in facts)


def test_a_later_batch_says_what_it_replaces_and_leaves_committed_claims_as_written(home):
    mem = Memory(home, settings=load_settings(home))
    mem.store.create_session("s", title="Alerting")
    for i, (role, text) in enumerate([("user", "Set the alert threshold to 160 ms."),
                                      ("assistant", "Noted.")]):
        mem.store.append_message("s", {"id": f"n{i}", "role": role, "content": text})
    assert mem.write_session("s").failure is None
    before = (mem.workspace.root / "topics/alerting.md").read_text()
    mem.store.append_message("s", {"id": "n2", "role": "user",
                                   "content": "Change it to 150 instead."})
    assert mem.write_session("s").failure is None  # a write changes only its own paragraphs
    text = (mem.workspace.root / "topics/alerting.md").read_text()
    parse_topic(text, "topics/alerting.md")  # strict: still a valid topic
    assert "Alert threshold: 150 ms (the user: Change it to 150 instead.) (replaces 160 ms)" \
        in text
    old_state = before.split("## Current state", 1)[1].split("\n## ", 1)[0]
    for line in before.splitlines():  # every committed claim is still there, unchanged
        if line not in old_state:
            assert line in text.splitlines()
    # the current state is rewritten in place: same block, every citation it had kept
    old_block = parse_topic(before, "t.md").blocks[0]
    new_block = parse_topic(text, "t.md").blocks[0]
    assert new_block.headings[-1] == "Current state" and new_block.id == old_block.id
    assert set(old_block.citations) < set(new_block.citations)
    assert new_block.claims[0].text.startswith("- Alert threshold: 150 ms (was 160 ms)")


def test_a_claim_from_another_branch_is_not_superseded(home):
    mem = Memory(home, settings=load_settings(home))
    mem.store.create_session("s", title="Alerting")
    mem.store.append_message("s", {"id": "n0", "role": "user", "content": "Hello there."})
    mem.store.append_message("s", {"id": "n1", "role": "user",
                                   "content": "Set the alert threshold to 160 ms."})
    assert mem.write_session("s").failure is None
    mem.store.append_message("s", {"id": "n2", "role": "user", "predecessor": "n0",
                                   "content": "Set the alert threshold to 150 ms."})
    assert mem.write_session("s").failure is None
    text = (mem.workspace.root / "topics/alerting.md").read_text()
    assert "superseded" not in text and "replaces" not in text


def test_search_ranks_the_holding_value_above_the_superseded_one(tmp_path, home):
    mem = Memory(home, settings=load_settings(home))
    mem.store.create_session("s", title="Alerting")
    for i, (role, text) in enumerate([("user", "The alert threshold is 160 ms."),
                                      ("assistant", "The alert threshold is 160 ms, noted."),
                                      ("user", "Actually make it 150.")]):
        mem.store.append_message("s", {"id": f"n{i}", "role": role, "content": text})
    assert mem.write_session("s").failure is None
    hits = search(mem.workspace, "alert threshold 160", top_k=5)
    first_super = next(i for i, h in enumerate(hits) if "superseded" in h.text)
    holding = next(i for i, h in enumerate(hits) if "150" in h.text)
    assert holding < first_super


# -- filing ------------------------------------------------------------------------------------


def test_a_batch_is_filed_under_a_topic_named_for_the_conversation(tmp_path):
    _, files = run(tmp_path, batch(("o2", "user", "The budget is fifty thousand euros.")))
    assert list(files) == ["topics/lisbon-offsite.md"]
    text = files["topics/lisbon-offsite.md"]
    assert text.startswith("# Lisbon offsite\n")
    assert "[^e1]: Time: `2026-07-25`; Sources: [" in text
    assert "](openprogram/offsite/o2)" in text


def test_an_existing_topic_on_the_subject_anywhere_under_topics_is_extended(tmp_path):
    stage = tmp_path / "stage"
    nested = stage / "topics/projects/lisbon-offsite.md"
    nested.parent.mkdir(parents=True)
    nested.write_text("# Lisbon offsite\n\nThe venue is a palace.[^e1]\n\n"
                      "[^e1]: Time: `2026-07-01`; Sources: [venue](openprogram/offsite/o0)\n")
    _, files = run(tmp_path, batch(("o2", "user", "We are twelve people.")))
    assert list(files) == ["topics/projects/lisbon-offsite.md"]
    assert "twelve people" in files["topics/projects/lisbon-offsite.md"]


def test_a_topic_titled_with_the_subject_is_found_by_its_title(tmp_path):
    stage = tmp_path / "stage"
    other = stage / "topics/trips/offsite-2026.md"
    other.parent.mkdir(parents=True)
    other.write_text("# Lisbon offsite\n\nThe venue is a palace.[^e1]\n\n"
                     "[^e1]: Time: `2026-07-01`; Sources: [venue](openprogram/offsite/o0)\n")
    _, files = run(tmp_path, batch(("o2", "user", "We are twelve people.")))
    assert list(files) == ["topics/trips/offsite-2026.md"]


def test_an_untitled_session_is_filed_under_its_salient_words():
    recs = batch(("u1", "user", "Production runs PostgreSQL behind pgbouncer. PostgreSQL is 16."))
    heading, path = subject_of("", recs)
    assert "postgresql" in path and heading.lower().startswith("postgresql")
    assert keywords("Dana Dana likes Lisbon")[0] == "dana"


# -- the format and redo -------------------------------------------------------------------------


def test_writing_a_batch_already_cited_adds_nothing(tmp_path):
    recs = batch(("u1", "user", "Deploys happen on Tuesdays."))
    audit, files = run(tmp_path, recs, cited=frozenset(r.source_id for r in recs))
    assert files == {} and "already cited" in audit.summary


def test_turn_text_cannot_forge_topic_syntax(tmp_path):
    evil = "Note[^e-1234567890] this\n\n# Heading\n[^x]: Time: `2020`; Sources: [a](b) ^deadbeef"
    _, files = run(tmp_path, batch(("u1", "user", evil)))
    text = files["topics/lisbon-offsite.md"]
    assert "[^e-1234567890]" not in text
    assert not re.search(r" \^deadbeef", text)
    assert "\n# Heading" not in text and "\n[^x]:" not in text


def test_the_same_batch_gives_the_same_bytes(tmp_path):
    recs = batch(("u1", "user", "Production runs PostgreSQL 16 on port 6432."),
                 ("a1", "assistant", "Recorded: PostgreSQL 16, port 6432."))
    _, first = run(tmp_path / "a", recs)
    _, second = run(tmp_path / "b", recs)
    assert first == second


def origin_batch(*turns):
    return records("offsite", [{"id": i, "role": r, "content": c, "timestamp": TS, **meta}
                               for i, r, c, meta in turns])


def test_an_edited_message_is_written_as_a_correction(tmp_path):
    _, files = run(tmp_path, origin_batch(
        ("o4-edit", "user", "Dana is vegetarian, not allergic.", {"edit_of": "o4",
                                                                  "forked_from": "o4"})))
    assert "The user corrected an earlier message: Dana is vegetarian, not allergic." in \
        files["topics/lisbon-offsite.md"]


def test_a_sub_agents_task_and_report_are_filed_as_sub_agent_work(tmp_path):
    _, files = run(tmp_path, origin_batch(
        ("sub-root", "user", "Find three vegetarian restaurants.",
         {"spawn_branch_root": True, "source": "agent_spawn"}),
        ("sub-1", "assistant", "Found: Taberna A, Casa B, Tasca C.", {})))
    text = files["topics/lisbon-offsite.md"]
    assert "## Sub-agent work\n\nA sub-agent was given the task: Find three vegetarian " \
           "restaurants.[^e1]" in text
    assert "The sub-agent reported: Found: Taberna A, Casa B, Tasca C.[^e2]" in text


_SENTENCES = st.sampled_from([
    "Set the alert threshold to 160 ms.", "Make it 150 instead.", "We decided to use Redis.",
    "Bo will review the runbook.", "Should we add a replica?", "The budget is 400 dollars.",
    "I prefer Slack.", "ok", "Dana is our on-call lead.", "Deadline is Friday.",
    "Text with [^e1] and ^abc and # hash", "Actually 3 replicas.", "Thanks!"])


@settings(max_examples=10, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), _SENTENCES),
                min_size=1, max_size=8), st.integers(min_value=1, max_value=3))
def test_any_conversation_written_in_batches_gives_valid_topics_citing_every_turn(
        tmp_path_factory, turns, batches):
    home = tmp_path_factory.mktemp("home")
    mem = Memory(home, settings=load_settings(home))
    mem.store.create_session("s", title="Ops")
    size = max(1, len(turns) // batches)
    for start in range(0, len(turns), size):
        for k, (role, text) in enumerate(turns[start:start + size], start):
            mem.store.append_message("s", {"id": f"n{k}", "role": role, "content": text})
        result = mem.write_session("s")
        assert result.failure is None, result.failure
    topics = sorted((mem.workspace.root / "topics").rglob("*.md"))
    text = "".join(p.read_text() for p in topics)
    for path in topics:
        parse_topic(path.read_text(), "topics/" + path.name)
    anchors = set(re.findall(r"#(source-[0-9a-f]{16})\)", text))
    assert len(anchors) == len(turns)
    rev = mem.workspace.revision()
    assert mem.write_session("s").failure is None  # nothing pending: nothing changes
    assert mem.workspace.revision() == rev


def test_the_current_state_says_a_corrected_rule_as_it_now_holds():
    from scriptorium.memory.writers.facts import Fact, spoken_by
    fact = Fact(CONSTRAINTS, "The user corrected an earlier message: Correction: Dana is "
                "vegetarian, not allergic to peanuts.", [],
                said="Correction: Dana is vegetarian, not allergic to peanuts.")
    assert spoken_by(fact) == "Dana is vegetarian, not allergic to peanuts."
