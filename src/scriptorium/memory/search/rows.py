"""How the SQLite index stores its documents: one small row each, what rows share stored once.

A document's row (``doc_rows``) holds what a hit shows and what filters test; its file's path
and its headings, which every claim of a file (of a section) repeats, are a number into
``files`` and into ``heading_sets``. Which documents a file has is a short list of id ranges
in its ``files`` row (:func:`id_ranges`), not an index on ``doc_rows(file)``: such an index
takes a write's new entries in the middle of its pages, and a full page split in two costs a
whole page (4 kB) for a one-claim write, until every page has been split once. The ``docs`` view joins them back, so readers see one
row per document with ``path``, ``headings``, ``file`` and ``logical`` as before. A write
that adds a claim then adds the claim's text, its terms and a few numbers, not its path and
headings again (the index grows with the text written, issue 12).

The FTS table is contentless: a document's indexed values are recomputed from its row to
delete it (:func:`row_fields`).
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from .documents import Document, logical_path

SPEAKER_SEP = "\x1f"
Values = tuple[Any, ...]  # one row of SQL values

# What readers see of a document: the ``docs`` view's columns after id, in order (``legacy``:
# the logical path when it is not the path itself, see documents.logical_path; ``file`` and
# ``logical`` follow these). Equal tuples mean equal stored documents.
ROW_COLUMNS = ("kind, path, legacy, line, block_id, claim, text, headings, dates, sources, "
               "source_id, version, speakers, speaker, trusted")
# What doc_rows stores of them after id (``file`` and ``head`` stand for path and headings).
_STORED = ("kind, file, line, block_id, claim, text, head, dates, sources, source_id, version, "
           "speakers, speaker, trusted")

FTS_INSERT = "INSERT INTO fts(rowid, body, context, dates, cjk) VALUES (?,?,?,?,?)"
KINDS = ("claim", "source")  # a document's kind, stored as its place here (0: no byte)


def list_json_sql(column: str) -> str:
    """SQL giving back the JSON list of strings ``column`` stores compactly (see
    :func:`compact_list`)."""
    return (f"CASE WHEN {column} = '' THEN '[]' WHEN substr({column}, 1, 1) = '[' THEN "
            f"{column} ELSE '[\"' || replace({column}, char(31), '\", \"') || '\"]' END")


TABLES = """
CREATE TABLE IF NOT EXISTS files(
    id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, legacy TEXT, kind TEXT NOT NULL,
    mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
    ino INTEGER NOT NULL, sha TEXT NOT NULL, checked_ns INTEGER NOT NULL,
    unresolved INTEGER NOT NULL DEFAULT 0, docs TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS files_unresolved ON files(path) WHERE unresolved;
CREATE TABLE IF NOT EXISTS heading_sets(id INTEGER PRIMARY KEY, json TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS doc_rows(
    id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, file INTEGER NOT NULL, line INTEGER NOT NULL,
    block_id TEXT, claim INTEGER NOT NULL, text TEXT NOT NULL, head INTEGER NOT NULL,
    dates TEXT NOT NULL, sources TEXT NOT NULL, source_id TEXT, version TEXT NOT NULL,
    speakers TEXT NOT NULL, speaker TEXT NOT NULL, trusted INTEGER NOT NULL, lo INTEGER,
    span INTEGER);
CREATE INDEX IF NOT EXISTS doc_rows_source ON doc_rows(source_id) WHERE source_id IS NOT NULL;
CREATE VIEW IF NOT EXISTS docs AS SELECT
    r.id AS id, CASE r.kind WHEN 0 THEN 'claim' ELSE 'source' END AS kind, f.path AS path,
    f.legacy AS legacy, r.line AS line, r.block_id AS block_id, r.claim AS claim,
    r.text AS text, h.json AS headings, """ + list_json_sql("r.dates") + """ AS dates,
    """ + list_json_sql("r.sources") + """ AS sources, r.source_id AS source_id,
    r.version AS version, CASE r.speakers WHEN '' THEN '' ELSE char(31) || r.speakers ||
    char(31) END AS speakers, r.speaker AS speaker, r.trusted AS trusted, f.path AS file,
    coalesce(f.legacy, f.path) AS logical, r.lo AS lo, r.span AS span
    FROM doc_rows r JOIN files f ON f.id = r.file JOIN heading_sets h ON h.id = r.head;
CREATE TABLE IF NOT EXISTS doc_dates(doc INTEGER NOT NULL, lo INTEGER NOT NULL,
    span INTEGER NOT NULL, PRIMARY KEY(doc, lo, span)) WITHOUT ROWID;
"""


def day_number(day: str) -> int:
    """``YYYY-MM-DD`` as the integer YYYYMMDD: ordered as the dates are, stored in 4 bytes
    instead of 10. A document's date range is stored as its first day and ``span``, the last
    day's number less the first's (0 for one day: SQLite stores a 0 in no bytes). A
    document's first range is two columns of its row (``lo``, ``span``: about 6 bytes); only
    the ranges after it are rows of ``doc_dates`` (a row costs 13), issue 12."""
    return int(day[:4]) * 10000 + int(day[5:7]) * 100 + int(day[8:10])


def id_ranges(ids: list[int]) -> str:
    """Sorted document ids as the runs of consecutive ids they make, each written as its
    distance from the end of the run before it (the first: its id) and ``+n`` for the n ids
    after its first: a file's documents, inserted together by a build, are one short run,
    and a write that adds a claim adds a few characters (``files.docs``)."""
    out: list[str] = []
    end = 0
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(f"{ids[i] - end}+{j - i}" if j > i else f"{ids[i] - end}")
        end = ids[j]
        i = j + 1
    return " ".join(out)


def ranges_of(text: str) -> list[tuple[int, int]]:
    """:func:`id_ranges` read back: (first id, last id) of each run."""
    out: list[tuple[int, int]] = []
    end = 0
    for run in text.split():
        gap, _, more = run.partition("+")
        first = end + int(gap)
        end = first + (int(more) if more else 0)
        out.append((first, end))
    return out


def file_ranges(conn: sqlite3.Connection, file: int) -> list[tuple[int, int]]:
    """(first id, last id) of each run of the documents of the file numbered ``file``."""
    found = conn.execute("SELECT docs FROM files WHERE id=?", (file,)).fetchone()
    return ranges_of(found[0]) if found else []


def replacer_rows(conn: sqlite3.Connection, mark: str,
                  doc_ids: list[int]) -> list[dict[str, Any]]:
    """The claims holding ``mark`` in the files of ``doc_ids``, ordered by path, line and
    claim (a file's documents found by the id ranges its row lists)."""
    marks = ",".join("?" * len(doc_ids))
    files = [r[0] for r in conn.execute(
        f"SELECT DISTINCT file FROM doc_rows WHERE id IN ({marks})", list(doc_ids))]
    names = ("id", "path", "line", "claim", "text", "sources")
    found = [dict(zip(names, r)) for file in files for first, last in file_ranges(conn, file)
             for r in conn.execute(
                 "SELECT d.id, d.path, d.line, d.claim, d.text, d.sources FROM docs d WHERE "
                 "d.id BETWEEN ? AND ? AND d.kind = 'claim' AND instr(d.text, ?) > 0",
                 (first, last, mark))]
    return sorted(found, key=lambda r: (r["path"], r["line"], r["claim"]))

_JSON_ESCAPES = re.compile(r'[\x00-\x1f"\\]')


def _json(values: list[str]) -> str:
    """``json.dumps(values, ensure_ascii=False)`` of a list of strings, without the encoder
    when no string needs an escape (headings, dates and source ids, for every document)."""
    if _JSON_ESCAPES.search("".join(values)):
        return json.dumps(values, ensure_ascii=False)
    return '["' + '", "'.join(values) + '"]' if values else "[]"


def compact_list(text: str) -> str:
    """A JSON list of strings (as :func:`_json` writes it) as ``doc_rows`` stores it: its
    strings joined by a unit separator, without brackets and quotes (4 bytes a list, for
    every document's dates and sources), or the JSON itself when a string needed an escape,
    the list is ``[""]`` or its text would start with ``[`` (the view tells them apart by
    that first character)."""
    if text == "[]":
        return ""
    inner = text[2:-2]
    if "\\" in text or not inner or inner.startswith("["):
        return text
    return inner.replace('", "', SPEAKER_SEP)


def compact(values: list[str]) -> str:
    """``compact_list(_json(values))`` without writing the JSON first (what a build stores
    for every document)."""
    if not values or not all(values) or values[0].startswith("[") or \
            _JSON_ESCAPES.search("".join(values)):
        return compact_list(_json(values))
    return SPEAKER_SEP.join(values)


def row(doc: Document) -> Values:
    """``doc`` as the ``docs`` view shows it (``ROW_COLUMNS`` order)."""
    speakers = SPEAKER_SEP + SPEAKER_SEP.join(doc.speakers) + SPEAKER_SEP \
        if doc.speakers else ""
    logical = logical_path(doc.path)
    return (doc.kind, doc.path, logical if logical != doc.path else None, doc.line,
            doc.block_id, doc.claim, doc.text, _json(doc.headings), _json(doc.dates),
            _json(doc.sources), doc.source_id, doc.version, speakers, doc.speaker,
            int(doc.trusted))


def row_fields(values: Values) -> tuple[str, str, str, str]:
    """The FTS values of a ``docs`` row (``ROW_COLUMNS`` order), as they were indexed."""
    return Document(kind=values[0], path=values[1], line=values[3], text=values[6],
                    headings=json.loads(values[7]), dates=json.loads(values[8]),
                    speaker=values[13]).fields()


class Rows:
    """The document rows of one write transaction: new documents are held and inserted
    together (``executemany`` per table for the whole transaction, not per file: a build is
    one bulk insert); changed and removed ones are written at once."""

    _DOCS = f"INSERT INTO doc_rows(id, {_STORED}, lo, span) VALUES ({','.join('?' * 17)})"
    _FTS = FTS_INSERT
    _DATES = "INSERT OR IGNORE INTO doc_dates VALUES (?,?,?)"
    FLUSH_AT = 20_000  # documents held before they are written (memory stays bounded)

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.next_id = conn.execute(
            "SELECT coalesce(max(id), 0) + 1 FROM doc_rows").fetchone()[0]
        self.first_id = self.next_id
        self.rows: list[Values] = []
        self.fts: list[Values] = []
        self.dates: list[Values] = []
        self._heads: dict[str, int] = {}

    def _head(self, headings: str) -> int:
        """The number of a headings list (JSON), stored the first time it is seen."""
        number = self._heads.get(headings)
        if number is None:
            found = self.conn.execute("SELECT id FROM heading_sets WHERE json=?",
                                      (headings,)).fetchone()
            number = int(found[0]) if found else int(self.conn.execute(
                "INSERT INTO heading_sets(json) VALUES (?)", (headings,)).lastrowid or 0)
            self._heads[headings] = number
        return number

    def _stored(self, file: int, values: Values) -> Values:
        """A ``docs`` row (``ROW_COLUMNS``) as doc_rows stores it (``_STORED``): the kind as
        a number, lists compact (:func:`compact_list`), the speakers without the separators
        around them (the view puts back all three; speaker keys are never empty). What
        :meth:`add` stores of a document, from the document itself."""
        return (KINDS.index(values[0]), file, *values[3:7], self._head(values[7]),
                compact_list(values[8]), compact_list(values[9]), *values[10:12],
                values[12][1:-1], *values[13:])

    def add(self, file: int, docs: list[Document],
            fields: list[Values] | None = None) -> list[int]:
        """Insert ``docs`` of the file numbered ``file`` (``fields``: their FTS values, when
        the caller has them already); returns their ids."""
        first = self.next_id
        for n, doc in enumerate(docs):
            doc_id = self.next_id
            self.next_id += 1
            days = [(day_number(lo), day_number(hi)) for lo, hi in doc.ranges]
            spans = sorted({(lo, hi - lo) for lo, hi in days}) if len(days) > 1 else \
                [(lo, hi - lo) for lo, hi in days]
            first_span = spans[0] if spans else (None, None)
            self.rows.append((doc_id, KINDS.index(doc.kind), file, doc.line, doc.block_id,
                              doc.claim, doc.text, self._head(_json(doc.headings)),
                              compact(doc.dates), compact(doc.sources), doc.source_id,
                              doc.version, SPEAKER_SEP.join(doc.speakers), doc.speaker,
                              int(doc.trusted), *first_span))
            self.fts.append((doc_id, *(fields[n] if fields else doc.fields())))
            self.dates.extend((doc_id, *span) for span in spans[1:])
        if len(self.rows) >= self.FLUSH_AT:
            self.flush()
        return list(range(first, self.next_id))

    def flush(self, hold: int = 0) -> list[Values]:
        """Write what is held; the FTS values of the last ``hold`` documents are returned
        instead of inserted (a build's tail segment, see segments.finish_writes)."""
        kept = self.fts[len(self.fts) - hold:] if hold > 0 else []
        self.conn.executemany(self._DOCS, self.rows)
        self.conn.executemany(self._FTS, self.fts[:len(self.fts) - len(kept)])
        self.conn.executemany(self._DATES, self.dates)
        self.rows, self.fts, self.dates = [], [], []
        return kept

    def old(self, file: int) -> dict[int, Values]:
        """id -> the ``docs`` row (``ROW_COLUMNS``) of each document of the file ``file``."""
        out: dict[int, Values] = {}
        for first, last in file_ranges(self.conn, file):
            out.update((r[0], tuple(r[1:])) for r in self.conn.execute(
                f"SELECT id, {ROW_COLUMNS} FROM docs WHERE id BETWEEN ? AND ?", (first, last)))
        return out

    @staticmethod
    def speakers_by_sources(old: dict[int, Values]) -> dict[tuple[str, ...], list[str]]:
        """Sources -> speaker keys of each trusted claim among ``old`` rows (see
        documents.Known)."""
        out: dict[tuple[str, ...], list[str]] = {}
        for values in old.values():
            if values[0] == "claim" and values[14]:
                keys = values[12].split(SPEAKER_SEP)[1:-1] if values[12] else []
                out.setdefault(tuple(json.loads(values[9])), keys)
        return out

    def set_ids(self, file: int, ids: list[int]) -> None:
        """Record that the file numbered ``file`` holds the documents ``ids`` (sorted)."""
        self.conn.execute("UPDATE files SET docs=? WHERE id=?", (id_ranges(ids), file))

    def delete(self, old: dict[int, Values]) -> None:
        """Remove documents from doc_rows, doc_dates and the contentless FTS table (which is
        told the indexed values again, recomputed from the row)."""
        for doc_id, values in old.items():
            self.conn.execute("INSERT INTO fts(fts, rowid, body, context, dates, cjk) "
                              "VALUES ('delete', ?, ?, ?, ?, ?)", (doc_id, *row_fields(values)))
            self.conn.execute("DELETE FROM doc_dates WHERE doc=?", (doc_id,))
            self.conn.execute("DELETE FROM doc_rows WHERE id=?", (doc_id,))

    def replace(self, file: int, docs: list[Document], *, known: bool,
                old: dict[int, Values] | None = None) -> None:
        """Make the documents of the file numbered ``file`` ``docs``, touching only those
        that changed: a document whose indexed text is unchanged keeps its FTS entry (a write
        that adds a paragraph to a long topic adds that paragraph's entries, not the whole
        file's again). ``old``: the file's rows (:meth:`old`), when the caller read them."""
        old = dict(old) if old is not None else self.old(file) if known else {}
        if not old:  # a new file (every file of a build): nothing to compare with
            self.set_ids(file, self.add(file, docs))
            return
        ids: list[int] = []
        # A row equal but for its line has the same indexed values (what a paragraph added
        # above it moves): matched first, without computing those values for every document.
        by_row: dict[Values, list[int]] = {}
        for doc_id, values in old.items():
            by_row.setdefault(values[:3] + values[4:], []).append(doc_id)
        rest: list[tuple[Document, Values]] = []
        for doc in docs:
            values = row(doc)
            same = by_row.get(values[:3] + values[4:])
            if not same:
                rest.append((doc, values))
                continue
            doc_id = same.pop(0)
            ids.append(doc_id)
            if old.pop(doc_id)[3] != values[3]:
                self.conn.execute("UPDATE doc_rows SET line=? WHERE id=?", (values[3], doc_id))
        by_fields: dict[Values, list[int]] = {}
        for doc_id, values in old.items() if rest else ():
            by_fields.setdefault(row_fields(values), []).append(doc_id)
        for doc, values in rest:
            fields = doc.fields()
            same = by_fields.get(fields)
            if not same:
                ids += self.add(file, [doc], [fields])
                continue
            doc_id = same.pop(0)
            ids.append(doc_id)
            if old.pop(doc_id) != values:
                self.conn.execute(f"UPDATE doc_rows SET ({_STORED}) = "
                                  f"({','.join('?' * 14)}) WHERE id=?",
                                  (*self._stored(file, values), doc_id))
        self.delete(old)
        self.set_ids(file, sorted(ids))
