"""Recall of what holds: the embedded writer vs the pre-issue-16 writer, in one run.

Generates realistic multi-topic conversations (one session per project, ~30 turns each): each
sets several values ("Set the p99 latency alert threshold to 160 ms."), many are corrected later
on the same line (keyed: "Actually, change the … to 150 ms.", or bare right after:
"Make it 150 instead."), some are changed on a side branch (a fork the head does not follow),
with chatter in between. Every session is written through the real write path (head, then the
side branches), once per writer, in separate homes.

Each value line is one question, asked twice: of ``memory search`` ("<codename> <line>", top 3
claims) and of ``memory context`` (the user asks "What is the <line> now?" on a new turn after
the written head; the context's first 3 claims). It is answered when a claim stating the
holding value (and not marked superseded) is in the top 3 and no claim ranked above it states
only an older head-line value or is marked superseded. A side branch's value is an
alternative, not an older value, so it never counts against. Each batch mode (one batch per
conversation, several) writes every conversation once per writer, in separate homes.

Usage:
    python benchmarks/bench_recall.py [--sessions 60] [--seed 16] [--batches one|many|both]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from scriptorium.config import load_settings
from scriptorium.memory.search import search
from scriptorium.memory.topics import SUPERSEDED_MARK
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline_writer import BaselineWriter  # noqa: E402

PROJECTS = [
    ("Payments API alerting", [("p99 latency alert threshold", "ms"),
                               ("error rate paging threshold", "percent"),
                               ("on-call rotation length", "days"),
                               ("log retention period", "days"),
                               ("dashboard refresh interval", "seconds")]),
    ("Lisbon team offsite", [("venue budget", "euros"), ("hotel room count", "rooms"),
                             ("attendee headcount", "people"),
                             ("dinner reservation size", "guests"),
                             ("flight budget cap", "euros")]),
    ("Postgres migration", [("connection pool size", "connections"),
                            ("read replica count", "replicas"),
                            ("maintenance window length", "minutes"),
                            ("WAL retention size", "GB"),
                            ("vacuum cost limit", "points")]),
    ("Mobile app release", [("crash-free session target", "percent"),
                            ("beta tester group size", "users"),
                            ("app bundle size limit", "MB"),
                            ("staged rollout share", "percent"),
                            ("support ticket backlog cap", "tickets")]),
    ("Hiring plan", [("backend engineer headcount", "people"),
                     ("interview loop length", "hours"),
                     ("referral bonus amount", "euros"),
                     ("offer response window", "days"),
                     ("recruiter agency fee", "percent")]),
]
CODENAMES = ["Orion", "Vega", "Lyra", "Atlas", "Nova", "Cygnus", "Draco", "Hydra", "Pavo",
             "Tucana", "Lupus", "Carina", "Aquila", "Corvus", "Fornax"]
CHATTER = [
    ("What do you think about the rollout communication?",
     "A short email to the stakeholders plus a channel announcement should be enough."),
    ("Remind me why we picked this approach.",
     "It keeps the moving parts small and the team already knows the tooling well."),
    ("Any risks we should keep an eye on?",
     "Mostly scheduling conflicts and vendors answering late in the summer."),
    ("Can you summarise where we are?",
     "We have the main parameters in place and a few details still open."),
]


@dataclass
class Line:
    attr: str
    unit: str
    head_values: list[int]          # values said on the head line, oldest first
    side_value: int | None = None   # value said on a side branch only

    @property
    def holding(self) -> int:
        return self.head_values[-1]


@dataclass
class Conversation:
    sid: str
    title: str
    codename: str
    lines: list[Line]
    turns: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    # (node id, role, text, predecessor or None for "after the previous turn")


def generate(sessions: int, seed: int) -> list[Conversation]:
    rng = random.Random(seed)
    out = []
    for n in range(sessions):
        title, attrs = PROJECTS[n % len(PROJECTS)]
        codename = CODENAMES[(n // len(PROJECTS)) % len(CODENAMES)] + \
            (str(n // (len(PROJECTS) * len(CODENAMES))) if n >= len(PROJECTS) * len(CODENAMES)
             else "")
        conv = Conversation(f"c{n:03d}", f"{title} {codename}", codename, [])
        used: set[int] = set()

        def fresh() -> int:
            while True:
                v = rng.randint(12, 990)
                if v not in used:
                    used.add(v)
                    return v

        k = 0

        def say(role: str, text: str, after: str | None = None) -> str:
            nonlocal k
            k += 1
            node = f"{conv.sid}-n{k:02d}"
            conv.turns.append((node, role, text, after))
            return node

        last = say("user", f"Let's plan the {title} ({codename}) together.")
        last = say("assistant", f"Sure, happy to help with the {title}.")
        later: list[tuple[Line, int]] = []
        for attr, unit in attrs:
            line = Line(attr, unit, [fresh()])
            conv.lines.append(line)
            last = say("user", f"Set the {attr} to {line.head_values[0]} {unit}.")
            last = say("assistant", f"Noted, the {attr} is {line.head_values[0]} {unit}.")
            roll = rng.random()
            if roll < 0.3:  # a bare correction right away: it continues this line
                v2 = fresh()
                line.head_values.append(v2)
                last = say("user", f"Hmm, make it {v2} instead.")
                last = say("assistant", f"Updated to {v2} {unit}.")
            elif roll < 0.6:
                later.append((line, fresh()))
            if rng.random() < 0.35:  # someone explores another value on a side branch
                line.side_value = fresh()
                side = say("user", f"What if the {attr} were {line.side_value} {unit}?", last)
                say("assistant", f"Then the {attr} would be {line.side_value} {unit}.", side)
                last = say("user", "Let's stay with the plan.", last)
                last = say("assistant", "Agreed, nothing changes.")
            question, answer = CHATTER[rng.randrange(len(CHATTER))]
            last = say("user", question)
            last = say("assistant", answer)
        for line, v2 in later:  # keyed corrections later in the conversation
            line.head_values.append(v2)
            last = say("user", f"Actually, change the {line.attr} to {v2} {line.unit}.")
            last = say("assistant", f"Done: the {line.attr} is now {v2} {line.unit}.")
        out.append(conv)
    return out


class TimedWriter:
    """Wraps a writer, summing the time spent in ``write``: wall clock, and CPU time of the
    calling thread (less disturbed by the neighbours of a loaded machine)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.repair_attempts = inner.repair_attempts
        self.seconds = 0.0
        self.cpu_seconds = 0.0

    def write(self, request):
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return self.inner.write(request)
        finally:
            self.seconds += time.perf_counter() - start
            self.cpu_seconds += time.thread_time() - cpu


def build(home: Path, convs: list[Conversation], writer, trigger_tokens: int) -> dict:
    timed = TimedWriter(writer)
    mem = Memory(home, settings=load_settings(home, {"trigger_tokens": trigger_tokens}),
                 writer=timed)
    # side branches are short: a threshold of one token writes whatever they hold
    sides = Memory(home, settings=load_settings(home, {"trigger_tokens": 1}), writer=timed)
    for conv in convs:
        mem.store.create_session(conv.sid, title=conv.title)
        for node, role, text, after in conv.turns:
            msg = {"id": node, "role": role, "content": text}
            if after is not None:  # a fork: the new turn becomes the head
                mem.store.append_after(conv.sid, after, msg)
            else:
                mem.store.append_message(conv.sid, msg)
    start = time.perf_counter()
    turns = 0
    for conv in convs:
        head = mem.store.get_meta(conv.sid).get("head_id")
        results = [mem.write_session(conv.sid)]  # the head, whatever it holds
        results += [sides.write_branch(conv.sid, tip) for tip in sides.live_tips(conv.sid)
                    if tip not in (None, head)]
        for result in results:
            if result.failure is not None:
                raise SystemExit(f"{writer.name}: {conv.sid}: {result.failure.message}")
            turns += len(result.marked)
    wall = time.perf_counter() - start
    return {"mem": mem, "turns": turns, "wall": wall, "writer_seconds": timed.seconds,
            "writer_cpu_seconds": timed.cpu_seconds}


def _states(text: str, value: int) -> bool:
    return re.search(rf"(?<![\d.]){value}(?![\d])", text) is not None


def judge(texts: list[str], line: Line) -> bool:
    """The holding value is stated by one of ``texts`` (best first), not marked superseded,
    with no claim above it stating only an older value of the line or marked superseded."""
    older = [v for v in line.head_values[:-1] if v != line.holding]
    for text in texts:
        superseded = SUPERSEDED_MARK in text
        if _states(text, line.holding) and not superseded:
            return True
        if superseded or (any(_states(text, v) for v in older)
                          and not _states(text, line.holding)):
            return False  # an older value ranks above the one that holds
    return False


def answered(mem: Memory, conv: Conversation, line: Line, top_k: int = 3) -> bool:
    """Asked of ``memory search``: "<codename> <line>"."""
    hits = search(mem.workspace, f"{conv.codename} {line.attr}", top_k=top_k)
    return judge([hit.text for hit in hits], line)


def answered_in_context(mem: Memory, conv: Conversation, line: Line, head: str,
                        top_k: int = 3) -> bool:
    """Asked in the conversation: the user asks on a new turn after the written head
    ("What is the <line> now?") and ``memory context`` at that turn is read, first claims
    first (claims on this branch, then other conversations, then other branches)."""
    node = f"{conv.sid}-q-{line.attr.replace(' ', '-')}"
    mem.store.append_after(conv.sid, head, {"id": node, "role": "user",
                                            "content": f"What is the {line.attr} now?"})
    ctx = mem.context(conv.sid, node)
    return judge([block.text for block in ctx.blocks[:top_k]], line)


def score(mem: Memory, convs: list[Conversation]) -> dict:
    total = good = in_context = 0
    for conv in convs:
        head = mem.store.get_meta(conv.sid).get("head_id")
        for line in conv.lines:
            total += 1
            good += answered(mem, conv, line)
            in_context += answered_in_context(mem, conv, line, head)
    return {"questions": total, "answered": good, "context": in_context}


MODES = {"one": 16_000, "many": 400}  # trigger tokens: one batch / several per conversation


def run(sessions: int, seed: int, modes: dict[str, int] = MODES) -> dict:
    """{mode: {writer: figures}} for each batch mode, both writers on the same conversations."""
    convs = generate(sessions, seed)
    out: dict[str, dict] = {}
    for mode, trigger_tokens in modes.items():
        for name, writer in (("new", EmbeddedWriter()), ("baseline", BaselineWriter())):
            with tempfile.TemporaryDirectory(prefix=f"recall-{name}-") as tmp:
                built = build(Path(tmp), convs, writer, trigger_tokens)
                figures = score(built["mem"], convs)
                figures.update(turns=built["turns"], wall=built["wall"],
                               writer_seconds=built["writer_seconds"],
                               writer_cpu_seconds=built["writer_cpu_seconds"])
                out.setdefault(mode, {})[name] = figures
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--batches", choices=("one", "many", "both"), default="both",
                        help=f"one batch per conversation (trigger_tokens {MODES['one']}), "
                             f"several (trigger_tokens {MODES['many']}), or both")
    args = parser.parse_args()
    modes = MODES if args.batches == "both" else {args.batches: MODES[args.batches]}
    load = os.getloadavg()
    res = run(args.sessions, args.seed, modes)
    after = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (at the end "
          f"{after[0]:.2f}); {args.sessions} sessions, seed {args.seed}")
    print(f"{'batches':<8} {'writer':<9} {'search top 3':>17} {'context top 3':>17} "
          f"{'turns':>6} {'write path turns/s':>19} {'writer call turns/s':>20} "
          f"{'(CPU)':>9}")
    for mode, figures in res.items():
        for name in ("new", "baseline"):
            r = figures[name]
            q = r["questions"]
            print(f"{mode:<8} {name:<9} {r['answered']:>5}/{q:<4} ({r['answered'] / q:.2f}) "
                  f"{r['context']:>5}/{q:<4} ({r['context'] / q:.2f}) {r['turns']:>6} "
                  f"{r['turns'] / r['wall']:>19.1f} "
                  f"{r['turns'] / max(r['writer_seconds'], 1e-9):>20.1f} "
                  f"{r['turns'] / max(r['writer_cpu_seconds'], 1e-9):>9.1f}")
        new, base = figures["new"], figures["baseline"]
        print(f"{mode:<8} new/baseline: write path speed "
              f"{(new['turns'] / new['wall']) / (base['turns'] / base['wall']):.2f}x, "
              f"writer call speed "
              f"{base['writer_seconds'] / max(new['writer_seconds'], 1e-9):.2f}x "
              f"(CPU {base['writer_cpu_seconds'] / max(new['writer_cpu_seconds'], 1e-9):.2f}x)")


if __name__ == "__main__":
    main()
