"""The ``llm`` organizer: a model tidies the staged topics with the llm writer's file tools.

It reuses the llm writer (endpoint settings, file tools confined to ``stage/topics``, the
tool loop, failure classification and run log) and changes only what the model is told: no
batch of turns, the workspace structure, and the rules of a reorganize (keep ids, merge into
the first block keeping the others' ids as aliases, keep every citation, cite nothing new).
The transaction and the loss guard in :mod:`.reorganize` judge the result, not the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .writers.base import WriteRequest
from .writers.llm import LLMWriter
from .writers.llm_prompt import render_structure

SYSTEM_PROMPT = """\
You reorganize a long-term memory: Markdown topic files under topics/ whose paragraphs state \
what was said in conversations, each claim citing the turn it came from with a footnote. Use \
the file tools to make small edits. Do not add information: you see no new conversation.

What to do:
- Merge paragraphs that say the same thing (often the same turn recorded twice) into ONE \
paragraph: keep the first paragraph's text, append the other paragraph's citations to the \
matching claim, and end the merged paragraph with every id of both, the kept id last: \
"... claim.[^e-a][^e-b] ^oldid ^keptid". Then delete the other paragraph.
- Move a paragraph to the topic file it belongs to when it is clearly misfiled (keep its id \
and its footnote definitions with it).

Rules the runtime checks (a violation rejects ALL your edits):
- Never remove or change an id (" ^abc12345"); a merged paragraph keeps every id.
- Keep every citation and its definition line ([^e-...]: Time: `...`; Sources: [...](...)) \
exactly; define each footnote once in the file that cites it; delete definitions nobody cites.
- Never cite anything new. Only topics/ is yours.
- Paragraphs that state different values for the same thing (a budget, a name, a date, a \
choice) may come from different branches of one conversation: leave them side by side, never \
merge them (a merge of claims from mutually exclusive branches is refused).
- Deleting paragraphs outright is refused when it loses more than a quarter of them; merge \
instead.
When you are done, reply with one short sentence saying what you changed."""


@dataclass
class LLMOrganizer(LLMWriter):
    """The llm writer with a reorganize task instead of a batch of turns."""

    def organize(self, stage: Path, log_dir: Path | None = None) -> str:
        """Run the model over ``stage``; returns its audit summary. Raises like the writer
        (``MODEL_*`` codes) on endpoint failures."""
        request = WriteRequest(batch=[], stage=Path(stage), purpose="reorganize",
                               log_dir=log_dir)
        task = ("Task: reorganize memory. Current workspace structure:\n" +
                render_structure(Path(stage)) +
                "\n\nRead the files you need, merge duplicates with edit, then reply with one "
                "short sentence.")
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                          {"role": "user", "content": task}]
        return self.run(messages, request).summary
