"""Searching a PostgreSQL home: the same arguments, filters and :class:`~.query.Hit` objects as
the SQLite search (:func:`.query.search`), over the ``search_docs`` table.

Ranking. FTS5's ``bm25()`` is Okapi BM25 (k1 1.2, b 0.75) with per-column weights; PostgreSQL's
own ``ts_rank_cd`` has no inverse document frequency (a common word counts as much as a rare
one): its top 5 held 82% of SQLite's and was identical for a quarter of the queries on English
memory (``benchmarks/bench_pg_search.py``). The default ranking (``bm25``) therefore computes
the same formula in SQL (100% / 100% there): the
GIN index finds the candidates, each query term's document frequency is one GIN count, the
corpus size and average length come from the per-file totals, and a candidate's term
frequencies are read from its ``tsvector`` (weight A counts 1, B and C 0.5, as the SQLite
column weights). ``ts_rank_cd`` is kept as an option for comparison.
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidInput
from ..provenance import BranchReader
from .pg_index import PgSearchIndex, words
from .query import (BM25_WEIGHTS, Filters, Hit, _hit, check_arguments, query_terms,
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
# the OR of every term, as a scalar subquery: an InitPlan, so the GIN index finds candidates
_MATCH = "d.tsv @@ (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery FROM q)"

_BM25 = _TERMS + """, stats AS MATERIALIZED (
    SELECT greatest(sum(docs), 1)::float8 AS n,
           greatest(sum(tokens)::float8 / greatest(sum(docs), 1), 1e-9) AS avgdl
    FROM search_files
), idf AS MATERIALIZED (
    SELECT q.ord, q.lexeme,
           greatest(ln((s.n - h.hits + 0.5) / (h.hits + 0.5)), 1e-6) AS idf
    FROM q CROSS JOIN stats s
    CROSS JOIN LATERAL (SELECT count(*)::float8 AS hits FROM search_docs x
                        WHERE x.tsv @@ q.tq) h
)
SELECT {columns}, r.score AS score
FROM stats s CROSS JOIN search_docs d
CROSS JOIN LATERAL (
    SELECT coalesce(sum(i.idf * f.tf * ({k1} + 1)
                        / (f.tf + {k1} * (1 - {b} + {b} * d.len / s.avgdl))), 0) AS score
    FROM unnest(d.tsv) u JOIN idf i ON i.lexeme = u.lexeme
    CROSS JOIN LATERAL (
        SELECT sum(CASE w WHEN 'A' THEN {wa} WHEN 'B' THEN {wb} ELSE {wc} END) AS tf
        FROM unnest(u.weights) w) f
) r
WHERE {match} AND {where}
ORDER BY score DESC, d.path COLLATE "C", d.line, d.claim, d.id
LIMIT %(limit)s"""

_TS_RANK = _TERMS + """
SELECT {columns}, ts_rank_cd('{weights}', d.tsv,
       (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery FROM q), {norm}) AS score
FROM search_docs d
WHERE {match} AND {where}
ORDER BY score DESC, d.path COLLATE "C", d.line, d.claim, d.id
LIMIT %(limit)s"""


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
                ranking: str = DEFAULT_RANKING) -> list[tuple[dict[str, Any], float]]:
    """The ``limit`` best rows for ``query`` passing ``filters``, most relevant first, the
    index first brought up to date (one pooled connection for both)."""
    from psycopg.rows import dict_row

    if ranking not in RANKINGS:
        raise ValueError(f"unknown ranking {ranking!r} ({RANKINGS})")
    terms = [" ".join(words(t)) for t in query_terms(query)]
    terms = [t for t in terms if t]
    where, params = _where(filters)
    if ranking == "bm25":
        sql = _BM25.format(columns=_COLUMNS, k1=K1, b=B,
                           wa=BM25_WEIGHTS[0], wb=BM25_WEIGHTS[1], wc=BM25_WEIGHTS[2],
                           match=_MATCH, where=where)
    else:
        sql = _TS_RANK.format(columns=_COLUMNS, weights=_TS_WEIGHTS, norm=TS_NORMALIZATION,
                              match=_MATCH, where=where)
    params.update(config=index.config, terms=terms, limit=limit)
    kinds = ("topic", "source") if "source" in filters.kinds else ("topic",)
    with index.pg.connection() as conn:
        for _ in range(2):
            # one round trip, no transaction: the index state and the ranking together
            conn.autocommit = True
            try:
                with conn.pipeline():
                    state_cur = conn.execute("SELECT key, value FROM search_state")
                    cur = conn.cursor(row_factory=dict_row)
                    if terms:
                        cur.execute(sql, params)
                state = dict(state_cur.fetchall())
                rows = cur.fetchall() if terms else []
            finally:
                conn.autocommit = False
            if index.is_current(state, kinds):
                break
            index.ensure_current(kinds, conn)  # rare: catch up in one transaction, then again
            conn.commit()
    return [(row, float(row.pop("score"))) for row in rows]


def pg_search(index: PgSearchIndex, query: str, *, top_k: int = 5,
              path_prefix: str | None = None, since: str | None = None,
              until: str | None = None, speaker: str | None = None,
              include_sources: bool = False, method: str = "bm25",
              session: str | None = None, head: str | None = None, store: Any = None,
              reader: BranchReader | None = None, own_session: bool = False,
              ranking: str = DEFAULT_RANKING) -> list[Hit]:
    """:func:`.query.search` on a PostgreSQL home: the ``top_k`` best topic claims (and
    archived turns when ``include_sources``) with the same filters, supersession and
    branch-aware ranking. ``store`` is the home's session store (needed with ``session``).
    Only ``bm25`` is offered: the embedding cache lives in the SQLite index."""
    filters, _ = check_arguments(
        query, top_k=top_k, path_prefix=path_prefix, since=since, until=until,
        speaker=speaker, include_sources=include_sources, method=method)
    if method != "bm25":
        raise InvalidInput(f"search method {method!r} is not available on a PostgreSQL home "
                           "yet (use bm25)")
    if reader is None and session is not None:
        if store is None:
            raise InvalidInput("a branch-aware search needs the home's session store")
        reader = BranchReader(store, session, head)
    elif reader is None and head is not None:
        raise InvalidInput("--head needs --session (the conversation the tip belongs to)")
    filters, depth = search_plan(filters, top_k, reader, own_session)
    ranked = rank_holding_first(index, ranked_rows(index, query, filters, depth, ranking),
                                reader)
    if reader is None:
        return [_hit(row, score) for row, score in ranked[:top_k]]
    return rank_for_reader(reader, ranked, top_k)
