"""The synthetic workspace every search and cost benchmark uses: topic files of about 20 kB
(Zipf-like words from a made-up vocabulary, a few claims a paragraph) citing turns archived in
the v2 evidence format, as the writers produce them. Seeded, so every run builds the same."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from scriptorium.memory.sources import (SourceRecord, render_v2_file,
                                        source_anchor, v2_path)

FILE_BYTES = 20_000          # one topic file ~ 20 KB, like a subject file after some weeks
TURNS_PER_SESSION = 60


def vocabulary(rnd: random.Random, size: int = 6000) -> list[str]:
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "na", "pi", "que", "ul",
                 "bra", "ste", "fo", "gan", "hil", "jo", "zu", "wex", "tri", "mon", "ced", "ar"]
    words: list[str] = []
    seen = set()
    while len(words) < size:
        w = "".join(rnd.choice(syllables) for _ in range(rnd.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def sentence(rnd: random.Random, vocab: list[str], weights: list[float]) -> str:
    n = rnd.randint(10, 28)
    words = rnd.choices(vocab, weights=weights, k=n)
    return " ".join(words).capitalize() + "."


def build(root: Path, megabytes: float, seed: int = 7) -> dict:
    """A workspace with ~``megabytes`` of topic files citing archived turns."""
    rnd = random.Random(seed)
    vocab = vocabulary(rnd)
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(vocab))]  # Zipf-like
    (root / "topics").mkdir(parents=True)
    target = int(megabytes * 1_000_000)
    total = 0
    session, turn = 0, 0
    records: dict[str, list[SourceRecord]] = {}
    used: set[str] = set()
    file_no = 0
    while total < target:
        area = f"area-{file_no % 12}"
        rel = f"topics/{area}/subject-{file_no}.md"
        lines = [f"# Subject {file_no} {vocab[file_no % len(vocab)]}", ""]
        size = 0
        section = 0
        while size < FILE_BYTES:
            if size == 0 or rnd.random() < 0.08:
                section += 1
                lines += [f"## Section {section} {rnd.choice(vocab[:300])}", ""]
            claims, defs = [], []
            for _ in range(rnd.randint(1, 3)):
                sid = f"openprogram/s-{session}/n{turn}"
                text = sentence(rnd, vocab, weights)
                day = f"2026-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}"
                records.setdefault(f"s-{session}", []).append(SourceRecord(
                    "openprogram", f"s-{session}", f"n{turn}", rnd.choice(["user", "assistant"]),
                    text, f"{day}T10:00:00+00:00"))
                fid = "e-" + hashlib.sha256(sid.encode()).hexdigest()[:10]
                link = f"../../{v2_path(sid)}#{source_anchor(sid)}"
                claims.append(f"The user said: {text}[^{fid}]")
                defs.append(f"[^{fid}]: Time: `{day}`; Sources: [{text.split()[0].lower()}]"
                            f"({link})")
                turn += 1
                if turn >= TURNS_PER_SESSION:
                    session, turn = session + 1, 0
            bid = hashlib.sha256(f"{rel}|{size}|{len(lines)}".encode()).hexdigest()[:8]
            while bid in used:  # 8 hex digits collide at this many blocks: keep ids unique
                bid = hashlib.sha256(bid.encode()).hexdigest()[:8]
            used.add(bid)
            lines += [" ".join(claims) + f" ^{bid}", ""] + defs + [""]
            size = sum(len(x) + 1 for x in lines)
        text = "\n".join(lines)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        total += len(text.encode())
        file_no += 1
    for thread, recs in records.items():
        p = root / v2_path(recs[0].source_id)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(render_v2_file(recs), encoding="utf-8")
    return {"bytes": total, "files": file_no, "vocab": vocab}
