"""The search index of a PostgreSQL home: topic claims and archived turns in ``search_docs``
with a weighted ``tsvector`` under a GIN index (migration component ``search``).

It holds the same documents as the SQLite index (:mod:`.documents`), tokenized the way FTS5's
``porter unicode61 remove_diacritics 2`` does: Python splits, case-folds and strips
diacritics, PostgreSQL only stems (``scriptorium_stem``: the English Snowball stemmer with no
stop words, as porter keeps every word). Weights: A = what is said and its CJK grams, B =
where it is filed (path words, headings, speaker), C = its dates; BM25's document length
(``len``) counts the same tokens FTS5 counts. Each document's postings (``search_terms``: stem,
document, occurrences per weight) are written and deleted with it, so BM25 never reads a
document that does not hold a query stem.

Kept current like the SQLite index: the install hook re-indexes the files a transaction
changed (inside the install's own database transaction when the home passes its connection),
and a query whose home moved on since the index last looked (install counter) compares
fingerprints first. Each file is re-indexed under a transaction-scoped advisory lock of its
own, reading its documents after taking it, so concurrent writers never leave a file indexed
twice or stale; files are locked in path order (no deadlock between updates).

Derived, so not logged: the index's tables are UNLOGGED (no write-ahead log for a build or a
write's re-indexing). A crash empties them; the next query finds the index empty and builds
it whole, in bulk, as for a home never searched or written: documents and files by COPY,
stemmed and posted by one statement in the server, the GIN index and the postings' key
built once afterwards by sorting (not maintained row by row).
"""

from __future__ import annotations

import json
import logging
import unicodedata
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterable, Iterator, Sequence

from ...heap import gc_paused
from ..topics import SUPERSEDED_MARK
from .documents import KINDS, WORD_RE, Document, kind_of, logical_path
from .pg_source import DocumentSource, wanted_paths

log = logging.getLogger(__name__)

CONFIGS = ("scriptorium_stem", "english", "simple")
DEFAULT_CONFIG = "scriptorium_stem"
BUILD_MEMORY = "256MB"  # a build sorts its postings and GIN entries in memory, not on disk
_ASK = object()  # is_current: no install counter given, ask the source

_DOC_COLUMNS = ("kind, path, logical, line, block_id, claim, text, headings, dates, sources, "
                "source_id, version, speakers, speaker, trusted")
_INSERT = (
    f"INSERT INTO search_docs (file, {_DOC_COLUMNS}, superseded, ranges, len, tsv) VALUES "
    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::datemultirange, "
    "%s, setweight(to_tsvector(%s::regconfig, %s), 'A') || "
    "setweight(to_tsvector(%s::regconfig, %s), 'B') || "
    "setweight(to_tsvector(%s::regconfig, %s), 'C') || "
    "setweight(to_tsvector(%s::regconfig, %s), 'A')) RETURNING id")

# The postings of some documents just inserted: per stem, how often it occurs with each
# weight (see migrations.SEARCH_TERMS); most stems occur once in a document, whose one weight
# is read instead of searching the weights twice per class (array_positions)...
_COUNT = ("CASE WHEN cardinality(u.weights) = 1 THEN (u.weights[1] = '{w}')::int "
          "ELSE cardinality(array_positions(u.weights, '{w}')) END")
_POSTINGS = (
    "INSERT INTO search_terms (lexeme, doc, kind, a, b, c, len) "
    f"SELECT u.lexeme, d.id, d.kind, {_COUNT.format(w='A')}, {_COUNT.format(w='B')}, "
    f"cardinality(u.weights) - {_COUNT.format(w='A')} - {_COUNT.format(w='B')}, d.len "
    "FROM unnest(%s::bigint[]) n JOIN search_docs d ON d.id = n "
    "CROSS JOIN LATERAL unnest(d.tsv) u")
# ...and of documents about to be deleted (found through their own stems: the key's prefix)
_UNPOST = ("DELETE FROM search_terms t USING search_docs d CROSS JOIN LATERAL unnest(d.tsv) u "
           "WHERE {docs} AND t.lexeme = u.lexeme AND t.doc = d.id")
_GIN = "CREATE INDEX search_docs_tsv ON search_docs USING gin (tsv)"  # as in migrations
# A build's documents, as COPY sends them: the columns of search_docs but the tsvector's
# four weighted texts (fa..fd, stemmed in the server) and the ranges as text; n: the order
_STAGE = (f"CREATE TEMP TABLE search_build ON COMMIT DROP AS SELECT 0::bigint AS n, file, "
          f"{_DOC_COLUMNS}, superseded, ''::text AS ranges, len, ''::text AS fa, "
          "''::text AS fb, ''::text AS fc, ''::text AS fd FROM search_docs WITH NO DATA")
# ...stored with their postings in one statement, the postings taken from the rows as they
# are inserted (no second read of search_docs); a text with no words skips the stemmer, and
# where a document is filed (fb) and its dates (fc), which the claims of a section or block
# repeat, are stemmed once per distinct text (the same expression, so the same tsvector)
_WEIGHTED = ("CASE WHEN {f} = '' THEN ''::tsvector ELSE "
             "setweight(to_tsvector(%(config)s::regconfig, {f}), '{w}') END")
_SHARED = ("{f} AS MATERIALIZED (SELECT {f}, " + _WEIGHTED + " AS v FROM "
           "(SELECT DISTINCT {f} FROM search_build) x)")
_FROM_STAGE = (
    "WITH " + _SHARED.format(f="fb", w="B") + ", " + _SHARED.format(f="fc", w="C") + ", "
    f"docs AS (INSERT INTO search_docs (file, {_DOC_COLUMNS}, superseded, ranges, len, "
    f"tsv) SELECT file, {_DOC_COLUMNS}, superseded, ranges::datemultirange, len, "
    + _WEIGHTED.format(f="s.fa", w="A") + " || fb.v || fc.v || "
    + _WEIGHTED.format(f="s.fd", w="A")
    + " FROM search_build s JOIN fb ON fb.fb = s.fb JOIN fc ON fc.fc = s.fc ORDER BY s.n "
    "RETURNING id, kind, len, tsv) "
    + _POSTINGS.replace("FROM unnest(%s::bigint[]) n JOIN search_docs d ON d.id = n",
                        "FROM docs d"))
# statistics for the planner, of the columns queries select and join on (not of the texts
# and tsvectors, whose statistics cost most of an ANALYZE and which no plan here needs)
_ANALYZE = ("ANALYZE search_docs (id, file, kind, path, logical, source_id, version), "
            "search_files, search_terms (lexeme, doc, kind)")
_TERMS_KEY = "CONSTRAINT search_terms_key PRIMARY KEY (lexeme, doc) INCLUDE (kind, a, b, c, len)"


@lru_cache(maxsize=8192)
def _fold_char(ch: str) -> str:
    """One non-ASCII character without its diacritics (é -> e), as FTS5's remove_diacritics
    does; CJK and Hangul are left whole (NFD would split a Hangul syllable into jamo)."""
    if "\u1100" <= ch:
        return ch
    return "".join(c for c in unicodedata.normalize("NFD", ch) if not unicodedata.combining(c))


def words(text: str) -> list[str]:
    """The tokens FTS5 would index for ``text``: letters/digits runs, case-folded, without
    diacritics."""
    folded = text.casefold()
    if not folded.isascii():
        folded = "".join(ch if ch.isascii() else _fold_char(ch) for ch in folded)
    return WORD_RE.findall(folded)


def _pg_day(day: str) -> str:
    """A day as PostgreSQL takes it: it has no year 0, which the Markdown may write."""
    return "-infinity" if day.startswith("0000") else day


def _ranges(doc: Document) -> str:
    return "{" + ",".join(f"[{_pg_day(lo)},{_pg_day(hi)}]" for lo, hi in doc.ranges) + "}"


_JSON = json.JSONEncoder(ensure_ascii=False).encode  # one encoder, not one per call


@lru_cache(maxsize=4096)
def _shared_json(items: tuple[str, ...]) -> str:
    """Headings and dates, which the claims of a section or block repeat: encoded once."""
    return _JSON(items)


def _key(doc: Document) -> tuple[Any, ...]:
    """A document as stored (``_DOC_COLUMNS``): equal keys need no re-indexing."""
    return (doc.kind, doc.path, logical_path(doc.path), doc.line, doc.block_id, doc.claim,
            doc.text, _shared_json(tuple(doc.headings)), _shared_json(tuple(doc.dates)),
            _JSON(doc.sources), doc.source_id, doc.version,
            tuple(doc.speakers), doc.speaker, bool(doc.trusted))


def _params(file: str, doc: Document, config: str) -> tuple[tuple[Any, ...], int]:
    """The INSERT parameters of ``doc`` and its length in tokens."""
    body, context, dates, cjk = doc.fields()
    fields = [words(body), words(context), words(dates), cjk.split()]
    superseded = doc.kind == "claim" and SUPERSEDED_MARK in doc.text
    length = sum(map(len, fields))
    key = list(_key(doc))
    key[12] = list(key[12])  # speakers: a text[] (psycopg adapts lists, not tuples)
    out: list[Any] = [file, *key, superseded, _ranges(doc), length]
    for tokens in fields:
        out += [config, " ".join(tokens)]
    return tuple(out), length


class PgSearchIndex:
    """The full-text index of one PostgreSQL home (``pg``: a
    :class:`~scriptorium.postgres.connect.PgHome`), fed by a :class:`DocumentSource`.

    ``config`` is the text search configuration the documents are stemmed with; an index
    built with another one is rebuilt on the next query (see the module docstring)."""

    def __init__(self, pg: Any, source: DocumentSource, *,
                 config: str = DEFAULT_CONFIG) -> None:
        if config not in CONFIGS:
            raise ValueError(f"unknown text search configuration {config!r} ({CONFIGS})")
        self.pg = pg
        self.source = source
        self.config = config
        self.walks = 0  # fingerprint comparisons of every file so far (tests count them)

    @contextmanager
    def _conn(self, conn: Any | None) -> Iterator[Any]:
        if conn is not None:  # the caller's transaction (an install): its commit is ours
            yield conn
            return
        with self.pg.connection() as own:
            yield own

    def replacer_rows(self, mark: str, doc_ids: Sequence[int]) -> list[dict[str, Any]]:
        """The claims holding ``mark`` in the topics of ``doc_ids``, in file order: what
        :mod:`.supersession` asks of either index to find which claims a later one replaces."""
        from psycopg.rows import dict_row

        with self._conn(None) as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute("SELECT d.id, d.path, d.line, d.claim, d.text, d.sources "
                        "FROM search_docs d WHERE d.kind = 'claim' AND strpos(d.text, %s) > 0 "
                        "AND d.path IN (SELECT path FROM search_docs WHERE id = ANY(%s)) "
                        "ORDER BY d.path COLLATE \"C\", d.line, d.claim",
                        (mark, list(doc_ids)))
            return list(cur.fetchall())

    # -- state --------------------------------------------------------------------------

    def state(self, conn: Any | None = None) -> dict[str, str]:
        with self._conn(conn) as c:
            return dict(c.execute("SELECT key, value FROM search_state").fetchall())

    @staticmethod
    def _set(conn: Any, **values: str) -> None:
        for key, value in values.items():
            conn.execute("INSERT INTO search_state (key, value) VALUES (%s, %s) ON CONFLICT "
                         "(key) DO UPDATE SET value = EXCLUDED.value", (key, value))

    def kinds(self, state: dict[str, str]) -> set[str]:
        """The kinds this index holds (sources only once a query asked for them)."""
        return set(json.loads(state.get("kinds", "[]")))

    def count(self, kind: str | None = None) -> int:
        with self.pg.connection() as conn:
            if kind is None:
                return int(conn.execute("SELECT count(*) FROM search_docs").fetchone()[0])
            return int(conn.execute("SELECT count(*) FROM search_docs WHERE kind = %s",
                                    (kind,)).fetchone()[0])

    # -- writing ------------------------------------------------------------------------

    def _reindex(self, conn: Any, rels: Iterable[str], *, force: bool,
                 source: DocumentSource) -> int:
        """Re-index ``rels`` (each under its own advisory lock, its documents read after
        taking it); unchanged documents keep their rows. Returns files re-indexed."""
        done = 0
        fresh: list[int] = []  # documents inserted, whose postings are written at the end
        resolver = source.resolver()  # each cited archive file parsed once for all files
        for rel in sorted(set(rels)):
            # keyed by the home's schema too: homes sharing a database never wait on each other
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended("
                         "'scriptorium-search:' || current_schema() || ':' || %s, 0))", (rel,))
            found = source.documents(rel, resolver)
            row = conn.execute("SELECT fingerprint, unresolved FROM search_files WHERE "
                               "path = %s", (rel,)).fetchone()
            if found is None:
                if row is not None:
                    conn.execute(_UNPOST.format(docs="d.file = %s"), (rel,))
                    conn.execute("DELETE FROM search_files WHERE path = %s", (rel,))
                    done += 1
                continue
            docs, unresolved, fingerprint = found
            if row is not None and not force and row[0] == fingerprint and not row[1]:
                continue
            fresh += self._replace(conn, rel, docs, unresolved, fingerprint)
            done += 1
        if fresh:  # one statement: a build inserts the postings of every document at once
            conn.execute(_POSTINGS, (fresh,))
        return done

    def _replace(self, conn: Any, rel: str, docs: list[Document], unresolved: int,
                 fingerprint: str) -> list[int]:
        """Store ``rel``'s documents, keeping the rows of unchanged ones; returns the ids of
        the rows inserted (their postings are the caller's to write)."""
        rows = [_params(rel, doc, self.config) for doc in docs]
        conn.execute(
            "INSERT INTO search_files (path, kind, fingerprint, unresolved, docs, tokens) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (path) DO UPDATE SET "
            "fingerprint = EXCLUDED.fingerprint, unresolved = EXCLUDED.unresolved, "
            "docs = EXCLUDED.docs, tokens = EXCLUDED.tokens",
            (rel, kind_of(rel), fingerprint, unresolved, len(rows),
             sum(length for _, length in rows)))
        keep: dict[tuple[Any, ...], list[int]] = {}
        for doc_id, *stored in conn.execute(
                f"SELECT id, {_DOC_COLUMNS} FROM search_docs WHERE file = %s", (rel,)):
            stored[12] = tuple(stored[12])
            keep.setdefault(tuple(stored), []).append(doc_id)
        fresh = []
        for doc, (params, _) in zip(docs, rows):
            same = keep.get(_key(doc))
            if same:
                same.pop()
            else:
                fresh.append(params)
        stale = [i for ids in keep.values() for i in ids]
        if stale:
            conn.execute(_UNPOST.format(docs="d.id = ANY(%s)"), (stale,))
            conn.execute("DELETE FROM search_docs WHERE id = ANY(%s)", (stale,))
        ids: list[int] = []
        if fresh:
            with conn.cursor() as cur:
                cur.executemany(_INSERT, fresh, returning=True)
                while True:
                    ids += [doc_id for (doc_id,) in cur.fetchall()]
                    if not cur.nextset():
                        break
        return ids

    def update(self, paths: Iterable[str], *, conn: Any | None = None,
               source: DocumentSource | None = None) -> int:
        """The install hook's work: re-index ``paths`` (workspace-relative, as a transaction
        reports its changed files; others are ignored) and, when evidence was archived
        since, the topics whose citations did not all resolve. With ``conn`` it runs in the
        caller's transaction (the install's), so the index commits with the topics; ``source``
        then reads through that same transaction (default: the index's own source)."""
        source = source if source is not None else self.source
        with self._conn(conn) as c:
            state = self.state(c)
            kinds = self.kinds(state) | {"topic"}
            todo = set(wanted_paths(paths, kinds))
            signature = source.archive_signature()
            if signature != state.get("archive"):
                todo |= {r for (r,) in c.execute(
                    "SELECT path FROM search_files WHERE unresolved > 0")}
            done = self._reindex(c, todo, force=True, source=source)
            values = {"archive": signature}
            generation = source.generation()
            # the one install since we looked (the first one: after "None", no install yet)
            before = state.get("generation")
            if generation is not None and (before == str(generation - 1)
                                           or (generation == 1 and before == "None")):
                values["generation"] = str(generation)
            self._set(c, **values)
            return done

    def refresh(self, kinds: Iterable[str] = ("topic",), *, conn: Any | None = None) -> int:
        """Bring ``kinds`` in line with the home: re-index every file whose fingerprint
        changed, forget vanished ones. Returns files re-indexed."""
        kinds = tuple(k for k in KINDS if k in set(kinds))
        with self._conn(conn) as c:
            generation = self.source.generation()
            have = dict(c.execute("SELECT path, fingerprint FROM search_files WHERE kind = "
                                  "ANY(%s)", (list(kinds),)).fetchall())
            disk: dict[str, str] = {}
            for kind in kinds:
                disk.update(self.source.fingerprints(kind))
            self.walks += 1
            todo = [rel for rel, fp in disk.items() if have.get(rel) != fp]
            todo += [rel for rel in have if rel not in disk]
            done = self._reindex(c, todo, force=False, source=self.source)
            state = self.state(c)
            self._set(c, kinds=json.dumps(sorted(self.kinds(state) | set(kinds))),
                      config=self.config, archive=self.source.archive_signature(),
                      generation=str(generation))
            return done

    def rebuild(self, include_sources: bool | None = None, *, conn: Any | None = None) -> int:
        """Drop the index and build it again from the home, in one transaction (``conn``'s
        when given); returns the documents indexed. ``include_sources`` None: sources only
        if they were indexed before."""
        with self._conn(conn) as c:
            # locked in the order an update takes them (state first), so a build never
            # deadlocks with an install indexing its files
            c.execute("LOCK TABLE search_state, search_files, search_docs, search_terms")
            if include_sources is None:
                include_sources = "source" in self.kinds(self.state(c))
            c.execute("TRUNCATE search_terms, search_docs, search_files, search_state")
            c.execute("SELECT set_config('maintenance_work_mem', %s, true)", (BUILD_MEMORY,))
            # a million postings (and the documents' GIN entries) are stored faster without
            # their index, which is then built once by sorting them (the tables are locked
            # by the TRUNCATE until the commit)
            c.execute("ALTER TABLE search_terms DROP CONSTRAINT search_terms_key")
            c.execute("DROP INDEX search_docs_tsv")
            self._load(c, ("topic", "source") if include_sources else ("topic",))
            c.execute(_GIN)
            c.execute(f"ALTER TABLE search_terms ADD {_TERMS_KEY}")
            c.execute(_ANALYZE)
            count = int(c.execute("SELECT count(*) FROM search_docs").fetchone()[0])
        if conn is None:  # committed: mark the pages all-visible, so BM25 reads only the index
            with self.pg.dedicated() as own:
                own.execute("VACUUM search_terms")
        return count

    def _load(self, conn: Any, kinds: Sequence[str]) -> None:
        """Fill the emptied index with every file of ``kinds``: files and documents sent by
        COPY (documents into a staging table, numbered in the order an update inserts them,
        so ids and ties rank alike), then one statement stems every document and one writes
        every posting, in the server."""
        generation = self.source.generation()
        self.walks += 1
        conn.execute(_STAGE)
        with conn.cursor().copy(f"COPY search_build (n, file, {_DOC_COLUMNS}, superseded, "
                                "ranges, len, fa, fb, fc, fd) FROM STDIN") as docs:
            files, n = [], 0
            rels = {rel for kind in kinds for rel in self.source.fingerprints(kind)}
            resolver = self.source.resolver()
            with gc_paused(bulk=True):  # many objects, no cycles (heap.gc_paused)
                for rel in sorted(rels):  # the order an update re-indexes files in
                    found = self.source.documents(rel, resolver)
                    if found is None:
                        continue
                    found_docs, unresolved, fingerprint = found
                    tokens = 0
                    for doc in found_docs:
                        params, length = _params(rel, doc, self.config)
                        docs.write_row((n, *params[:19], *params[20::2]))
                        n, tokens = n + 1, tokens + length
                    files.append((rel, kind_of(rel), fingerprint, unresolved,
                                  len(found_docs), tokens))
        with conn.cursor().copy("COPY search_files (path, kind, fingerprint, unresolved, "
                                "docs, tokens) FROM STDIN") as out:
            for row in files:
                out.write_row(row)
        conn.execute(_FROM_STAGE, {"config": self.config})
        self._set(conn, kinds=json.dumps(sorted(kinds)), config=self.config,
                  archive=self.source.archive_signature(), generation=str(generation))

    def is_current(self, state: dict[str, str], kinds: Iterable[str],
                   generation: Any = _ASK) -> bool:
        """Can a query trust the index, given its ``state`` (as read with the query)? Not
        when built with another configuration, when a kind was never indexed, or when the
        home installed something the hook did not record (or cannot tell). ``generation``:
        the home's install counter when read with the state (else the source is asked)."""
        if generation is _ASK:
            generation = self.source.generation()
        return state.get("config", self.config) == self.config \
            and set(kinds) <= self.kinds(state) \
            and state.get("generation") == str(generation)

    def ensure_current(self, kinds: Iterable[str], conn: Any | None = None) -> None:
        """Bring the index up to date for a query of ``kinds`` (see :meth:`is_current`):
        build it when it holds nothing (in bulk) or was built with another configuration,
        else compare fingerprints (what the install hook indexed is kept)."""
        kinds = set(kinds)
        with self._conn(conn) as c:
            # one catching up at a time per home: the next reads the state the first left
            # (two that read it and then both asked for the build's lock would deadlock)
            c.execute("SELECT pg_advisory_xact_lock(hashtextextended("
                      "'scriptorium-search-build:' || current_schema(), 0))")
            state = self.state(c)
            if self.is_current(state, kinds):
                return
            empty = not self.kinds(state) and c.execute(
                "SELECT NOT EXISTS (SELECT FROM search_files)").fetchone()[0]
            if empty:  # a new home, or one a crash emptied: build it in bulk
                self.rebuild("source" in kinds, conn=c)
                return
            if state.get("config", self.config) != self.config:
                log.warning("search index built with %s, wanted %s: rebuilding",
                            state.get("config"), self.config)
                self.rebuild("source" in kinds or "source" in self.kinds(state), conn=c)
                return
            self.refresh(kinds | self.kinds(state), conn=c)

    # -- the install hook ------------------------------------------------------------------

    def install_hook(self, workspace: Any, result: Any) -> None:
        """For ``workspace.add_install_hook``: index what ``result`` changed. A failure
        never undoes the install (the index is derived): it is logged, and the next query
        sees the install counter ahead of the index and compares fingerprints."""
        try:
            self.update(getattr(result, "changed_files", ()) or ())
        except Exception as exc:  # noqa: BLE001 - a derived view must not break a write
            log.warning("PostgreSQL search index update failed (%s: %s); the next query "
                        "re-reads what changed", type(exc).__name__, exc)

    def transaction_hook(self, workspace: Any, writes: Iterable[str], conn: Any) -> None:
        """For a PostgreSQL workspace's ``add_transaction_hook``: index the files a write
        stores, reading them through its transaction, so the index commits (or rolls back)
        with them. Raising here stops the write (retryable), never leaves the two apart."""
        from .pg_source import PgFilesSource

        self.update(writes, conn=conn, source=PgFilesSource(workspace, conn))

    def attach(self, workspace: Any) -> None:
        """Keep this index current inside every install of ``workspace`` (once)."""
        workspace.add_install_hook(self.install_hook)
