"""Conversations whose two branches state different values for one fact, and the precision
of reading them back (shared by ``bench_branches.py`` and a bounded test).

Each conversation (its own codename, so conversations do not compete for a query) settles a
fact — a number, a name, a date or a choice — and then forks: either the user *edits* the
message that stated it, or the user asks and the assistant's reply is *retried*. The two
branches state different values. Everything goes through the real write path (the embedded
writer, default settings): an edit is written at one session-boundary write (the side line
has a user turn, so it is written); a retry is written before the retry (then the head) and
after it (the new head).

For a reader standing on each branch tip, precision@1 asks whether the first hit of the
query states that branch's own value (and not the other one). What tells the branches apart
is the value's *core*: for a number, the number itself ("359" of "359 thousand euros"), else
the whole value. A hit stating the core counts, so a claim that files the value in short
("Budget: 359", as the embedded writer's current state does) is the reader's own value; a
second figure, ``p_at_1_in_full``, also asks that the hit states the value whole (its unit
too), which keeps a writer that drops "thousand euros" visible.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Callable

from scriptorium.memory.search import search
from scriptorium.memory.writing import Memory

_SYLLABLES = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "na", "pi", "que", "ul",
              "bra", "ste", "fo", "gan", "hil", "jo", "zu", "wex", "tri", "mon", "ced", "ar"]
_CITIES = ["Lisbon", "Porto", "Madrid", "Seville", "Lyon", "Turin", "Ghent", "Bergen",
           "Krakow", "Tallinn", "Valencia", "Bologna"]
_PEOPLE = ["Amara", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiroshi",
           "Ines", "Jonas", "Keiko", "Luca"]
_MONTHS = ["March", "April", "May", "June", "September", "October"]
_CHOICES = {"airline": ["TAP", "Lufthansa", "Iberia", "KLM", "Finnair", "Ryanair"],
            "framework": ["Django", "Rails", "Laravel", "Phoenix", "Flask", "Spring"]}

# slot, fact type, value generator
SLOTS: list[tuple[str, str, Callable[[random.Random], str]]] = [
    ("budget", "number", lambda r: f"{r.randint(40, 400)} thousand euros"),
    ("headcount", "number", lambda r: f"{r.randint(6, 90)} people"),
    ("venue", "name", lambda r: r.choice(_CITIES)),
    ("lead", "name", lambda r: r.choice(_PEOPLE)),
    ("deadline", "date", lambda r: f"{r.choice(_MONTHS)} {r.randint(1, 28)}"),
    ("airline", "choice", lambda r: r.choice(_CHOICES["airline"])),
    ("framework", "choice", lambda r: r.choice(_CHOICES["framework"])),
]


@dataclass
class Case:
    """One conversation: its two branch tips and the value each of them states."""

    session_id: str
    kind: str          # "edit" or "retry"
    fact_type: str     # number, name, date, choice
    query: str
    values: dict[str, str]  # tip -> the value stated on that branch


def states(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) is not None


def core(fact_type: str, value: str) -> str:
    """The part of a value that differs between the branches: a number's digits, else all."""
    return value.split()[0] if fact_type == "number" else value


def states_core(text: str, fact_type: str, value: str) -> bool:
    """Does ``text`` state the value's core? A number counts as a whole number, not as a
    part of a date ("12" is not in "2026-12-01") or of another number."""
    if fact_type != "number":
        return states(text, value)
    return re.search(rf"(?<![\w.-]){re.escape(core(fact_type, value))}(?![\w-]|\.\d)",
                     text) is not None


def _codenames(rnd: random.Random, n: int) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        word = "".join(rnd.choice(_SYLLABLES) for _ in range(3)).capitalize()
        if word not in seen:
            seen.add(word)
            out.append(word)
    return out


def _two_values(rnd: random.Random, make: Callable[[random.Random], str]) -> tuple[str, str]:
    first = make(rnd)
    while True:
        second = make(rnd)
        if not states(second, first) and not states(first, second):
            return first, second


def generate(mem: Memory, n: int, seed: int = 1) -> list[Case]:
    """Write ``n`` forked conversations into ``mem`` (half edits, half retries)."""
    rnd = random.Random(seed)
    cases: list[Case] = []
    store = mem.store
    for i, code in enumerate(_codenames(rnd, n)):
        sid = f"c{i:04d}"
        slot, fact_type, make = SLOTS[i % len(SLOTS)]
        v1, v2 = _two_values(rnd, make)
        store.create_session(sid, title=f"Project {code}")

        def say(node_id: str, role: str, text: str) -> None:
            store.append_message(sid, {"id": node_id, "role": role, "content": text})

        say("u1", "user", f"We are starting project {code} this quarter.")
        say("a1", "assistant", f"Noted: project {code} starts this quarter.")
        stated = f"For project {code}, the {slot} is {{}}."
        if i % 2 == 0:  # the user edits the message that stated the fact
            say("u2", "user", stated.format(v1))
            say("a2", "assistant", f"Noted: the {slot} of project {code} is {v1}.")
            store.edit(sid, "u2", stated.format(v2), node_id="u2e")
            say("a2e", "assistant", f"Noted: the {slot} of project {code} is {v2}.")
            _written(mem, sid)
            cases.append(Case(sid, "edit", fact_type, f"project {code} {slot}",
                              {"a2": v1, "a2e": v2}))
        else:  # the user asks, and retries the assistant's answer
            say("u2", "user", f"What do you suggest for project {code}?")
            say("a2", "assistant", stated.format(v1))
            _written(mem, sid)
            store.retry(sid, "a2", stated.format(v2), node_id="a2r")
            _written(mem, sid)
            cases.append(Case(sid, "retry", fact_type, f"project {code} {slot}",
                              {"a2": v1, "a2r": v2}))
    return cases


def _written(mem: Memory, sid: str) -> None:
    result = mem.write_session(sid)
    if result.failure is not None:
        raise RuntimeError(f"write of {sid} failed: {result.failure.message}")


def precision(workspace: Any, store: Any, cases: list[Case], *,
              aware: bool) -> dict[str, Any]:
    """precision@1 of each branch's own value, for a reader on every branch tip."""
    right = in_full = total = 0
    by: dict[str, list[int]] = {}
    for case in cases:
        for tip, value in case.values.items():
            other = next(v for t, v in case.values.items() if t != tip)
            if aware:
                hits = search(workspace, case.query, top_k=1, session=case.session_id,
                              head=tip, store=store)
            else:
                hits = search(workspace, case.query, top_k=1)
            text = hits[0].text if hits else ""
            ok = bool(hits) and states_core(text, case.fact_type, value) and \
                not states_core(text, case.fact_type, other)
            right += ok
            in_full += ok and states(text, value)
            total += 1
            for key in (case.kind, case.fact_type):
                row = by.setdefault(key, [0, 0])
                row[0] += ok
                row[1] += 1
    return {"p_at_1": right / total if total else 0.0, "right": right, "readers": total,
            "p_at_1_in_full": in_full / total if total else 0.0,
            "by": {k: v[0] / v[1] for k, v in sorted(by.items())}}
