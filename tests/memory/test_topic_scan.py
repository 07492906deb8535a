"""The embedded writer reads the topic it extends in one pass (topic_scan) instead of a full
parse: what it reads must be what the parser reads."""

from __future__ import annotations

from scriptorium.memory.claims import value_claim
from scriptorium.memory.topics import parse_topic
from scriptorium.memory.writers.state import STATE
from scriptorium.memory.writers.topic_scan import scan_topic

TOPIC = """# Alerting

## Current state

- Alert threshold: 150 ms (was 160 ms)[^e-1111111111][^e-2222222222]
- Decided: page the on-call lead.[^e-3333333333] ^abcd1234

[^e-1111111111]: Time: `2026-07-25`; Sources: [set](../sources/openprogram/_v2/s.md#source-aaaaaaaaaaaaaaaa)
[^e-2222222222]: Time: `2026-07-25`; Sources: [make](../sources/openprogram/_v2/s.md#source-bbbbbbbbbbbbbbbb)
[^e-3333333333]: Time: `2026-07-25`; Sources: [page](../sources/openprogram/_v2/s.md#source-cccccccccccccccc)

## Values and quantities

Alert threshold: 160 ms (the user: Set it.)[^e-1111111111] ^aaaa0001

A hand-written paragraph over two lines; its second claim
states a value. Budget: 400 euros (agreed)[^e-2222222222] Retention: 30 days (kept)[^e-3333333333] ^aaaa0002

```
Alert threshold: 999 ms (in a fence)[^e-3333333333] ^ffff0000
```

<!-- a comment
Alert threshold: 998 ms (in a comment)[^e-3333333333] ^ffff0001
-->
#tag line, still text Limit: 5 items (a note)[^e-1111111111] ^aaaa0003
"""


def test_the_scan_reads_the_state_block_and_value_claims_as_the_parser_does():
    doc = parse_topic(TOPIC, "topics/alerting.md")
    scanned = scan_topic(TOPIC, STATE)
    state = next(b for b in doc.blocks if b.headings[-1] == STATE)
    assert scanned.state is not None
    assert (scanned.state.ids, scanned.state.line) == (state.ids, state.line)
    assert [(c.text, c.citations) for c in scanned.state.claims] == \
        [(c.text, c.citations) for c in state.claims]
    parsed_values = [(value_claim(c.text), c.text, c.citations) for b in doc.blocks
                     if b.headings[-1] != STATE for c in b.claims if value_claim(c.text)]
    assert scanned.values == parsed_values
    assert [text.split(":")[0] for _, text, _ in scanned.values] == \
        ["Alert threshold", "Retention", "#tag line, still text Limit"]
    for fid, evidence in doc.evidence.items():
        assert scanned.targets([fid]) == [s.target for s in evidence.sources]
