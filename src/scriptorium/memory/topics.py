"""The topic format: memory as Markdown paragraphs that cite archived evidence.

A topic file (``topics/**.md``) holds headings, *blocks*, footnote definitions, HTML comment /
anchor lines and fenced code. A block is one paragraph whose claims each end in a citation group
(``[^e-…]``) and whose last line ends with its stable id (`` ^f888f60e``, earlier ``^ids`` in the
run are aliases kept after merges). A definition is one line::

    [^e-1175dea39c]: Time: `2026-08-01`; Sources: [budget](../../sources/openprogram/_v2/s.md#source-…)

This module is pure (no filesystem, no archive): it parses strictly (every rule of the memory
reference §2.4 is an error naming ``path:line``) and renders canonically; the items it parses
into and the line syntax are scriptorium.memory.topic_syntax. Normalising a writer's staged
edits (writers never write ids; the runtime gives them) builds on it:
scriptorium.memory.normalize.
"""

from __future__ import annotations

import posixpath
import re
from typing import Iterable

from .claims import SUPERSEDED_MARK  # how a claim says a later one replaced it
from .topic_syntax import (
    BARE_HANDLE_LABEL, BLOCK_ID_RE, CANONICAL_DEF_RE, CITATION_RE, DEF_RE, DEF_START_RE,
    FOOTNOTE_ID_RE, HEADING_RE, LEGACY_DEF_RE, LINK_RE, SOURCE_RE, SOURCE_SEP_RE, SPECIAL_FIRST,
    Block, Claim, Evidence, Heading, Item, Raw, SourceLink, TopicDoc, TopicFormatError,
    bare_handles, classify, collapse, is_local_label, link_target, split_ids,
    strip_before_citations, valid_when,
)

__all__ = [
    "TopicFormatError", "SourceLink", "Evidence", "Claim", "Block", "Heading", "Raw", "Item",
    "TopicDoc", "Parser", "parse_topic", "parse_topic_bytes", "render_topic", "render_block",
    "render_evidence", "render_item", "validate_tree", "repoint_block_links", "is_local_label",
    "valid_when", "classify", "collapse", "BLOCK_ID_RE", "FOOTNOTE_ID_RE", "SUPERSEDED_MARK",
    "CITATION_RE", "HEADING_RE", "DEF_START_RE",
]


# -- parsing ---------------------------------------------------------------------------------


class Parser:
    def __init__(self, path: str):
        self.path = path
        self.problems: list[TopicFormatError] = []
        self.broken_fids: set[str] = set()  # footnotes whose definition line is malformed

    def problem(self, line: int, what: str) -> None:
        self.problems.append(TopicFormatError(self.path, line, what))

    def definition(self, stripped: str, line: int) -> Evidence | None:
        m = CANONICAL_DEF_RE.fullmatch(stripped)  # how normalisation writes one: read at once
        if m is not None and valid_when(m.group(2)) and m.group(3) == m.group(3).strip():
            self.broken_fids.discard(m.group(1))
            return Evidence(m.group(1), m.group(2), [SourceLink(m.group(3), m.group(4))], line)
        m = DEF_RE.fullmatch(stripped) or LEGACY_DEF_RE.fullmatch(stripped)
        if not m:
            start = DEF_START_RE.match(stripped)
            if start:
                self.broken_fids.add(start.group(0)[2:-2])
            self.problem(line, "malformed footnote definition (expected "
                               "'[^id]: Time: `YYYY-MM-DD`; Sources: [label](target)')")
            return None
        fid = m.group("fid")  # the same id DEF_START_RE reads: both stop at the first "]"
        when = m.group("when").strip("`").strip()
        sources = self.sources(m.group("src"), line)
        if sources is None:
            self.broken_fids.add(fid)
            return None
        self.broken_fids.discard(fid)  # a later good definition mends an earlier broken one
        if not FOOTNOTE_ID_RE.fullmatch(fid):
            self.problem(line, f"invalid footnote id [^{fid}] (allowed: letters, digits, _ and -)")
        if not valid_when(when):
            self.problem(line, f"invalid time {when!r} in [^{fid}] (expected YYYY, YYYY-MM, "
                               "YYYY-MM-DD naming a real date, or undated)")
        return Evidence(fid=fid, when=when, sources=sources, line=line)

    def sources(self, text: str, line: int) -> list[SourceLink] | None:
        out: list[SourceLink] = []
        pos = 0
        text = text.rstrip()
        bare = bare_handles(text)
        if bare is not None:
            # A model's shorthand the reference's normaliser turns into links: strict parsing
            # names it, the normaliser (lenient) renders each handle as a labelled link.
            self.problem(line, f"Sources lists a bare handle {bare[0]!r} (expected "
                               f"'[label]({bare[0]})'; the normaliser links it)")
            return [SourceLink(BARE_HANDLE_LABEL, handle) for handle in bare]
        while True:
            m = SOURCE_RE.match(text, pos)
            if not m:
                self.problem(line, "malformed Sources list (expected "
                                   "'[label](target)' separated by ', ')")
                return None
            label, target = m.group(1).strip(), m.group(2).strip()
            if not label:
                self.problem(line, "empty source label")
            if not target:
                self.problem(line, f"empty source target for [{label}]")
            out.append(SourceLink(label, target))
            pos = m.end()
            if pos >= len(text):
                return out
            sep = SOURCE_SEP_RE.match(text, pos)
            pos = sep.end() if sep else pos

    def block(self, lines: list[str], line: int, headings: list[str]) -> Block:
        text, ids = split_ids(strip_before_citations("\n".join([part.strip()
                                                                   for part in lines])))
        good_ids: list[str] = []
        for token in ids:
            if not BLOCK_ID_RE.fullmatch(token):
                self.problem(line, f"invalid block id '^{token}' (allowed: letters, digits and -)")
            elif token in good_ids:
                self.problem(line, f"block id ^{token} repeated in one paragraph")
            else:
                good_ids.append(token)
        claims: list[Claim] = []
        citations: list[str] = []
        pos = 0
        last_end = -1
        for m in CITATION_RE.finditer(text):
            fid = m.group(1)
            start = m.start()
            citations.append(fid)
            if not FOOTNOTE_ID_RE.fullmatch(fid):
                self.problem(line, f"invalid citation [^{fid}] (allowed: letters, digits, _ and -)")
            if start == last_end and claims:
                claims[-1].citations.append(fid)
            else:
                segment = text[pos:start]
                if "[^" in segment:
                    self.problem(line, "malformed citation (a '[^' that is not '[^id]')")
                if not segment.strip():
                    self.problem(line, f"citation [^{fid}] has no claim text before it")
                    claims.append(Claim("", [fid]))
                else:
                    claims.append(Claim(" ".join(segment.split()), [fid]))
            pos = last_end = m.end()
        tail = text[pos:]
        if "[^" in tail:
            self.problem(line, "malformed citation (a '[^' that is not '[^id]')")
        if tail.strip():
            if claims:
                self.problem(line, "text after the last citation (every claim must end with "
                                   "its citation)")
            claims.append(Claim(" ".join(tail.split()), []))
        block = Block(id=good_ids[-1] if good_ids else "", aliases=good_ids[:-1], claims=claims,
                      headings=list(headings), line=line, text=text)
        if not citations:
            self.problem(line, "paragraph without a citation (every paragraph must cite its "
                               "evidence)")
        if not good_ids and not block.legacy:
            self.problem(line, "memory block ID required (paragraph does not end with ^id)")
        if "](" in text:  # a Markdown link: a block link must name a real block
            self.links(block, line)
        return block

    def links(self, block: Block, line: int) -> None:
        for m in LINK_RE.finditer(block.text):
            kind = link_target(self.path, m.group(2))
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

    def parse(self, text: str) -> TopicDoc:
        return self.finish(self.read(text))

    def read(self, text: str) -> list[Item]:
        """The items of ``text``, each checked on its own (the rules that span the file are
        :meth:`finish`'s: a caller reading part of a file asks only for its items)."""
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        items: list[Item] = []
        stack: list[tuple[int, str]] = []
        headings: list[str] = []  # the titles of ``stack``, kept in step with it
        para: list[str] = []
        para_line = 0
        i = 0
        n = len(lines)
        while i < n:
            raw = lines[i]
            stripped = raw.strip()
            # most lines are paragraph text or definitions: decide those without a call
            first = stripped[:1]
            if first and first not in SPECIAL_FIRST:
                kind = "text"
            elif first == "[" and stripped.startswith("[^"):
                kind = "def" if DEF_START_RE.match(stripped) else "text"
            else:
                kind = classify(stripped)
            lineno = i + 1
            if kind == "text":
                if not para:
                    para_line = lineno
                para.append(raw)
                i += 1
                continue
            if para:
                items.append(self.block(para, para_line, headings))
                para = []
            if kind == "blank":
                i += 1
            elif kind == "def":
                evidence = self.definition(stripped, lineno)
                items.append(evidence if evidence is not None else Raw([raw], lineno))
                i += 1
            elif kind == "heading":
                m = HEADING_RE.fullmatch(stripped)
                assert m is not None
                level, title = len(m.group(1)), (m.group(2) or "").strip()
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, title))
                headings = [t for _, t in stack]
                items.append(Heading(level, title, lineno))
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
        if para:
            items.append(self.block(para, para_line, headings))
        return items

    def finish(self, items: list[Item]) -> TopicDoc:
        blocks = [item for item in items if isinstance(item, Block)]
        evidence: dict[str, Evidence] = {}
        for item in items:
            if isinstance(item, Evidence):
                if item.fid in evidence:
                    self.problem(item.line, f"duplicate footnote definition [^{item.fid}] "
                                            f"(first at line {evidence[item.fid].line})")
                else:
                    evidence[item.fid] = item
        seen_ids: dict[str, int] = {}
        cited: set[str] = set()
        for block in blocks:
            for block_id in block.ids:
                if block_id in seen_ids:
                    self.problem(block.line, f"duplicate block id ^{block_id} (also at line "
                                             f"{seen_ids[block_id]})")
                else:
                    seen_ids[block_id] = block.line
            for fid in block.citations:
                cited.add(fid)
                if fid not in evidence and FOOTNOTE_ID_RE.fullmatch(fid) \
                        and fid not in self.broken_fids:
                    self.problem(block.line, f"citation [^{fid}] has no definition in this file")
        for fid, item in evidence.items():
            if fid not in cited:
                self.problem(item.line, f"unused footnote definition [^{fid}]")
        problems = sorted(self.problems, key=lambda p: p.line)  # stable: first found first
        return TopicDoc(path=self.path, blocks=blocks, evidence=evidence, items=items,
                        problems=problems)


def parse_topic(text: str, path: str, *, strict: bool = True) -> TopicDoc:
    """Parse one topic file. ``path`` is workspace-relative (``topics/projects/x.md``): it names
    the file in errors and anchors relative links.

    Strict: the first broken rule raises :class:`TopicFormatError` (``path:line: what``).
    Lenient: never raises; every broken rule is listed in ``doc.problems``.
    """
    doc = Parser(path).parse(text)
    if strict and doc.problems:
        raise doc.problems[0]
    return doc


def parse_topic_bytes(data: bytes, path: str, *, strict: bool = True) -> TopicDoc:
    """Parse a topic file's bytes: not-UTF-8 is a format error naming the line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if strict:
            line = data[: exc.start].count(b"\n") + 1
            raise TopicFormatError(path, line, "not valid UTF-8") from None
        text = data.decode("utf-8", errors="replace")
    return parse_topic(text, path, strict=strict)


# -- rendering -------------------------------------------------------------------------------


def render_evidence(evidence: Evidence) -> str:
    sources = ", ".join(f"[{s.label}]({s.target})" for s in evidence.sources)
    return f"[^{evidence.fid}]: Time: `{evidence.when}`; Sources: {sources}"


def render_block(block: Block) -> str:
    parts = [block.text] if block.text else []
    parts += [f"^{i}" for i in block.ids]
    return " ".join(parts)


def render_item(item: Item) -> str:
    """One item as it stands in a canonical file ("" for a block nothing is left of)."""
    if isinstance(item, Evidence):
        return render_evidence(item)
    if isinstance(item, Heading):
        return "#" * item.level + (f" {item.text}" if item.text else "")
    if isinstance(item, Block):
        return render_block(item)
    return "\n".join(item.lines)


def render_topic(doc: TopicDoc) -> str:
    """Canonical text: one blank line between items, a paragraph's definitions grouped on
    consecutive lines, definitions in the canonical ``Time: `…`; Sources:`` form, no
    whitespace before ``[^``, one space before each ``^id``, one final newline."""
    groups: list[str] = []
    previous_was_def = False
    for item in doc.items:
        if isinstance(item, Evidence):
            line = render_evidence(item)
            if previous_was_def:
                groups[-1] += "\n" + line
            else:
                groups.append(line)
            previous_was_def = True
            continue
        rendered = render_item(item)
        if rendered:  # a lenient parse of a bare "^" leaves an empty block behind
            groups.append(rendered)
            previous_was_def = False
    return "\n\n".join(groups) + "\n" if groups else ""


# -- cross-file rules ------------------------------------------------------------------------


def validate_tree(docs: Iterable[TopicDoc]) -> None:
    """Rules that span files: every block id and alias is unique across the tree, and every
    block link ``[text](rel.md#^id)`` names an id that exists. Raises TopicFormatError."""
    docs = list(docs)
    where: dict[str, tuple[str, int]] = {}
    for doc in docs:
        for block in doc.blocks:
            for block_id in block.ids:
                if block_id in where and where[block_id][0] != doc.path:
                    other_path, other_line = where[block_id]
                    raise TopicFormatError(doc.path, block.line,
                                           f"duplicate block id ^{block_id} (also "
                                           f"{other_path}:{other_line})")
                where.setdefault(block_id, (doc.path, block.line))
    for doc in docs:
        for block in doc.blocks:
            for _, block_id in block.links:
                if block_id not in where:
                    raise TopicFormatError(doc.path, block.line,
                                           f"dangling block link ^{block_id} (no block has "
                                           "this id)")


def repoint_block_links(text: str, path: str, where: dict[str, str]) -> str:
    """Re-point ``[t](rel.md#^id)`` links whose block moved to another file. ``where`` maps
    block id (and alias) -> the topic path that holds it now. Other text is untouched."""

    def fix(m: re.Match[str]) -> str:
        kind = link_target(path, m.group(2))
        if kind is None or not kind[0]:
            return m.group(0)
        _, target_path, fragment = kind
        holder = where.get(fragment[1:])
        if holder is None or holder == target_path:
            return m.group(0)
        if holder == path:
            rel = ""
        else:
            rel = posixpath.relpath(holder, posixpath.dirname(path) or ".")
        return f"[{m.group(1)}]({rel}#{fragment})"

    return LINK_RE.sub(fix, text)
