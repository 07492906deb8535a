"""What a turn states, as facts a colleague would note: the embedded writer's extraction.

Each sentence of a turn becomes at most one fact, labelled by what it is: a decision (only
when something was decided), an action item (with its owner), an open question (a question
in anyone's mouth, the assistant's too, is a question), a value or quantity, a date or
deadline, a person's role, a preference, a constraint, or a plain note. A value sits on a
*line* (the words naming what it measures: "alert threshold"); a later value on the same line
replaces it ("make it 150 instead" names no line, so it continues the last one). Pure and
deterministic: no file, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..records import Record
from ..claims import number as _number, same_line

DECISIONS = "Decisions"
ACTIONS = "Action items"
QUESTIONS = "Open questions"
ANSWERS = "Answered questions"
VALUES = "Values and quantities"
DATES = "Dates and deadlines"
PEOPLE = "People and roles"
PREFERENCES = "Preferences"
CONSTRAINTS = "Constraints"
NOTES = "Notes"
SUB_AGENT = "Sub-agent work"
KINDS = (DECISIONS, VALUES, DATES, ACTIONS, QUESTIONS, PEOPLE, PREFERENCES, CONSTRAINTS,
         ANSWERS, NOTES, SUB_AGENT)
MAX_FACT_CHARS = 600  # a long sentence is kept whole up to this

_DIGIT = re.compile(r"\d")
_SENTENCE = re.compile(r"(?<=[.!?…;])\s+(?=\S)")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_NUMBER = re.compile(r"(?<![\w.])[$€£]?\d[\d,]*(?:\.\d+)?(?:\s?(?:%|k|K|ms|s|GB|MB|TB|h))?(?![\w-])")
_UNITS = frozenset("""euros eur usd dollars pounds people persons guests seats rooms nights days
weeks months hours minutes seconds ms gb mb tb percent cores nodes replicas users items tickets
km miles kg attendees participants members engineers servers instances connections points
""".split())
# Scale words between a number and its unit: "359 thousand euros" is one value, never "359".
_SCALES = frozenset("hundred thousand million billion trillion".split())
# Units that count things: "18 attendees", "17 rooms". A sentence naming no measure before
# such a number ("We expect 18 attendees", "Block 16 rooms") puts it on the line of the
# thing counted, so later counts of it replace it.
_COUNTED = frozenset("""people persons guests seats rooms nights attendees participants members
engineers replicas users tickets items nodes servers instances connections cores""".split())
_MEASURE = frozenset("""size count headcount number total limit cap budget target threshold
amount length period interval rate fee share window retention""".split())
_CORRECTION = re.compile(r"\b(instead|actually|correction|updated|correct(?:ed|ion)?|change (?:it|that|"
                         r"this) to|make (?:it|that|this)|update (?:it|that|this) to|rather|"
                         r"not \S+ but|scratch that|on second thought)\b", re.I)
_DECISION = re.compile(r"\b(decided|decision|we'll go with|let'?s go with|go with|agreed|"
                       r"settled on|we chose|chosen|final answer|approved|confirmed)\b", re.I)
_ACTION = re.compile(r"\b(i'll|i will|we'll|we will|i'm going to|we're going to|please|"
                     r"can you|could you|would you|remind me|todo|to-do|action item|"
                     r"need(?:s)? to|ha(?:s|ve) to)\b", re.I)
_REQUEST = re.compile(r"(?:please )?(?:can|could|would|will) you\b", re.I)
_NAMED_ACTION = re.compile(r"\b([A-Z][a-z]+) (?:will|is going to|should)\b")
_PREFERENCE = re.compile(r"\b(prefer\w*|favou?rite|i (?:really )?(?:like|love|hate|dislike|"
                         r"enjoy)|i'?d rather|don'?t want|do not want|can'?t stand)\b", re.I)
_THRESHOLD = re.compile(r"\b(above|below|more than|less than|fewer than|at most|at least|"
                        r"no more than|up to|exceeds?|over|under)\s+[$€£]?\d", re.I)
_CONSTRAINT = re.compile(r"\b(must(?:n't)?|cannot|can'?t|at most|at least|no more than|"
                         r"maximum|minimum|limit(?:ed)?|only|allergic|required|requires?|"
                         r"never|mandatory|budget)\b", re.I)
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2}|\d{1,2}(?:st|nd|rd|th)? (?:to|-|–|and) \d{1,2}(?:st|nd|rd|th)? "
                   r"(?:of )?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|"
                   r"dec)[a-z]*\.? \d{1,2}(?:st|nd|rd|th)?|\d{1,2}(?:st|nd|rd|th)? (?:of )?"
                   r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*|monday|"
                   r"tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|"
                   r"next week|next month|end of (?:the )?(?:day|week|month|quarter)|"
                   r"deadline|due)\b", re.I)
_ROLE = re.compile(r"\b([A-Z][a-z]+(?: [A-Z][a-z]+)?) (?:is|will be|as) (?:our|the) "
                   r"([a-z][a-z -]{2,40}?)(?=[.,;!]|$| for| on| of)")
_KEY_SKIP = frozenset("""a an the it its that this is are was be to of for at on in by with and
or set make change update raise lower bump put instead actually now please let's lets we i you
our my your should would will can could go use keep about around roughly approx approximately
need needs want so then than from up down new old value number total correction done updated
noted ok okay sure yes confirmed has have when exceeds exceed above below over under least most
must than more less recorded""".split())


@dataclass
class Fact:
    """One claim to write: ``text`` is the claim, ``records`` the turns it cites."""

    kind: str
    text: str
    records: list[Record]
    key: str = ""        # a value's line ("alert threshold"); "" for other kinds
    value: str = ""
    replaces: str = ""   # the value this one replaces on its line
    superseded_by: str = ""
    owner: str = ""
    said: str = ""       # the sentence as said, for the current state ("" = use text)


def who(record: Record) -> str:
    """The speaker for prose: the node's own name, else "the user" / "the assistant"."""
    return record.speaker_name or f"the {record.role}"


def clean(text: str) -> str:
    """One line that cannot forge topic syntax (citations, ids, headings)."""
    text = " ".join(text.split())
    text = text.replace("[^", "[ ^").replace("^", "ˆ").replace("](", "] (")
    if re.match(r"(#|`{3}|~{3}|<|\[|- |\* )", text):  # a claim never opens a line as syntax
        text = f"“{text}”"
    return text


def shorten(text: str, limit: int = MAX_FACT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(clean(text)) if s.strip()]


def has_words(text: str) -> bool:
    return any(w.lower() not in _FILLER for w in _WORD.findall(text))


_FILLER = frozenset("""ok okay thanks thank you yes yeah sure great good fine got it noted perfect
cool nice sounds alright right hi hello hey please will do done no""".split())


@lru_cache(maxsize=512)  # pure, asked of one sentence several times within a batch
def value_of(sentence: str) -> tuple[str, str] | None:
    """(line key, value) of a sentence stating a quantity: the key is the content words
    just before the number ("alert threshold"), or after it when none precede; "" when the
    sentence names no line ("make it 150 instead")."""
    if _DIGIT.search(sentence) is None:  # the cheap answer for most sentences
        return None
    dates = [d.span() for d in _DATE.finditer(sentence)]
    m = None
    for candidate in _NUMBER.finditer(sentence):
        if not any(lo <= candidate.start() < hi for lo, hi in dates):
            m = candidate
            break
    if m is None:
        return None
    value = m.group(0).strip()
    after = _WORD.findall(sentence[m.end():])
    while after and after[0].lower() in _SCALES:
        value += " " + after[0]
        after = after[1:]
    if after and after[0].lower() in _UNITS:
        value += " " + after[0]
        after = after[1:]
    clause = re.split(r"[,:;—–]| - ", sentence[: m.start()])[-1]
    before = [w for w in _WORD.findall(clause) if w.lower() not in _KEY_SKIP
              and not w.isdigit() and not _DATE.fullmatch(w)]
    words = before[-4:] if before else [w for w in after if w.lower() not in _KEY_SKIP][:2]
    unit = value.rpartition(" ")[2].lower()
    if unit in _COUNTED and not (before and before[-1].lower() in _MEASURE):
        words = [unit]  # "we expect 18 attendees": the line is what is counted
    if _CORRECTION.search(sentence) and not before:
        words = []
    return " ".join(w.lower() for w in words), value


def owner_of(sentence: str, record: Record) -> str:
    low = sentence.lower()
    if re.search(r"\b(i'll|i will|i'm going to|remind me)\b", low):
        return who(record)
    if re.search(r"\b(we'll|we will|we're going to)\b", low):
        return "we"
    if re.search(r"\b(can you|could you|would you|please)\b", low):
        return "the assistant" if record.role == "user" else "the user"
    return _named_owner(sentence) or who(record)


def _named_owner(sentence: str) -> str:
    named = _NAMED_ACTION.search(sentence)
    if named and named.group(1) not in ("It", "That", "This", "There", "We", "You", "They",
                                        "He", "She", "Which", "What", "Who", "When"):
        return named.group(1)
    return ""


def classify(sentence: str, record: Record) -> str:
    """What a sentence is, most specific first."""
    if sentence.rstrip().endswith("?"):
        return ACTIONS if _REQUEST.match(sentence) else QUESTIONS
    if _DECISION.search(sentence):
        return DECISIONS
    if _ACTION.search(sentence) or _named_owner(sentence):
        return ACTIONS
    if _PREFERENCE.search(sentence) and record.role == "user":
        return PREFERENCES
    if _THRESHOLD.search(sentence):  # "approves any spend above 5000 euros": a rule
        return CONSTRAINTS
    if value_of(sentence) is not None:
        return VALUES
    if _CONSTRAINT.search(sentence):
        return CONSTRAINTS
    if _DATE.search(sentence):
        return DATES
    if _ROLE.search(sentence):
        return PEOPLE
    return NOTES


# "I'll shortlist three venues" is noted as "shortlist three venues" under its owner.
_FIRST_PERSON = re.compile(r"^(?:ok(?:ay)?,? |sure,? )?(?:i'll|i will|i'm going to|we'll|we will|"
                           r"we're going to) (?=[a-z])", re.I)
_I_PREFER = re.compile(r"^i(?:'d| would)? (?:really )?prefer (?=\S)", re.I)


def describe(kind: str, sentence: str, record: Record) -> tuple[str, str]:
    """(claim text, owner) for a sentence of ``kind``."""
    speaker = who(record)
    text = shorten(sentence.rstrip())
    if kind == ACTIONS:
        owner = owner_of(sentence, record)
        return f"{owner[:1].upper() + owner[1:]} to do: {_FIRST_PERSON.sub('', text)}", owner
    if kind == QUESTIONS:
        return f"{speaker[:1].upper() + speaker[1:]} asked: {text}", ""
    if kind == DECISIONS:
        return f"Decided ({speaker}): {text}", ""
    if kind == PREFERENCES:
        return f"{speaker[:1].upper() + speaker[1:]} prefers: {_I_PREFER.sub('', text)}", ""
    if kind == PEOPLE:
        m = _ROLE.search(sentence)
        assert m is not None
        return f"{m.group(1)}: {m.group(2).strip()} ({speaker}: {text})", ""
    if record.origin == "edit" and kind != VALUES:
        return f"{speaker[:1].upper() + speaker[1:]} corrected an earlier message: {text}", ""
    if kind == NOTES and record.origin == "retry":
        return f"In a retried reply, {speaker}: {text}", ""
    return f"{text} ({speaker})", ""


def facts_of(records: list[Record]) -> list[Fact]:
    """The facts of a batch in turn order; every record is cited by at least one fact (a
    turn with nothing to note adds its citation to the fact before it, or after it)."""
    out: list[Fact] = []
    orphans: list[Record] = []
    consumed: set[tuple[int, str]] = set()  # answer sentences already told with their question
    forward: set[int] = set()  # turns whose question or request the next turn settles
    for index, record in enumerate(records):
        made = _facts_of_turn(record, records[index - 1] if index else None,
                              records[index + 1] if index + 1 < len(records) else None,
                              consumed, forward)
        if not made:
            if out and id(record) not in forward:
                if record not in out[-1].records:
                    out[-1].records.append(record)
            else:
                orphans.append(record)
            continue
        if orphans:
            made[0].records[:0] = orphans
            orphans = []
        out.extend(made)
    if orphans:  # nothing in the whole batch to note: one note keeps every turn cited
        out.append(Fact(NOTES, "Exchange with nothing further to note (" +
                        ", ".join(dict.fromkeys(who(r) for r in orphans)) + ")", orphans))
    return out


_ACK = re.compile(r"(?:noted|understood|got it|great|perfect|sure|ok(?:ay)?|right|agreed|"
                  r"sounds good|will do)\b", re.I)


def _acknowledges(sentence: str, record: Record, prev: Record | None) -> bool:
    """An assistant sentence that only acknowledges the user's turn and says it back
    ("Noted: arrivals before noon on 14 October."): it opens with an acknowledgement, states
    no value, and its words were nearly all in the turn before."""
    if prev is None or record.role != "assistant" or prev.role == record.role \
            or not _ACK.match(sentence) or sentence.endswith("?") \
            or value_of(sentence) is not None:
        return False
    said = {w.lower() for w in _WORD.findall(prev.content)}
    words = [w.lower() for w in _WORD.findall(sentence)][1:]
    new = [w for w in words if w not in said and w not in _FILLER and not w.isdigit()]
    return len(new) <= max(1, len(words) // 4)


def _is_request(sentence: str, record: Record) -> bool:
    """The user asking the assistant for something ("Can you send…?", "Remind me why…")."""
    return record.role == "user" and (_REQUEST.match(sentence) is not None or re.match(
        r"(?:please |remind me|tell me|show me|explain|summari[sz]e)", sentence, re.I) is not None)


def _facts_of_turn(record: Record, prev: Record | None, nxt: Record | None,
                   consumed: set[tuple[int, str]], forward: set[int]) -> list[Fact]:
    """The facts of one turn. A question or request the next turn (the other speaker)
    answers is told with its answer; one answered by a value, or by a commitment to do it,
    is left to the next turn's fact, which cites this turn too (``forward``)."""
    if record.origin in ("spawn", "sub-agent"):
        body = shorten(" ".join(sentences(record.content)), 600)
        if not has_words(body):
            return []
        text = (f"A sub-agent was given the task: {body}" if record.origin == "spawn"
                else f"The sub-agent reported: {body}" if record.role == "assistant"
                else f"The delegating agent reported: {body}")
        return [Fact(SUB_AGENT, text, [record])]
    made: list[Fact] = []
    for sentence in sentences(record.content)[:12]:
        if not has_words(sentence) or (id(record), sentence) in consumed:
            continue
        if _acknowledges(sentence, record, prev):
            continue  # "Noted: …" restating the turn before: that turn's fact holds it
        kind = classify(sentence, record)
        if kind == NOTES and record.role == "assistant" and len(_WORD.findall(sentence)) < 5:
            continue  # chatter ("Sure, on it.")
        asks = kind == QUESTIONS or (kind == ACTIONS and _is_request(sentence, record))
        if asks and nxt is not None and nxt.role != record.role:
            answer = next((s for s in sentences(nxt.content)
                           if has_words(s) and not s.endswith("?")), "")
            if answer:
                asked = f"{who(record)[:1].upper() + who(record)[1:]} asked: {shorten(sentence)}"
                answered_as = classify(answer, nxt)
                if answered_as == VALUES or (kind == ACTIONS and answered_as == ACTIONS) or (
                        record.role == "assistant" and answered_as not in (NOTES, ACTIONS)):
                    forward.add(id(record))  # the value, or the commitment, is the fact
                else:
                    consumed.add((id(nxt), answer))
                    made.append(Fact(ANSWERS, f"{asked} Answer ({who(nxt)}): {shorten(answer)}",
                                     [record, nxt]))
                continue
        text, owner = describe(kind, sentence, record)
        fact = Fact(kind, text, [record], owner=owner, said=shorten(sentence.rstrip()))
        value = value_of(sentence) if kind in (VALUES, DECISIONS, CONSTRAINTS, DATES,
                                               ACTIONS) else None
        if value is not None and not (kind == ACTIONS and not value[0]):
            fact.key, fact.value = value
            if kind == VALUES:
                fact.text = _value_text(fact, sentence, record)
        made.append(fact)
    return made


def _value_text(fact: Fact, sentence: str, record: Record) -> str:
    line = fact.key[:1].upper() + fact.key[1:] if fact.key else "Value"
    return f"{line}: {shown(fact.value, fact.key)} ({who(record)}: " \
        f"{shorten(sentence.rstrip(), 200)})"


def shown(value: str, key: str) -> str:
    """A value as written after its line: "Rooms: 17", not "Rooms: 17 rooms"."""
    number, _, unit = value.partition(" ")
    return number if unit and unit.lower() == key else value


def spoken_by(fact: Fact) -> str:
    """What a fact says, for the current state: the sentence as said, without a leading
    "Correction:" or "Actually," (the state says what holds, not how it came to)."""
    said = _CORRECTION_LEAD.sub("", fact.said or fact.text)
    return said[:1].upper() + said[1:]


_CORRECTION_LEAD = re.compile(r"^(?:correction|actually|update|edit|sorry)\s*[:,]\s*", re.I)


def resolve_lines(facts: list[Fact], prior: list[Fact] | None = None) -> list[Fact]:
    """Settle what holds: a value on a line an earlier value holds (or a correction naming no
    line, which continues the last value) replaces it; the earlier one is superseded. A value
    restated in the same batch ("Noted, the threshold is 160 ms") adds its turn to the claim
    it confirms instead of a second claim. Returns the facts left to write."""
    holding: list[Fact] = [f for f in (prior or []) if f.value and not f.superseded_by]
    out: list[Fact] = []
    for fact in facts:
        out.append(fact)
        if not fact.value:
            continue
        old = None
        if fact.key:
            old = next((h for h in reversed(holding) if same_line(h.key, fact.key)), None)
        elif holding and (any(_CORRECTION.search(r.content) or r.origin == "edit"
                              for r in fact.records)
                          or _number(fact.value) == _number(holding[-1].value)):
            old = holding[-1]
        if old is not None and old.key and old.key != fact.key:
            _rename(fact, old.key)  # the line keeps the name it was given first
        if old is None:
            holding.append(fact)
            continue
        if fact.value == _number(fact.value) and _number(old.value) != old.value:
            fact.value = fact.value + old.value[len(_number(old.value)):]  # "150" + " ms"
            if fact.kind == VALUES:
                fact.text = re.sub(r"^([^:]+: )\S+(?: \S+)?(?= \()",
                                   lambda m: m.group(1) + shown(fact.value, fact.key),
                                   fact.text, count=1)
        line = [h for h in holding if h is old or same_line(h.key, old.key)]
        if _number(old.value) == _number(fact.value) and old.kind == fact.kind \
                and any(o is old for o in out):  # a confirmation of a value of this batch
            old.records.extend(r for r in fact.records if r not in old.records)
            out.pop()
            continue
        if _number(old.value) != _number(fact.value):
            fact.replaces = old.value
            for earlier in line:  # the value and every restatement of it
                earlier.superseded_by = fact.value
            holding = [h for h in holding if h not in line]
        holding.append(fact)  # a restatement of the same value holds beside it
    return out


def _rename(fact: Fact, key: str) -> None:
    if fact.kind == VALUES:
        fact.text = re.sub(r"^[^:]+: \S+(?: \S+)?(?= \()", lambda _m: key[:1].upper() + key[1:]
                           + ": " + shown(fact.value, key), fact.text, count=1)
    fact.key = key
