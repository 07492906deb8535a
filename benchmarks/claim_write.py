"""The one-claim write the search and disk benchmarks make: one transaction appends a
paragraph of one claim (with its footnote, citing a turn already archived) to a topic, the
topics taken in a fixed spread order. Child processes run it against either side's code, so
it is source text they execute after their imports (``ws``: the workspace)."""

CLAIM_WRITE = r'''
def claim_topic(topic_files, i):
    """The topic the i-th write appends to (spread over the topics, the same on every run)."""
    return topic_files[(i * 7919) % len(topic_files)]

def claim_write(ws, rel, i, sid="openprogram/s-0/n0"):
    """Append one claim marked ``marker<i>x`` to ``rel`` in one transaction (``sid``: a
    turn topic_gen.py archives in every workspace)."""
    with ws.begin(allowed_sources=[sid]) as tx:
        path = tx.stage / rel
        path.write_text(path.read_text() + f"\nA new paragraph marker{i}x about the kiln and "
                        f"its glaze, fired on day {i}.[^e1]\n\n"
                        f"[^e1]: Time: `2026-09-01`; Sources: [new]({sid})\n")
        assert tx.commit("bench: write").changed_files == [rel]
'''
