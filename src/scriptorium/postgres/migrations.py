"""The PostgreSQL home's schema, as versioned migrations, and the one function that applies
them.

The schema is kept per component (``home``, ``sessions``, ``memory``, ``work``): each is a
list of SQL steps, step *n* bringing the component to version *n*. Steps are only ever
appended (a released step is never edited), so a database created by any earlier version
upgrades by running the steps it lacks. ``schema_version`` records each component's version;
a database newer than this program is refused rather than half understood.

Every table lives in the home's own schema (the connection's ``search_path``), so SQL here
and in the stores names tables unqualified.
"""

from __future__ import annotations

from typing import Any

from ..errors import CorruptFile, ReasonCode

# One row per (stem, document) of search_docs, filled from its tsvector (a, b, c: how often
# the stem occurs with weight A, B, C); search_docs rows indexed before this step get theirs.
# No foreign key (a check per row would double a build): the index deletes a document's
# postings before the document.
SEARCH_TERMS = """
    CREATE TABLE search_terms (
        lexeme text COLLATE "C" NOT NULL,
        doc    bigint NOT NULL,
        kind   text NOT NULL,
        a      smallint NOT NULL,
        b      smallint NOT NULL,
        c      smallint NOT NULL,
        len    integer NOT NULL,
        CONSTRAINT search_terms_key PRIMARY KEY (lexeme, doc) INCLUDE (kind, a, b, c, len)
    );
    INSERT INTO search_terms (lexeme, doc, kind, a, b, c, len)
    SELECT u.lexeme, d.id, d.kind, cardinality(array_positions(u.weights, 'A')),
           cardinality(array_positions(u.weights, 'B')),
           cardinality(u.weights) - cardinality(array_positions(u.weights, 'A'))
           - cardinality(array_positions(u.weights, 'B')), d.len
    FROM search_docs d CROSS JOIN LATERAL unnest(d.tsv) u;
"""

# The index is derived from the memory files, so its tables write no WAL (a build of 9.8 MB of
# topics wrote 170 MB of it, and every write re-logged its postings); a crash empties them
# (PostgreSQL resets unlogged tables) and the next query builds the index again in bulk
# (pg_index.PgSearchIndex.ensure_current). search_docs first: a logged table may not
# reference an unlogged one. The embedding cache (search_vectors) stays logged: it is costly
# to recompute.
UNLOGGED_INDEX = """
    ALTER TABLE search_docs SET UNLOGGED;
    ALTER TABLE search_files SET UNLOGGED;
    ALTER TABLE search_terms SET UNLOGGED;
    ALTER TABLE search_state SET UNLOGGED;
"""

# The job queue, fed by a trigger on the head-move log in the same transaction as each move.
# work_queue (the trigger's, never locked by a worker) says when a session last moved;
# work_claims (the worker's: locked FOR UPDATE while it works, so a dead worker's claim ends
# with its connection; the trigger only inserts it, ON CONFLICT DO NOTHING, which never waits
# on that lock) says how far its jobs are done; work_left lists the tips the head left.
# Moves made before this step (an upgraded home) are queued once here.
WORK_QUEUE = """
    CREATE TABLE work_queue (
        session_id text PRIMARY KEY,
        last_seq   bigint NOT NULL,
        last_at    double precision NOT NULL
    );
    CREATE TABLE work_claims (
        session_id   text PRIMARY KEY,
        moves_seq    bigint NOT NULL DEFAULT 0,
        boundary_seq bigint NOT NULL DEFAULT 0,
        attempts     integer NOT NULL DEFAULT 0,
        retry_at     double precision,
        failure      jsonb,
        done_by      text,
        done_at      double precision
    );
    CREATE TABLE work_left (
        session_id text NOT NULL,
        tip        text NOT NULL,
        new_tip    text,
        seq        bigint NOT NULL,
        PRIMARY KEY (session_id, tip)
    );
    CREATE FUNCTION work_feed() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        INSERT INTO work_queue AS q (session_id, last_seq, last_at)
        VALUES (NEW.session_id, NEW.seq, extract(epoch FROM clock_timestamp()))
        ON CONFLICT (session_id) DO UPDATE
            SET last_seq = greatest(q.last_seq, EXCLUDED.last_seq), last_at = EXCLUDED.last_at;
        INSERT INTO work_claims (session_id) VALUES (NEW.session_id) ON CONFLICT DO NOTHING;
        IF NEW.old_head IS NOT NULL AND NEW.old_head IS DISTINCT FROM NEW.new_head THEN
            INSERT INTO work_left AS l (session_id, tip, new_tip, seq)
            VALUES (NEW.session_id, NEW.old_head, NEW.new_head, NEW.seq)
            ON CONFLICT (session_id, tip) DO UPDATE
                SET new_tip = EXCLUDED.new_tip, seq = EXCLUDED.seq;
        END IF;
        PERFORM pg_notify(TG_TABLE_SCHEMA || '_work', NEW.session_id);
        RETURN NULL;
    END $$;
    CREATE TRIGGER work_feed AFTER INSERT ON head_moves
        FOR EACH ROW EXECUTE FUNCTION work_feed();
    INSERT INTO work_queue (session_id, last_seq, last_at)
        SELECT session_id, max(seq), extract(epoch FROM clock_timestamp())
        FROM head_moves GROUP BY session_id;
    INSERT INTO work_claims (session_id) SELECT session_id FROM work_queue;
"""

# The creation order of the memory blocks installs create, one row per block ranked from a
# sequence, instead of a map inside the runtime-counters row that every install re-read,
# rewrote whole and locked (that row grew with memory and queued concurrent workers' installs
# on it). The counters row keeps what an explicit save wrote; ranks continue after its map.
BLOCK_ORDER = """
    CREATE SEQUENCE memory_block_rank MINVALUE 0 START 0;
    CREATE TABLE memory_block_order (
        block_id text PRIMARY KEY,
        rank     bigint NOT NULL
    );
    CREATE INDEX memory_block_order_rank ON memory_block_order (rank);
    DO $$
    BEGIN
        PERFORM setval('memory_block_rank', max(value::text::bigint) + 1, false)
        FROM memory_files, jsonb_each(convert_from(content, 'UTF8')::jsonb -> 'creation_order')
        WHERE path = '.scriptorium/runtime.json' AND jsonb_typeof(value) = 'number'
          AND value::text ~ '^[0-9]+$'
        HAVING count(*) > 0;
    EXCEPTION WHEN others THEN NULL;  -- unreadable counters read as defaults everywhere
    END $$;
"""

# component -> ordered steps; step i (0-based) brings the component to version i + 1
# What each topic file's blocks hold (ids, lines, links, the sources they cite), stored by
# the install that wrote that version (memory.pg_catalog), so other writers of the home take
# it instead of parsing the file. Keyed by the file's version: never used for other bytes.
TOPIC_SUMMARIES = """
    CREATE TABLE memory_topic_summaries (
        path    text PRIMARY KEY,
        version bigint NOT NULL,
        summary text NOT NULL
    )
"""

# the keys of each stored summary (block ids, cited sources, footnote targets, names, and
# "l" when it has block links: memory.pg_catalog.topic_keys), so a worker asks which topics
# its batch concerns instead of learning every topic another worker wrote. The question is
# a function that reads the GIN index only: the planner, estimating the overlap of a few
# dozen keys as a large share of the rows, would otherwise test every row's keys (a scan
# that grows with the number of topics, per question)
TOPIC_KEYS = """
    ALTER TABLE memory_topic_summaries ADD COLUMN keys text[];
    CREATE INDEX memory_topic_summaries_keys ON memory_topic_summaries USING gin (keys);
    CREATE OR REPLACE FUNCTION memory_topics_keyed(wanted text[]) RETURNS SETOF text
        LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = off AS $$
        WITH hit AS MATERIALIZED (
            SELECT path, version FROM memory_topic_summaries WHERE keys && wanted)
        SELECT hit.path FROM hit JOIN memory_files f
            ON f.path = hit.path AND f.version = hit.version
    $$;
"""

# whether the install that stored a summary wrote its file through the runtime's
# normalisation (what the directory catalog's `normal` records, catalog schema 6), so a
# worker that learns the topic from the database normalises only the units a write changes
# (memory.normalize_edit); a summary stored before this step says no (one whole pass)
TOPIC_NORMAL = """
    ALTER TABLE memory_topic_summaries ADD COLUMN normal boolean NOT NULL DEFAULT false
"""

MIGRATIONS: dict[str, list[str]] = {
    "home": [
        """
        CREATE TABLE home_info (
            key   text PRIMARY KEY,
            value text NOT NULL
        );
        INSERT INTO home_info (key, value) VALUES ('created_at', now()::text);
        """,
    ],
    # sessions, nodes, heads, the head-move log: see scriptorium.sessions.pg_store
    "sessions": [
        """
        CREATE TABLE sessions (
            id       text PRIMARY KEY,
            name_key text NOT NULL UNIQUE,      -- NFC + casefold: ids equal but for case clash
            meta     jsonb NOT NULL,            -- what meta.json holds in a directory home
            rev      bigint NOT NULL DEFAULT 0  -- bumped by every write; caches compare it
        );
        CREATE TABLE nodes (
            session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            id         text NOT NULL,
            seq        integer NOT NULL,
            rev        bigint NOT NULL,         -- the session rev that last wrote this row
            body       jsonb NOT NULL,          -- the node as a node file holds it
            PRIMARY KEY (session_id, id),
            UNIQUE (session_id, seq)
        );
        CREATE INDEX nodes_by_rev ON nodes (session_id, rev);
        CREATE TABLE head_moves (
            seq        bigserial PRIMARY KEY,
            session_id text NOT NULL,
            old_head   text,
            new_head   text,
            at         double precision NOT NULL
        );
        CREATE INDEX head_moves_by_session ON head_moves (session_id, seq);
        """,
    ],
    # workspace, evidence archive, topics and revisions, runtime state: see
    # scriptorium.memory.pg_workspace (a memory file is a row; the generation orders writes)
    "memory": [
        """
        CREATE TABLE memory_identity (
            one          boolean PRIMARY KEY DEFAULT true CHECK (one),
            workspace_id text NOT NULL CHECK (workspace_id ~ '^w-[0-9a-f]{8}$')
        );
        CREATE TABLE memory_state (
            one        boolean PRIMARY KEY DEFAULT true CHECK (one),
            generation bigint NOT NULL
        );
        INSERT INTO memory_state (one, generation) VALUES (true, 0);
        CREATE TABLE memory_files (
            path    text PRIMARY KEY,
            content bytea,
            version bigint NOT NULL
        );
        CREATE INDEX memory_files_version ON memory_files (version);
        CREATE TABLE memory_revisions (
            rev            bigint PRIMARY KEY,
            at             timestamptz NOT NULL DEFAULT now(),
            message        text NOT NULL,
            changed_files  text[] NOT NULL,
            created_blocks text[] NOT NULL,
            removed_blocks text[] NOT NULL
        );
        CREATE TABLE memory_file_history (
            rev     bigint NOT NULL REFERENCES memory_revisions (rev),
            path    text NOT NULL,
            content bytea,
            PRIMARY KEY (rev, path)
        );
        CREATE TABLE memory_runtime (
            name text PRIMARY KEY,
            body jsonb NOT NULL
        );
        """,
    ],
    # the full-text index of topic claims and archived turns: scriptorium.memory.search.pg_index
    "search": [
        """
        CREATE TEXT SEARCH DICTIONARY scriptorium_stem (TEMPLATE = snowball, Language = english);
        CREATE TEXT SEARCH CONFIGURATION scriptorium_stem (COPY = english);
        ALTER TEXT SEARCH CONFIGURATION scriptorium_stem ALTER MAPPING FOR asciiword, asciihword,
            hword_asciipart, word, hword, hword_part WITH scriptorium_stem;
        CREATE TABLE search_files (
            path        text PRIMARY KEY,
            kind        text NOT NULL CHECK (kind IN ('topic', 'source')),
            fingerprint text NOT NULL,
            unresolved  integer NOT NULL DEFAULT 0,
            docs        integer NOT NULL,
            tokens      bigint NOT NULL
        );
        CREATE TABLE search_docs (
            id         bigserial PRIMARY KEY,
            file       text NOT NULL REFERENCES search_files (path) ON DELETE CASCADE,
            kind       text NOT NULL CHECK (kind IN ('claim', 'source')),
            path       text NOT NULL,
            logical    text NOT NULL,
            line       integer NOT NULL,
            block_id   text,
            claim      integer NOT NULL,
            text       text NOT NULL,
            headings   text NOT NULL,
            dates      text NOT NULL,
            sources    text NOT NULL,
            source_id  text,
            version    text NOT NULL,
            speakers   text[] NOT NULL,
            speaker    text NOT NULL,
            trusted    boolean NOT NULL,
            superseded boolean NOT NULL,
            ranges     datemultirange NOT NULL,
            len        integer NOT NULL,
            tsv        tsvector NOT NULL
        );
        CREATE INDEX search_docs_tsv ON search_docs USING gin (tsv);
        CREATE INDEX search_docs_file ON search_docs (file);
        CREATE INDEX search_docs_source ON search_docs (source_id) WHERE source_id IS NOT NULL;
        CREATE TABLE search_state (
            key   text PRIMARY KEY,
            value text NOT NULL
        );
        """,
        # the postings of search_docs (one row per document and stem, with its count in
        # each weight class): BM25 reads only the query's stems, from the index alone
        SEARCH_TERMS,
        # embedding vectors of documents, keyed by model and text hash (embedding search)
        """
        CREATE TABLE search_vectors (
            model text NOT NULL,
            key   text NOT NULL,
            vec   bytea NOT NULL,
            PRIMARY KEY (model, key)
        );
        """,
        UNLOGGED_INDEX,
    ],
    # the writer job queue (`memory work`): see scriptorium.postgres.jobs
    "work": [WORK_QUEUE, BLOCK_ORDER, TOPIC_SUMMARIES, TOPIC_KEYS, TOPIC_NORMAL],
    # the importers' ledger (scriptorium.importers.ledger_pg): per source file on each host
    # what was read, and per imported session the graph state an incremental run needs
    "imports": [
        """
        CREATE TABLE import_files (
            kind       text NOT NULL,
            host       text NOT NULL,
            path       text NOT NULL,
            size       bigint NOT NULL,
            mtime_ns   bigint NOT NULL,
            inode      bigint NOT NULL,
            "offset"   bigint NOT NULL,
            lines      bigint NOT NULL,
            head       text NOT NULL,
            session_id text NOT NULL,
            parse      text NOT NULL,
            PRIMARY KEY (kind, host, path)
        );
        CREATE TABLE import_pos (
            session_id text NOT NULL,
            id         text NOT NULL,
            anchor     text,
            side       boolean NOT NULL,
            PRIMARY KEY (session_id, id)
        );
        CREATE TABLE import_preds (
            session_id text NOT NULL,
            id         text NOT NULL,
            pred       text NOT NULL,
            PRIMARY KEY (session_id, id)
        );
        CREATE TABLE import_kids (
            session_id text NOT NULL,
            id         text NOT NULL,
            PRIMARY KEY (session_id, id)
        );
        CREATE TABLE import_names (
            session_id text NOT NULL,
            space      text NOT NULL,
            key        text NOT NULL,
            value      text NOT NULL,
            PRIMARY KEY (session_id, space, key)
        );
        CREATE TABLE import_extra (
            session_id text PRIMARY KEY,
            data       text NOT NULL
        );
        """,
    ],
}


class SchemaTooNew(CorruptFile):
    """The database was upgraded by a newer scriptorium; this one must not write to it."""

    code = ReasonCode.SCHEMA_TOO_NEW


def migrate(conn: Any, schema: str) -> dict[str, int]:
    """Create ``schema`` if needed and bring every component up to date, in one transaction
    under an advisory lock (concurrent first opens wait for each other instead of racing).
    Returns each component's version. ``conn`` is a psycopg connection."""
    from psycopg import sql

    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("scriptorium:" + schema,))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                     " component text PRIMARY KEY, version integer NOT NULL)")
        have = dict(conn.execute("SELECT component, version FROM schema_version").fetchall())
        for component, version in have.items():
            if version > len(MIGRATIONS.get(component, [])):
                raise SchemaTooNew(
                    f"schema {schema}: component {component} is at version {version}, newer "
                    f"than this scriptorium knows ({len(MIGRATIONS.get(component, []))}); "
                    "upgrade scriptorium")
        versions: dict[str, int] = {}
        for component, steps in MIGRATIONS.items():
            current = have.get(component, 0)
            for step in steps[current:]:
                conn.execute(step)
            versions[component] = len(steps)
            if current != len(steps) or component not in have:
                conn.execute("INSERT INTO schema_version (component, version) VALUES (%s, %s)"
                             " ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
                             (component, len(steps)))
    return versions
