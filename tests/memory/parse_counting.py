"""Counting the topic text the parser reads (a write's cost, counted, never timed)."""

from __future__ import annotations

from scriptorium.memory import topics as topics_mod


def count_parsed(monkeypatch) -> list[int]:
    """From now on, the length of every text parsed as a topic (strict or lenient)."""
    parsed: list[int] = []
    real_read = topics_mod.Parser.read

    def counting(self, text):
        parsed.append(len(text))
        return real_read(self, text)

    monkeypatch.setattr(topics_mod.Parser, "read", counting)
    return parsed
