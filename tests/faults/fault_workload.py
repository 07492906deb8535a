"""A deterministic branching workload: several sessions grown by appends, retries, edits of
earlier messages, sub-agents, compaction, rewinds and head switches.

Shared by the crash harness, the race test's appending process, the stateful model and the
benchmark script, so they all exercise the same shapes of conversation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from scriptorium.sessions import SessionStore

WORDS = ("deploy staging tuesday budget lisbon hotel flight aisle window backup restore "
         "postgres replica index cache invoice vendor contract offsite agenda speaker "
         "keynote dinner vegetarian train ticket museum ferry river sunset report draft "
         "review metrics latency error release rollback canary feature flag migration "
         "schema column tokenizer porter stemming search ranking citation archive").split()
OPENERS = ("Please check", "I prefer", "We decided to", "Can you compare", "Remind me about",
           "Let's book", "What about", "I always want", "Summarize", "The team agreed on")
KINDS = ("exchange", "exchange", "exchange", "retry", "edit", "spawn", "compact", "rewind",
         "switch")


def sentence(rng: random.Random, words: int | None = None) -> str:
    n = words or rng.randint(6, 16)
    body = " ".join(rng.choice(WORDS) for _ in range(n))
    end = rng.choice([".", ".", "?", "!"])
    return f"{rng.choice(OPENERS)} {body}{end}"


@dataclass
class Workload:
    """Applies random operations to ``sessions`` of ``store``; ids are unique and stable
    for a given seed, so two runs with one seed build the same DAG."""

    store: SessionStore
    seed: int = 0
    sessions: tuple[str, ...] = ("alpha", "beta", "gamma")
    prefix: str = ""  # keeps ids unique when several workloads share a home
    counter: int = 0
    log: list[tuple[str, str]] = field(default_factory=list)  # (kind, session)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.did = ""
        for sid in self.sessions:
            self.store.create_session(sid, title=f"Project {sid}")

    def _id(self, prefix: str) -> str:
        self.counter += 1
        return f"{self.prefix}{prefix}{self.counter:05d}"

    def _head_branch(self, sid: str) -> list[dict]:
        return self.store.get_branch(sid)

    # -- operations ------------------------------------------------------------------------

    def exchange(self, sid: str) -> list[str]:
        """A user turn and its reply, extending the head."""
        self.did = "exchange"
        u, a = self._id("u"), self._id("a")
        self.store.append_message(sid, {"id": u, "role": "user",
                                        "content": sentence(self.rng)})
        self.store.append_message(sid, {"id": a, "role": "assistant",
                                        "content": sentence(self.rng)})
        return [u, a]

    def retry(self, sid: str) -> list[str]:
        self.did = "retry"
        replies = [m for m in self._head_branch(sid) if m["role"] == "assistant"
                   and not m.get("covers_ids") and not m.get("caller")]
        if not replies:
            return self.exchange(sid)
        reply = replies[-1] if self.rng.random() < 0.7 else self.rng.choice(replies)
        return [self.store.retry(sid, reply["id"], sentence(self.rng), node_id=self._id("r"))]

    def edit(self, sid: str) -> list[str]:
        self.did = "edit"
        users = [m for m in self._head_branch(sid) if m["role"] == "user"
                 and not m.get("spawn_branch_root") and not m.get("caller")]
        if not users:
            return self.exchange(sid)
        target = self.rng.choice(users)
        e = self.store.edit(sid, target["id"], sentence(self.rng), node_id=self._id("e"))
        a = self._id("a")
        self.store.append_message(sid, {"id": a, "role": "assistant",
                                        "content": sentence(self.rng)})
        return [e, a]

    def spawn(self, sid: str) -> list[str]:
        self.did = "spawn"
        branch = [m for m in self._head_branch(sid) if not m.get("covers_ids")]
        if not branch:
            return self.exchange(sid)
        caller = self.rng.choice(branch)["id"]
        root = self.store.spawn(sid, caller, sentence(self.rng), node_id=self._id("s"))
        out, prev = [root], root
        for _ in range(self.rng.randint(1, 3)):
            nid = self._id("sa")
            self.store.append_message(sid, {"id": nid, "role": "assistant",
                                            "content": sentence(self.rng), "predecessor": prev})
            out.append(nid)
            prev = nid
        return out

    def compact(self, sid: str) -> list[str]:
        self.did = "compact"
        turns = [m for m in self._head_branch(sid) if m["role"] in ("user", "assistant")
                 and not m.get("covers_ids") and not m.get("caller")
                 and not m.get("spawn_branch_root")]
        if len(turns) < 3:
            return self.exchange(sid)
        start = self.rng.randrange(0, len(turns) - 2)
        segment = turns[start:start + self.rng.randint(2, 3)]
        if any(b["predecessor"] != a["id"] for a, b in zip(segment, segment[1:])):
            return self.exchange(sid)
        return [self.store.compact(sid, [m["id"] for m in segment], sentence(self.rng),
                                   node_id=f"summary_{self._id('c')}")]

    def rewind(self, sid: str) -> list[str]:
        self.did = "rewind"
        turns = [m for m in self._head_branch(sid) if not m.get("caller")]
        if len(turns) < 4:
            return self.exchange(sid)
        target = turns[-self.rng.randint(1, 2)]
        done = self.store.rewind(sid, target["id"])
        return list(done["nodes_rewound"])

    def switch(self, sid: str) -> list[str]:
        self.did = "switch"
        tips = [r["tip"] for r in self.store.list_branches(sid) if not r["head"]]
        if not tips:
            return self.exchange(sid)
        self.store.set_head(sid, self.rng.choice(tips))
        return []

    def step(self) -> tuple[str, str, list[str]]:
        """One random operation on a random session: (kind, session, node ids touched)."""
        sid = self.rng.choice(self.sessions)
        kind = self.rng.choice(KINDS)
        if not self._head_branch(sid):
            kind = "exchange"
        touched = getattr(self, kind)(sid)
        kind = self.did  # an operation that cannot apply here falls back to an exchange
        self.log.append((kind, sid))
        return kind, sid, touched

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()
