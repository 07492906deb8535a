"""Searching memory: BM25 over topic claims (and archived frames), embedding, hybrid.

Every query first brings the derived index up to date with the files (when nothing was
installed since, one read of the install counter; see ``index.py``), so what is found is what
is on disk, even after a hand edit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ...errors import InvalidInput
from ...sessions import SessionStore
from ..provenance import ALTERNATIVE, ELSEWHERE, BranchReader, Provenance
from ..records import PROVIDER
from .documents import WORD_RE, CJK_RUN_RE, cjk_grams, when_range
from .embedding import (Embedder, load_embedder, pack, rank_by_similarity, rrf_fuse,
                        text_key, unpack)
from .index import SearchIndex, SearchIndexUnavailable
from .rows import SPEAKER_SEP, day_number
from .supersession import rank_holding_first

log = logging.getLogger(__name__)

METHODS = ("bm25", "embedding", "hybrid")
MAX_TOP_K = 1000
MAX_TERMS = 64
# Column weights: claim text, where it is filed (path words, headings, speaker), its dates,
# CJK grams.
BM25_WEIGHTS = (1.0, 0.5, 0.5, 1.0)
FUSION_DEPTH = 50  # how deep each ranking goes before fusion
# Branch-aware search: how many candidates are classified, and how much an `alternative`
# hit (said on another branch of the reader's conversation) is discounted: it still ranks
# first when it is more than twice as relevant as anything on the reader's line.
BRANCH_DEPTH = 40
ALTERNATIVE_WEIGHT = 0.5
# A BM25 query fully ranks this many times top_k of the best raw matches (at least the
# minimum), see _ranked.
CANDIDATE_FACTOR = 4
CANDIDATE_MIN = 32
# How deep a search looks before superseded claims are ranked down, so the claim that
# replaces one is among the candidates even when the query matches the old one better.
SUPERSESSION_DEPTH = 20

Ranked = list[tuple[dict[str, Any], float]]  # rows of either index, most relevant first


@dataclass
class Hit:
    """One search result. A claim hit names its block and the sources the claim cites; a
    source hit (``kind == "source"``) is an archived turn, ``sources == [its id]``."""

    block_id: str | None
    path: str
    score: float
    text: str
    sources: list[str]
    kind: str = "claim"
    headings: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    line: int = 0
    claim: int = 0
    trusted: bool = True
    source_id: str | None = None
    speaker: str = ""
    # set by a branch-aware search (session=...): on_line / alternative / elsewhere
    provenance: Provenance | None = None

    @property
    def branch(self) -> str | None:
        return self.provenance.branch if self.provenance else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "block_id": self.block_id, "path": self.path, "score": self.score,
            "text": self.text, "sources": list(self.sources), "kind": self.kind,
            "headings": list(self.headings), "dates": list(self.dates), "line": self.line,
            "trusted": self.trusted}
        if self.kind == "claim":
            out["claim"] = self.claim
        else:
            out["source_id"] = self.source_id
            out["speaker"] = self.speaker
        if self.provenance is not None:
            out.update(self.provenance.to_dict())
        return out


@dataclass(frozen=True)
class Filters:
    """Validated filters; ``window`` is the inclusive (first day, last day) asked for."""

    kinds: tuple[str, ...]
    prefix: str | None
    window: tuple[str, str] | None
    speaker: str | None
    cites: str | None = None  # only documents whose sources JSON holds this text


# -- validating what the caller asked ------------------------------------------------------


def normalize_prefix(prefix: str) -> str:
    """A folder or file of the workspace: ``topics/...``, ``sources/...``, or a path relative
    to ``topics/``. Never escapes the workspace."""
    if not isinstance(prefix, str) or not prefix.strip():
        raise InvalidInput("empty --path prefix")
    raw = prefix.strip()
    if "\0" in raw or "\\" in raw or raw.startswith("/"):
        raise InvalidInput(f"invalid --path prefix {prefix!r} (a relative path inside the "
                           "workspace)")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InvalidInput(f"invalid --path prefix {prefix!r} ('..' is not allowed)")
    if not parts:
        raise InvalidInput(f"invalid --path prefix {prefix!r}")
    if parts[0] not in ("topics", "sources"):
        parts.insert(0, "topics")
    return "/".join(parts)


def parse_window(since: str | None, until: str | None) -> tuple[str, str] | None:
    """``since``/``until`` (YYYY, YYYY-MM, YYYY-MM-DD) -> the inclusive day range, open ends
    as far as they go."""
    if since is None and until is None:
        return None
    lo, hi = "0000-01-01", "9999-12-31"
    for flag, value in (("since", since), ("until", until)):
        if value is None:
            continue
        span = when_range(value) if isinstance(value, str) else None
        if span is None:
            raise InvalidInput(f"invalid --{flag} date {value!r} (expected YYYY, YYYY-MM or "
                               "YYYY-MM-DD naming a real date)")
        if flag == "since":
            lo = span[0]
        else:
            hi = span[1]
    if lo > hi:
        raise InvalidInput(f"empty date window: --since {since} is after --until {until}")
    return lo, hi


def make_filters(*, path_prefix: str | None, since: str | None, until: str | None,
                 speaker: str | None, include_sources: bool) -> Filters:
    if speaker is not None:
        if not isinstance(speaker, str) or not speaker.strip():
            raise InvalidInput("empty --speaker")
    kinds: tuple[str, ...] = ("claim", "source") if include_sources else ("claim",)
    return Filters(kinds=kinds,
                   prefix=normalize_prefix(path_prefix) if path_prefix is not None else None,
                   window=parse_window(since, until),
                   speaker=speaker.strip().casefold() if speaker is not None else None)


def query_terms(query: str) -> list[str]:
    """The terms free text is searched for: every word and CJK pair, once each (at most
    ``MAX_TERMS``). Both the SQLite and the PostgreSQL index search these."""
    terms: list[str] = []
    for word in WORD_RE.findall(query.casefold()):
        rest = CJK_RUN_RE.sub(" ", word)
        terms.extend(rest.split())
        terms.extend(cjk_grams(word, for_query=True))
    return list(dict.fromkeys(terms))[:MAX_TERMS]


def match_expression(query: str) -> str:
    """The FTS5 query for free text: every term as a quoted phrase, OR-ed, so BM25 ranks
    documents by how many and how rare the words they share are."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in query_terms(query))


# -- the query -----------------------------------------------------------------------------


def _where(filters: Filters) -> tuple[list[str], list[Any]]:
    clauses = [f"d.kind IN ({','.join('?' * len(filters.kinds))})"]
    params: list[Any] = list(filters.kinds)
    if filters.prefix is not None:
        p = filters.prefix
        clauses.append("(d.path = ? OR d.logical = ? OR d.path = ? OR substr(d.path, 1, ?) = ? "
                       "OR substr(d.logical, 1, ?) = ?)")
        params += [p, p, p + ".md", len(p) + 1, p + "/", len(p) + 1, p + "/"]
    if filters.window is not None:
        # a document's first date range is in its row, any other in doc_dates
        clauses.append("((d.lo <= ? AND d.lo + d.span >= ?) OR EXISTS (SELECT 1 FROM "
                       "doc_dates x WHERE x.doc = d.id AND x.lo <= ? AND x.lo + x.span >= ?))")
        params += [day_number(filters.window[1]), day_number(filters.window[0])] * 2
    if filters.speaker is not None:
        clauses.append("instr(d.speakers, ?) > 0")
        params.append(SPEAKER_SEP + filters.speaker + SPEAKER_SEP)
    if filters.cites is not None:
        clauses.append("instr(d.sources, ?) > 0")
        params.append(filters.cites)
    if "source" in filters.kinds:  # a legacy copy of a turn the v2 archive holds is one turn
        clauses.append("NOT (d.kind = 'source' AND d.version != 'v2' AND EXISTS (SELECT 1 "
                       "FROM docs v WHERE v.source_id = d.source_id AND v.version = 'v2'))")
    return clauses, params


_COLUMNS = ("d.id, d.kind, d.path, d.line, d.block_id, d.claim, d.text, d.headings, d.dates, "
            "d.sources, d.source_id, d.trusted, d.speaker")


def _hit(row: dict[str, Any], score: float) -> Hit:
    return Hit(block_id=row["block_id"], path=row["path"], score=float(f"{score:.6g}"),
               text=row["text"], sources=json.loads(row["sources"]), kind=row["kind"],
               headings=json.loads(row["headings"]), dates=json.loads(row["dates"]),
               line=row["line"], claim=row["claim"], trusted=bool(row["trusted"]),
               source_id=row["source_id"], speaker=row["speaker"])


def bm25_rows(index: SearchIndex, match: str, filters: Filters,
              limit: int) -> list[tuple[dict[str, Any], float]]:
    """The ``limit`` best documents for ``match``: the best raw BM25 matches fully ranked
    (see :func:`_ranked`), or every match when that cannot be sure of the answer."""
    selective = filters.prefix or filters.window or filters.speaker or filters.cites
    rows = None if selective else _ranked(index, match, filters, limit,
                                          max(CANDIDATE_FACTOR * limit, CANDIDATE_MIN))
    if rows is None:
        rows = _ranked(index, match, filters, limit, None)
        assert rows is not None  # ranking every match is always sure
    return rows


def _ranked(index: SearchIndex, match: str, filters: Filters, limit: int,
            depth: int | None) -> list[tuple[dict[str, Any], float]] | None:
    """Rank the matches (``depth``: only the best ``depth`` + 1 by raw BM25, as the FTS table
    alone ranks them without reading each document's row). Ranking only removes (filters;
    superseded claims are demoted after, see :mod:`.supersession`), never lifts a document
    above its raw BM25, so when the
    last row kept ranks strictly better than the worst raw candidate, nothing outside the
    candidates can displace it: the answer is the full ranking's. Else None."""
    clauses, params = _where(filters)
    weights = ", ".join(str(w) for w in BM25_WEIGHTS)
    best = "ORDER BY raw LIMIT ?" if depth is not None else ""
    sql = (f"WITH c AS MATERIALIZED (SELECT rowid AS id, bm25(fts, {weights}) AS raw FROM fts "
           f"WHERE fts MATCH ? {best}) "
           f"SELECT {_COLUMNS}, c.raw AS rank, "
           "(SELECT max(raw) FROM c) AS edge, (SELECT count(*) FROM c) AS candidates FROM c "
           f"JOIN docs d ON d.id = c.id WHERE {' AND '.join(clauses)} "
           "ORDER BY rank, d.path, d.line, d.claim, d.id LIMIT ?")
    rows = index.rows(sql, [match, *([depth + 1] if depth is not None else []),
                            *params, limit])
    if depth is not None and not (rows and (rows[0]["candidates"] <= depth or (
            len(rows) == limit and rows[-1]["rank"] < rows[0]["edge"]))):
        return None
    for row in rows:
        del row["edge"], row["candidates"]
    return [(row, -row["rank"]) for row in rows]


def embedding_rows(index: SearchIndex, query: str, filters: Filters, limit: int,
                   embedder: Embedder) -> list[tuple[dict[str, Any], float]]:
    """Cosine similarity of the query to every document passing the filters (vectors of
    unchanged documents come from the cache in the index file)."""
    clauses, params = _where(filters)
    rows = index.rows(f"SELECT {_COLUMNS} FROM docs d WHERE {' AND '.join(clauses)} "
                      "ORDER BY d.path, d.line, d.claim, d.id", params)

    def save(pairs: list[tuple[str, bytes]]) -> None:
        index.write_many("INSERT OR REPLACE INTO vectors VALUES (?,?,?)",
                         [(embedder.name, k, v) for k, v in pairs])

    return rank_by_embedding(rows, query, limit, embedder,
                             lambda keys: _cached_vectors(index, embedder, keys), save)


def rank_by_embedding(rows: list[dict[str, Any]], query: str, limit: int, embedder: Embedder,
                      cached: Callable[[set[str]], dict[str, Any]],
                      save: Callable[[list[tuple[str, bytes]]], None]
                      ) -> list[tuple[dict[str, Any], float]]:
    """The ``limit`` of ``rows`` (documents, in a stable order) most similar to ``query``:
    the vectors ``cached`` has for their texts' keys, the others embedded now and handed to
    ``save`` (key, packed vector). Either index supplies its own cache."""
    if not rows:
        return []
    texts = {row["id"]: _embed_text(row) for row in rows}
    keys = {doc_id: text_key(text) for doc_id, text in texts.items()}
    vectors = cached(set(keys.values()))
    missing = sorted({keys[i] for i in texts if keys[i] not in vectors})
    if missing:
        by_key = {keys[i]: texts[i] for i in texts}
        fresh = embedder.embed([by_key[k] for k in missing])
        if len(fresh) != len(missing):
            raise RuntimeError(f"embedder {embedder.name} returned {len(fresh)} vectors for "
                               f"{len(missing)} texts")
        save([(k, pack(v)) for k, v in zip(missing, fresh)])
        for k, v in zip(missing, fresh):
            vectors[k] = list(v)
    query_vec = embedder.embed([query])[0]
    by_id = {row["id"]: row for row in rows}
    ranked = rank_by_similarity(query_vec, [(row["id"], vectors[keys[row["id"]]])
                                            for row in rows])
    return [(by_id[doc_id], score) for doc_id, score in ranked[:limit]]


def by_method(method: str, top_k: int, lexical: Callable[[int], Ranked],
              semantic: Callable[[int], Ranked]) -> Ranked:
    """The ``top_k`` best rows by ``method``, given how either index ranks ``depth`` rows
    lexically (BM25) and by embedding: hybrid fuses both, each ``FUSION_DEPTH`` deep."""
    if method == "bm25":
        return lexical(top_k)
    if method == "embedding":
        return semantic(top_k)
    depth = max(FUSION_DEPTH, top_k)
    return fuse([lexical(depth), semantic(depth)], top_k)


def _embed_text(row: dict[str, Any]) -> str:
    headings = " / ".join(json.loads(row["headings"]))
    return f"{headings}: {row['text']}" if headings else row["text"]


def _cached_vectors(index: SearchIndex, embedder: Embedder, keys: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    wanted = sorted(keys)
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        for row in index.rows(
                f"SELECT key, vec FROM vectors WHERE model = ? AND key IN "
                f"({','.join('?' * len(chunk))})", [embedder.name, *chunk]):
            out[row["key"]] = unpack(row["vec"])
    return out


def fuse(rankings: Sequence[Sequence[tuple[dict[str, Any], float]]],
         top_k: int) -> list[tuple[dict[str, Any], float]]:
    """Hybrid: reciprocal-rank fusion of the BM25 and embedding rankings."""
    rows: dict[int, dict[str, Any]] = {}
    for ranking in rankings:
        for row, _ in ranking:
            rows.setdefault(row["id"], row)
    fused = rrf_fuse([[row["id"] for row, _ in ranking] for ranking in rankings])
    return [(rows[doc_id], score) for doc_id, score in fused[:top_k]]


def check_arguments(query: str, *, top_k: int = 5, path_prefix: str | None = None,
                    since: str | None = None, until: str | None = None,
                    speaker: str | None = None, include_sources: bool = False,
                    method: str = "bm25") -> tuple[Filters, str]:
    """Validate a search's arguments (InvalidInput naming the bad one); returns the filters
    and the FTS5 match expression. Needs no workspace."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("empty search query")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInput(f"invalid top_k {top_k!r} (1..{MAX_TOP_K})")
    if method not in METHODS:
        raise InvalidInput(f"unknown search method {method!r} (bm25, embedding or hybrid)")
    filters = make_filters(path_prefix=path_prefix, since=since, until=until, speaker=speaker,
                           include_sources=include_sources)
    match = match_expression(query)
    if method == "bm25" and not match:
        raise InvalidInput(f"search query {query!r} has no searchable words")
    return filters, match


def search(workspace: Any, query: str, *, top_k: int = 5, path_prefix: str | None = None,
           since: str | None = None, until: str | None = None, speaker: str | None = None,
           include_sources: bool = False, method: str = "bm25",
           embedder: Embedder | None = None, session: str | None = None,
           head: str | None = None, store: SessionStore | None = None,
           reader: BranchReader | None = None, own_session: bool = False) -> list[Hit]:
    """Search memory: the ``top_k`` best topic claims (and archived turns when
    ``include_sources``) for ``query``.

    Filters: ``path_prefix`` (a folder or file under ``topics/`` or ``sources/``; a bare path
    is taken under ``topics/``), a date window ``since``/``until`` (YYYY, YYYY-MM or
    YYYY-MM-DD; a claim matches when one of its evidence dates overlaps it, a turn by its
    timestamp), ``speaker`` (id, display name or label, any case: the
    turns that person said, and the claims citing them).
    ``method``: ``bm25`` (default), ``embedding`` or ``hybrid`` (reciprocal-rank fusion of
    both); the last two need the optional local embedding model (else EMBEDDING_UNAVAILABLE).

    Branch-aware (``session``, optionally ``head``: default the session's head): every hit
    carries its provenance for a reader at that tip (``on_line`` / ``alternative`` /
    ``elsewhere``) and alternatives rank below the others of similar relevance (see
    :mod:`scriptorium.memory.provenance`). ``store`` defaults to the home's session store
    (the workspace's sibling ``sessions/``). Unknown session or tip: NotFound. A caller
    that already holds the reader passes it as ``reader`` instead of session/head;
    ``own_session`` keeps only claims citing the reader's conversation.

    A value claim a later claim on the same line replaces ranks below the one that holds
    (for a branch-aware reader, only a replacement not said on another branch counts; see
    :mod:`.supersession`).
    """
    filters, match = check_arguments(
        query, top_k=top_k, path_prefix=path_prefix, since=since, until=until,
        speaker=speaker, include_sources=include_sources, method=method)
    if reader is None and session is not None:
        reader = branch_reader(workspace, session, head, store)
    elif reader is None and head is not None:
        raise InvalidInput("--head needs --session (the conversation the tip belongs to)")
    filters, depth = search_plan(filters, top_k, None if reader is None else
                                 reader.session_id, own_session)
    if method != "bm25" and embedder is None:
        embedder = load_embedder()  # raises EMBEDDING_UNAVAILABLE: never a silent fallback
    index = SearchIndex.of(workspace)
    try:
        try:
            ranked = _run(index, method, query, match, filters, depth, include_sources,
                          embedder)
        except sqlite3.DatabaseError as exc:  # damaged under us: it is derived, so rebuild once
            log.warning("search index %s unusable (%s); rebuilding", index.path, exc)
            index.discard()
            ranked = _run(index, method, query, match, filters, depth, include_sources,
                          embedder)
        ranked = rank_holding_first(index, ranked, reader)
    except (sqlite3.Error, OSError) as exc:  # a full disk, an unwritable or odd index path
        raise SearchIndexUnavailable(
            f"search index {index.path} cannot be used ({type(exc).__name__}: {exc}); "
            f"free disk space, or remove that path so it is rebuilt") from None
    if reader is None:
        return [_hit(row, score) for row, score in ranked[:top_k]]
    return rank_for_reader(reader, ranked, top_k)


def rank_for_reader(reader: BranchReader, ranked: list[tuple[dict[str, Any], float]],
                    top_k: int) -> list[Hit]:
    """The ``top_k`` hits of ``ranked`` (rows, most relevant first) for a reader on a
    branch: alternatives discounted, each hit carrying its provenance. Ranks on the cheap
    class (line membership), then builds and describes only what is kept."""
    classes = [reader.branch_of(json.loads(row["sources"])) if _may_cite(reader, row)
               else ELSEWHERE for row, _ in ranked]
    order = sorted(range(len(ranked)), key=lambda i: -ranked[i][1] * _weight(classes[i]))
    hits = [_hit(*ranked[i]) for i in order[:top_k]]
    for hit, prov in zip(hits, reader.classify_many([h.sources for h in hits])):
        hit.provenance = prov
    return hits


def search_plan(filters: Filters, top_k: int, session: str | None,
                own_session: bool) -> tuple[Filters, int]:
    """What either index is asked (SQLite here, PostgreSQL in :mod:`.pg_query`): the filters,
    narrowed with ``own_session`` to claims citing the reading conversation (``session``:
    its id, None for a search without a reader), and how many candidates to rank before
    supersession and the reader's branch weights reorder them. It needs only the id, so a
    caller may plan before it has made the reader."""
    if own_session and session is not None and _json_verbatim(session):
        filters = dataclasses.replace(filters, cites=f'"{PROVIDER}/{session}/')
    depth = max(top_k, SUPERSESSION_DEPTH) if session is None else \
        min(MAX_TOP_K, max(BRANCH_DEPTH, 3 * top_k))
    return filters, depth


def branch_reader(workspace: Any, session: str, head: str | None,
                  store: SessionStore | None = None) -> BranchReader:
    """A reader at (session, head) over the home the workspace belongs to."""
    if store is None:
        store = SessionStore(Path(workspace.root).parent / "sessions")
    return BranchReader(store, session, head)


def _json_verbatim(text: str) -> bool:
    """Does JSON write ``text`` as it is (printable ASCII, no quote or backslash)?"""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def _may_cite(reader: BranchReader, row: dict[str, Any]) -> bool:
    """Could this row cite the reader's session? A substring test skips parsing the JSON of
    rows that plainly cannot (an id JSON writes verbatim)."""
    sid = reader.session_id
    if _json_verbatim(sid):
        return f"{PROVIDER}/{sid}/" in row["sources"]
    return True


def _weight(branch: str | None) -> float:
    return ALTERNATIVE_WEIGHT if branch == ALTERNATIVE else 1.0


def prefer_line(reader: BranchReader, hits: list[Hit]) -> list[Hit]:
    """Classify ``hits`` for ``reader`` and re-rank: an alternative counts at
    ``ALTERNATIVE_WEIGHT`` of its relevance (stable for equal weights)."""
    for hit, prov in zip(hits, reader.classify_many([h.sources for h in hits])):
        hit.provenance = prov
    return sorted(hits, key=lambda h: -h.score * _weight(h.branch))


def _run(index: SearchIndex, method: str, query: str, match: str, filters: Filters, top_k: int,
         include_sources: bool,
         embedder: Embedder | None) -> list[tuple[dict[str, Any], float]]:
    index.refresh(("topic", "source") if include_sources else ("topic",), full=False)
    return by_method(
        method, top_k, lambda depth: bm25_rows(index, match, filters, depth) if match else [],
        lambda depth: embedding_rows(index, query, filters, depth, _need(embedder)))


def _need(embedder: Embedder | None) -> Embedder:
    assert embedder is not None  # search() loads one for every method but bm25
    return embedder
