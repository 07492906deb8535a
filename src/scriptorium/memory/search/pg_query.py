"""Searching a PostgreSQL home: the same arguments, filters, methods (bm25, embedding,
hybrid) and :class:`~.query.Hit` objects as the SQLite search (:func:`.query.search`), over
the ``search_docs`` table.

Ranking. FTS5's ``bm25()`` is Okapi BM25 (k1 1.2, b 0.75) with per-column weights; PostgreSQL's
own ``ts_rank_cd`` has no inverse document frequency (a common word counts as much as a rare
one): its top 5 held 82% of SQLite's and was identical for a quarter of the queries on English
memory (``benchmarks/bench_pg_search.py``). The default ranking (``bm25``) therefore computes
the same formula in SQL (100% / 100% there) from the postings (``search_terms``: one row per
stem and document with its counts per weight, A counting 1 and B, C 0.5 as the SQLite column
weights): only the query's stems are read, from their index alone; a stem's document
frequency is its number of postings; the corpus size and average length come from the
per-file totals. As the SQLite index does, the best raw matches are ranked first and every
match only when that cut could change the answer. ``ts_rank_cd`` (over the GIN index of the
``tsvector``) is kept as an option for comparison.

A warm query asks the server once: one pipeline carries the index state with the home's
install counter, the ranking with the claims that say what they replace in the hits' topics
(supersession's question), and for a branch-aware reader the session's row (the session
store's graph of it is reused while that row says it is current). Only a BM25 cut that
cannot be sure (see :func:`_sure`) or an index behind the home asks again.

Embedding search reads every document passing the filters and ranks by cosine in Python, as
the directory home does; vectors are cached in ``search_vectors`` (no pgvector needed).
"""

from __future__ import annotations

from typing import Any, Sequence

from ...errors import InvalidInput
from ..claims import REPLACES_MARK
from ..provenance import BranchReader
from .pg_index import PgSearchIndex, words
from .embedding import Embedder, load_embedder, unpack
from .query import (BM25_WEIGHTS, CANDIDATE_FACTOR, CANDIDATE_MIN, Filters, Hit, _hit,
                    by_method, check_arguments, query_terms, rank_by_embedding,
                    rank_for_reader, search_plan)
from .supersession import rank_holding_first

RANKINGS = ("bm25", "ts_rank_cd")
DEFAULT_RANKING = "bm25"
K1, B = 1.2, 0.75
# ts_rank_cd's weights are {D, C, B, A}: A = what is said, B = where it is filed, C = dates
_TS_WEIGHTS = "{0.1, %s, %s, %s}" % (BM25_WEIGHTS[2], BM25_WEIGHTS[1], BM25_WEIGHTS[0])
TS_NORMALIZATION = 1  # divide by 1 + log(document length): longer documents count less, as in BM25

_COLUMNS = ("d.id, d.kind, d.path, d.line, d.block_id, d.claim, d.text, d.headings, d.dates, "
            "d.sources, d.source_id, d.trusted, d.speaker")

_TERMS = """
WITH terms AS (
    SELECT t.ord, (SELECT v.lexeme FROM unnest(to_tsvector(%(config)s::regconfig, t.word)) v
                   LIMIT 1) AS lexeme
    FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS t(word, ord)
), q AS MATERIALIZED (
    SELECT ord, lexeme, quote_literal(lexeme)::tsquery AS tq FROM terms
    WHERE lexeme IS NOT NULL
)"""
# The hits (best first), then in the same answer what supersession asks next (see
# supersession._replacers): the claims saying what they replace in the hits' topics, in file
# order (``replacer`` true; a claim's file is its topic's path, so the file index finds them)
_WITH_REPLACERS = """
SELECT * FROM (
    SELECT *, false AS replacer FROM hits
    UNION ALL
    SELECT r.id, r.kind, r.path, r.line, r.block_id, r.claim, r.text, r.headings, r.dates,
           r.sources, r.source_id, r.trusted, r.speaker, NULL, NULL, NULL, true
    FROM search_docs r
    WHERE r.file IN (SELECT h.path FROM hits h WHERE h.kind = 'claim') AND r.kind = 'claim'
          AND strpos(r.text, %(replaces)s) > 0
) u ORDER BY replacer, score DESC, path COLLATE "C", line, claim, id"""
# the OR of every term, as a scalar subquery: an InitPlan, so the GIN index finds candidates
_MATCH = "d.tsv @@ (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery FROM q)"

# BM25 as FTS5 computes it, from the postings of the query's stems alone (search_terms, read
# from its index): document frequencies are their counts, N and the mean length come from
# search_files. The best %(depth)s documents (NULL: all) are then read, filtered and ordered;
# ``edge`` (the worst score cut to) and ``candidates`` tell the caller whether the cut could
# have changed the answer (see _sure).
_BM25 = _TERMS + """, stats AS MATERIALIZED (
    SELECT greatest(sum(docs), 1)::float8 AS n,
           greatest(sum(tokens)::float8 / greatest(sum(docs), 1), 1e-9) AS avgdl
    FROM search_files
), idf AS MATERIALIZED (
    SELECT q.lexeme, greatest(ln((s.n - h.hits + 0.5) / (h.hits + 0.5)), 1e-6) AS idf
    FROM q CROSS JOIN stats s
    CROSS JOIN LATERAL (SELECT count(*)::float8 AS hits FROM search_terms x
                        WHERE x.lexeme = q.lexeme) h
), best AS MATERIALIZED (
    SELECT t.doc, sum(i.idf * f.tf * ({k1}::float8 + 1)
                      / (f.tf + {k1}::float8 * (1 - {b}::float8 + {b}::float8 * t.len / s.avgdl)))
           AS score
    FROM idf i JOIN search_terms t ON t.lexeme = i.lexeme CROSS JOIN stats s
    CROSS JOIN LATERAL (SELECT t.a * {wa}::float8 + t.b * {wb}::float8 + t.c * {wc}::float8
                        AS tf) f
    WHERE t.kind = ANY(%(kinds)s)
    GROUP BY t.doc ORDER BY score DESC LIMIT %(depth)s
), hits AS MATERIALIZED (
    SELECT {columns}, best.score AS score, (SELECT min(score) FROM best) AS edge,
           (SELECT count(*) FROM best) AS candidates
    FROM best JOIN search_docs d ON d.id = best.doc
    WHERE {where} {near}
    ORDER BY score DESC, d.path COLLATE "C", d.line, d.claim, d.id
    LIMIT %(limit)s
)""" + _WITH_REPLACERS
# When nothing but the kind filters (and best holds only that kind), only the documents
# scoring at least the limit-th best can be answers: read just those (ties included).
_NEAR = """AND best.score >= (SELECT min(score) FROM (SELECT score FROM best
                                                   ORDER BY score DESC LIMIT %(limit)s) x)"""

_TS_RANK = _TERMS + """, hits AS MATERIALIZED (
    SELECT {columns}, ts_rank_cd('{weights}', d.tsv,
           (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery FROM q), {norm}) AS score,
           NULL::float8 AS edge, NULL::bigint AS candidates
    FROM search_docs d
    WHERE {match} AND {where}
    ORDER BY score DESC, d.path COLLATE "C", d.line, d.claim, d.id
    LIMIT %(limit)s
)""" + _WITH_REPLACERS


def _where(filters: Filters) -> tuple[str, dict[str, Any]]:
    """The filters as SQL over ``search_docs d`` (the same rules as the SQLite query)."""
    clauses = ["d.kind = ANY(%(kinds)s)"]
    params: dict[str, Any] = {"kinds": list(filters.kinds)}
    if filters.prefix is not None:
        clauses.append("(d.path = %(prefix)s OR d.logical = %(prefix)s OR d.path = %(file)s "
                       "OR starts_with(d.path, %(folder)s) "
                       "OR starts_with(d.logical, %(folder)s))")
        params.update(prefix=filters.prefix, file=filters.prefix + ".md",
                      folder=filters.prefix + "/")
    if filters.window is not None:
        lo, hi = filters.window
        clauses.append("d.ranges && daterange(%(lo)s::date, %(hi)s::date, '[]')")
        params.update(lo=None if lo.startswith("0000") else lo,
                      hi="-infinity" if hi.startswith("0000") else hi)
    if filters.speaker is not None:
        clauses.append("%(speaker)s = ANY(d.speakers)")
        params["speaker"] = filters.speaker
    if filters.cites is not None:
        clauses.append("strpos(d.sources, %(cites)s) > 0")
        params["cites"] = filters.cites
    if "source" in filters.kinds:  # a legacy copy of a turn the v2 archive holds is one turn
        clauses.append("NOT (d.kind = 'source' AND d.version <> 'v2' AND EXISTS (SELECT 1 "
                       "FROM search_docs v WHERE v.source_id = d.source_id AND "
                       "v.version = 'v2'))")
    return " AND ".join(clauses), params


def ranked_rows(index: PgSearchIndex, query: str, filters: Filters, limit: int,
                ranking: str = DEFAULT_RANKING, found: Replacers | None = None,
                side: SessionRow | None = None) -> list[tuple[dict[str, Any], float]]:
    """The ``limit`` best rows for ``query`` passing ``filters``, most relevant first, the
    index first brought up to date (one pooled connection for both; ``found`` keeps the
    replacing claims of their topics that came in the same answer; ``side`` is read in the
    same round trip).

    BM25 first ranks only the best raw matches (the SQLite index's candidate depth) and
    ranks every match only when that cut could have changed the answer (see :func:`_sure`);
    a filter that keeps few documents ranks every match at once."""
    if ranking not in RANKINGS:
        raise ValueError(f"unknown ranking {ranking!r} ({RANKINGS})")
    terms = [" ".join(words(t)) for t in query_terms(query)]
    terms = [t for t in terms if t]
    where, params = _where(filters)
    params.update(config=index.config, terms=terms, limit=limit, replaces=REPLACES_MARK)
    kinds = ("topic", "source") if "source" in filters.kinds else ("topic",)
    if ranking != "bm25":
        sql = _TS_RANK.format(columns=_COLUMNS, weights=_TS_WEIGHTS, norm=TS_NORMALIZATION,
                              match=_MATCH, where=where)
        return _scored(_split(_fetch(index, sql, params, kinds, bool(terms), side), found))
    selective = filters.prefix or filters.window or filters.speaker or filters.cites
    sql = _BM25.format(columns=_COLUMNS, k1=K1, b=B, wa=BM25_WEIGHTS[0], wb=BM25_WEIGHTS[1],
                       wc=BM25_WEIGHTS[2], where=where,
                       near="" if selective or "source" in filters.kinds else _NEAR)
    depth = None if selective else candidate_depth(limit)
    rows = _fetch(index, sql, {**params, "depth": None if depth is None else depth + 1},
                  kinds, bool(terms), side)
    if depth is not None and not _sure([r for r in rows if not r["replacer"]], depth, limit):
        rows = _fetch(index, sql, {**params, "depth": None}, kinds, bool(terms))
    return _scored(_split(rows, found))


class Replacers:
    """Supersession's question after the ranking (which claims of the hits' topics say what
    they replace), answered from the rows that came with the hits: no second round trip.
    Asked about documents the ranking did not return (an embedding hit), it asks the index."""

    def __init__(self, index: PgSearchIndex) -> None:
        self.index = index
        self.topics: dict[int, str] = {}  # claim id -> its topic, for every claim hit seen
        self.rows: dict[str, dict[int, dict[str, Any]]] = {}  # topic -> id -> replacer row

    def learn(self, hits: list[dict[str, Any]], replacers: list[dict[str, Any]]) -> None:
        for row in hits:
            if row["kind"] == "claim":
                self.topics[row["id"]] = row["path"]
                self.rows.setdefault(row["path"], {})
        for row in replacers:
            self.rows.setdefault(row["path"], {})[row["id"]] = row

    def replacer_rows(self, mark: str, doc_ids: Sequence[int]) -> list[dict[str, Any]]:
        """As :meth:`.pg_index.PgSearchIndex.replacer_rows`: in file order."""
        if mark != REPLACES_MARK or any(i not in self.topics for i in doc_ids):
            return self.index.replacer_rows(mark, doc_ids)
        topics = sorted({self.topics[i] for i in doc_ids}, key=lambda p: p.encode())
        return [row for path in topics for row in sorted(
            self.rows[path].values(), key=lambda r: (r["line"], r["claim"]))]


def _split(rows: list[dict[str, Any]], found: Replacers | None) -> list[dict[str, Any]]:
    """The hits of a ranking query's answer (the replacing claims after them go to
    ``found``)."""
    hits = [row for row in rows if not row["replacer"]]
    if found is not None:
        found.learn(hits, [row for row in rows if row["replacer"]])
    for row in hits:
        del row["edge"], row["candidates"], row["replacer"]
    return hits


def candidate_depth(limit: int) -> int:
    """How many raw matches are ranked before the answer is known to be the full ranking's
    (the SQLite index's depth)."""
    return max(CANDIDATE_FACTOR * limit, CANDIDATE_MIN)


def _sure(rows: list[dict[str, Any]], depth: int, limit: int) -> bool:
    """Is the answer from the best ``depth`` + 1 raw matches the full ranking's? Filters
    only remove documents, so yes when every match was a candidate, or when the last row
    kept scores strictly above the worst candidate (nothing cut can displace it)."""
    return bool(rows) and (rows[0]["candidates"] <= depth or (
        len(rows) == limit and rows[-1]["score"] > rows[0]["edge"]))


def _scored(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    return [(row, float(row.pop("score"))) for row in rows]


# The index state, read in the same implicit transaction as the query after it, which it
# sets to use its generic plan (one row even when the state is empty, so the setting holds);
# a home whose install counter is a table adds it as the row HOME_GENERATION
_STATE = ("SELECT s.key, s.value FROM (SELECT set_config('plan_cache_mode', "
          "'force_generic_plan', true)) g LEFT JOIN search_state s ON true")
HOME_GENERATION = ":home-generation"


def _state_sql(index: PgSearchIndex) -> str:
    home = getattr(index.source, "GENERATION_SQL", None)
    return _STATE if home is None else \
        f"{_STATE} UNION ALL SELECT '{HOME_GENERATION}', ({home})::text"


class SessionRow:
    """A branch-aware reader's session row (meta, rev), read in the ranking's own round
    trip, so the reader's reads take it instead of asking again while the session store's
    graph of the session is current (see
    :meth:`~scriptorium.sessions.pg_store.PgSessionStore.known_row`)."""

    def __init__(self, store: Any, session: str) -> None:
        self.store, self.session = store, session
        self.read = False
        self.row: tuple[Any, int] | None = None

    def known(self) -> Any:
        """A context in which the store's reads of the session take the row read."""
        return self.store.known_row(self.session, self.row if self.read else None)


def _fetch(index: PgSearchIndex, sql: str, params: dict[str, Any], kinds: tuple[str, ...],
           run: bool = True, side: SessionRow | None = None) -> list[dict[str, Any]]:
    """Run ``sql`` and read the index state (and the home's install counter, when it is in
    the database, and ``side``'s row when not read yet) in one round trip (one implicit
    transaction), prepared on the server with its generic plan (planning costs more than
    running it); when the state says the index is behind the home, catch up first (in one
    transaction) and run it again."""
    from psycopg.rows import dict_row

    with index.pg.connection() as conn:
        for _ in range(2):
            conn.autocommit = True
            try:
                with conn.pipeline():
                    state_cur = conn.execute(_state_sql(index), prepare=True)
                    side_cur = None if side is None or side.read else conn.execute(
                        side.store.SESSION_ROW_SQL, (side.session,), prepare=True)
                    cur = conn.cursor(row_factory=dict_row)
                    if run:
                        cur.execute(sql, params, prepare=True)
                if side is not None and side_cur is not None:
                    side.row, side.read = side_cur.fetchone(), True
                state = {k: v for k, v in state_cur.fetchall() if k is not None}
                rows = cur.fetchall() if run else []
            finally:
                conn.autocommit = False
            if HOME_GENERATION in state:
                home = state.pop(HOME_GENERATION)
                current = index.is_current(state, kinds, generation=home)
            else:
                current = index.is_current(state, kinds)
            if current:
                break
            index.ensure_current(kinds, conn)  # rare: catch up in one transaction, then again
            conn.commit()
    return rows


def embedding_rows(index: PgSearchIndex, query: str, filters: Filters, limit: int,
                   embedder: Embedder) -> list[tuple[dict[str, Any], float]]:
    """Cosine similarity of the query to every document passing the filters, as the SQLite
    index does it; the vectors are cached in ``search_vectors`` (model, text hash), so only
    new or changed documents are embedded again. No pgvector: the cosine is computed here."""
    where, params = _where(filters)
    kinds = ("topic", "source") if "source" in filters.kinds else ("topic",)
    rows = _fetch(index, f"SELECT {_COLUMNS} FROM search_docs d WHERE {where} "
                  "ORDER BY d.path COLLATE \"C\", d.line, d.claim, d.id", params, kinds)

    def cached(keys: set[str]) -> dict[str, Any]:
        with index.pg.connection() as conn:
            return {key: unpack(vec) for key, vec in conn.execute(
                "SELECT key, vec FROM search_vectors WHERE model = %s AND key = ANY(%s)",
                (embedder.name, sorted(keys)))}

    def save(pairs: list[tuple[str, bytes]]) -> None:
        with index.pg.connection() as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO search_vectors (model, key, vec) VALUES (%s, %s, %s) "
                            "ON CONFLICT DO NOTHING", [(embedder.name, k, v) for k, v in pairs])

    return rank_by_embedding(rows, query, limit, embedder, cached, save)


def pg_search(index: PgSearchIndex, query: str, *, top_k: int = 5,
              path_prefix: str | None = None, since: str | None = None,
              until: str | None = None, speaker: str | None = None,
              include_sources: bool = False, method: str = "bm25",
              embedder: Embedder | None = None,
              session: str | None = None, head: str | None = None, store: Any = None,
              reader: BranchReader | None = None, own_session: bool = False,
              ranking: str = DEFAULT_RANKING) -> list[Hit]:
    """:func:`.query.search` on a PostgreSQL home: the ``top_k`` best topic claims (and
    archived turns when ``include_sources``) by ``method`` (bm25, embedding or hybrid, as
    there: the local model, else EMBEDDING_UNAVAILABLE), with the same filters, supersession
    and branch-aware ranking. ``store`` is the home's session store (needed with
    ``session``)."""
    filters, _ = check_arguments(
        query, top_k=top_k, path_prefix=path_prefix, since=since, until=until,
        speaker=speaker, include_sources=include_sources, method=method)
    side = None
    if reader is None and session is not None:
        if store is None:
            raise InvalidInput("a branch-aware search needs the home's session store")
        if method == "bm25" and hasattr(store, "known_row"):
            side = SessionRow(store, session)  # read with the ranking; NotFound after it
        else:
            reader = BranchReader(store, session, head)
    elif reader is None and head is not None:
        raise InvalidInput("--head needs --session (the conversation the tip belongs to)")
    # the reader's session: of the reader, or of the one made after the ranking (``side``)
    reading = side.session if side is not None else \
        None if reader is None else reader.session_id
    filters, depth = search_plan(filters, top_k, reading, own_session)
    if method != "bm25" and embedder is None:
        embedder = load_embedder()  # raises EMBEDDING_UNAVAILABLE: never a silent fallback
    found = Replacers(index)
    ranked = by_method(
        method, depth, lambda n: ranked_rows(index, query, filters, n, ranking, found, side),
        lambda n: embedding_rows(index, query, filters, n, embedder))  # type: ignore[arg-type]
    if side is None:
        ranked = rank_holding_first(found, ranked, reader)
        if reader is None:
            return [_hit(row, score) for row, score in ranked[:top_k]]
        return rank_for_reader(reader, ranked, top_k)
    with side.known():  # unknown session or tip: NotFound, as before the ranking
        reader = BranchReader(store, side.session, head)
        return rank_for_reader(reader, rank_holding_first(found, ranked, reader), top_k)
