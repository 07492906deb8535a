"""The topic parser as it was before its speed-up (commit 009abc4): the methods and helpers the
speed-up changed (parse, block, definition, splitting ids), copied verbatim so a property can
check the current parser gives the same ``TopicDoc`` for any input; the rest (sources, finish,
line classification) is the current parser's, unchanged. Test-only."""

from __future__ import annotations

import re

from scriptorium.memory.topics import (
    BLOCK_ID_RE, FOOTNOTE_ID_RE, Block, Claim, Evidence, Heading, Item, Raw, TopicDoc, valid_when,
)
from scriptorium.memory.topics import CITATION_RE as _CITATION_RE, DEF_START_RE as _DEF_START_RE
from scriptorium.memory.topics import HEADING_RE as _HEADING_RE, Parser as _Parser
from scriptorium.memory.topics import classify as _classify
from scriptorium.memory.topic_syntax import DEF_RE as _DEF_RE, LEGACY_DEF_RE as _LEGACY_DEF_RE
from scriptorium.memory.topic_syntax import LINK_RE as _LINK_RE, link_target as _link_target

_WS_BEFORE_CITATION_RE = re.compile(r"\s+(?=\[\^)")


def _split_ids(body: str) -> tuple[str, list[str]]:
    """Split the trailing `` ^a ^b`` run off a paragraph body."""
    rest = body.rstrip()
    ids: list[str] = []
    while True:
        m = re.search(r"\^([^\s\[\]\^]*)$", rest)
        if not m:
            break
        before = rest[: m.start()]
        if before and not (before[-1].isspace() or before[-1] == "]"):
            break  # "x^2": part of the text, not an id
        ids.insert(0, m.group(1))
        rest = before.rstrip()
    return rest, ids


def _collapse(text: str) -> str:
    return " ".join(text.split())


class ReferenceParser(_Parser):
    """The parser of commit 009abc4 (``sources``, ``finish`` and ``problem``: the current
    parser's, which the speed-up did not change)."""

    def definition(self, stripped: str, line: int) -> Evidence | None:
        m = _DEF_RE.fullmatch(stripped) or _LEGACY_DEF_RE.fullmatch(stripped)
        start = _DEF_START_RE.match(stripped)
        if start:
            self.broken_fids.add(start.group(0)[2:-2])  # removed again once parsed
        if not m:
            self.problem(line, "malformed footnote definition (expected "
                               "'[^id]: Time: `YYYY-MM-DD`; Sources: [label](target)')")
            return None
        fid = m.group("fid")
        when = m.group("when").strip("`").strip()
        sources = self.sources(m.group("src"), line)
        if sources is None:
            return None
        self.broken_fids.discard(fid)
        if not FOOTNOTE_ID_RE.fullmatch(fid):
            self.problem(line, f"invalid footnote id [^{fid}] (allowed: letters, digits, _ and -)")
        if not valid_when(when):
            self.problem(line, f"invalid time {when!r} in [^{fid}] (expected YYYY, YYYY-MM, "
                               "YYYY-MM-DD naming a real date, or undated)")
        return Evidence(fid=fid, when=when, sources=sources, line=line)

    def block(self, lines: list[str], line: int, headings: list[str]) -> Block:
        body = "\n".join(part.strip() for part in lines)
        body = _WS_BEFORE_CITATION_RE.sub("", body)
        text, ids = _split_ids(body)
        good_ids: list[str] = []
        for token in ids:
            if not BLOCK_ID_RE.fullmatch(token):
                self.problem(line, f"invalid block id '^{token}' (allowed: letters, digits and -)")
            elif token in good_ids:
                self.problem(line, f"block id ^{token} repeated in one paragraph")
            else:
                good_ids.append(token)
        claims: list[Claim] = []
        pos = 0
        last_end = -1
        for m in _CITATION_RE.finditer(text):
            fid = m.group(1)
            segment = text[pos:m.start()]
            if not FOOTNOTE_ID_RE.fullmatch(fid):
                self.problem(line, f"invalid citation [^{fid}] (allowed: letters, digits, _ and -)")
            if "[^" in segment:
                self.problem(line, "malformed citation (a '[^' that is not '[^id]')")
            if m.start() == last_end and claims:
                claims[-1].citations.append(fid)
            elif not segment.strip():
                self.problem(line, f"citation [^{fid}] has no claim text before it")
                claims.append(Claim("", [fid]))
            else:
                claims.append(Claim(_collapse(segment), [fid]))
            pos = last_end = m.end()
        tail = text[pos:]
        if "[^" in tail:
            self.problem(line, "malformed citation (a '[^' that is not '[^id]')")
        if tail.strip():
            if claims:
                self.problem(line, "text after the last citation (every claim must end with "
                                   "its citation)")
            claims.append(Claim(_collapse(tail), []))
        block = Block(id=good_ids[-1] if good_ids else "", aliases=good_ids[:-1], claims=claims,
                      headings=list(headings), line=line, text=text)
        if not block.citations:
            self.problem(line, "paragraph without a citation (every paragraph must cite its "
                               "evidence)")
        if not good_ids and not block.legacy:
            self.problem(line, "memory block ID required (paragraph does not end with ^id)")
        for m in _LINK_RE.finditer(text):
            kind = _link_target(self.path, m.group(2))
            if kind is None:
                continue
            is_block, target_path, fragment = kind
            block_id = fragment[1:]
            if not is_block:
                self.problem(line, f"link to topic {m.group(2)!r} must name a block (#^id)")
            elif not BLOCK_ID_RE.fullmatch(block_id):
                self.problem(line, f"link {m.group(2)!r} names an invalid block id")
            else:
                block.links.append((target_path, block_id))
        return block

    def parse(self, text: str) -> TopicDoc:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        items: list[Item] = []
        stack: list[tuple[int, str]] = []
        para: list[str] = []
        para_line = 0

        def flush() -> None:
            nonlocal para
            if para:
                items.append(self.block(para, para_line, [t for _, t in stack]))
                para = []

        i = 0
        n = len(lines)
        while i < n:
            raw = lines[i]
            stripped = raw.strip()
            kind = _classify(stripped)
            lineno = i + 1
            if kind == "text":
                if not para:
                    para_line = lineno
                para.append(raw)
                i += 1
                continue
            flush()
            if kind == "blank":
                i += 1
            elif kind == "heading":
                m = _HEADING_RE.fullmatch(stripped)
                assert m is not None
                level, title = len(m.group(1)), (m.group(2) or "").strip()
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, title))
                items.append(Heading(level, title, lineno))
                i += 1
            elif kind == "def":
                evidence = self.definition(stripped, lineno)
                items.append(evidence if evidence is not None else Raw([raw], lineno))
                i += 1
            elif kind == "comment":
                j = i
                if "-->" not in stripped[4:] and stripped.startswith("<!--"):
                    while j + 1 < n and "-->" not in lines[j + 1]:
                        j += 1
                    j = min(j + 1, n - 1)
                items.append(Raw(lines[i:j + 1], lineno))
                i = j + 1
            else:  # fence
                marker = stripped[:3]
                j = i + 1
                while j < n and not lines[j].strip().startswith(marker):
                    j += 1
                items.append(Raw(lines[i:min(j, n - 1) + 1], lineno))
                i = j + 1
        flush()
        return self.finish(items)


def reference_parse(text: str, path: str) -> TopicDoc:
    """A lenient parse by the old parser."""
    return ReferenceParser(path).parse(text)
