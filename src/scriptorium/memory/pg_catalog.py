"""The topic catalog of a PostgreSQL workspace's mirror: summaries shared through the
database, so a worker does not parse (nor resolve the citations of) the topics other
workers installed.

The directory catalog (:mod:`.catalog`) learns a file by parsing it and resolving each
footnote through the archive, and finds what changed by one ``lstat`` per topic file. On a
database home neither is needed per job:

* what changed in the mirror is known exactly: the workspace's refresh wrote it
  (:meth:`~.pg_workspace.PgWorkspace.mirror_changes`), and nobody edits a private mirror by
  hand, so no walk of ``topics/`` (no per-job cost that grows with the number of topics);
* each install stores the summaries of the topic files it wrote (``memory_topic_summaries``,
  keyed by the file's version: a summary is only ever used for the exact bytes it
  describes) in its own database transaction, and the mirror's refresh fetches them with
  the files, so another worker takes a summary instead of parsing; a file whose summary is
  missing (written by a home copy, by hand, or by an older program) is parsed as before;
* a worker's write step does not even fetch the topics other workers wrote, nor their
  summaries (see :mod:`.pg_mirror`): its catalog holds the topics its mirror holds, and asks
  the database which others concern its batch, by the keys stored with each summary
  (:func:`topic_keys`): the topic the writer's subject names, those citing the batch's
  turns, those holding the block ids the install creates or links. Those are fetched, and
  a transaction whose stage lacked one is written again (retryable): one indexed query
  per question, whatever the number of topics or workers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol

from ..errors import ReasonCode
from .catalog import BlockSummary, Resolve, TopicCatalog, TopicSummary, name_keys, summarize, \
    title_of
from .fingerprints import sha256
from .topics import TopicDoc, parse_topic_bytes

if TYPE_CHECKING:  # pragma: no cover
    from .sources import SourceArchive


class MirrorPlace(Protocol):
    """What the catalog needs of its workspace (``pg_workspace.PgWorkspace``, which imports
    this module, so it is named by what it provides)."""

    root: Path
    sources: "SourceArchive"
    pg: Any
    conflicts: int  # installs (here: writer runs) redone because memory moved under them

    def mirror_changes(self) -> dict[str, TopicSummary | None]: ...

    def version_of(self, rel: str) -> int | None: ...

    def in_write_step(self) -> bool: ...

    def install_summaries(self, rows: dict[str, "StoredSummary"]) -> None: ...

    def stored_summaries(self) -> set[str]: ...

    def topic_bytes(self, rel: str) -> bytes | None: ...

    def fetch_topics(self, paths: Iterable[str]) -> list[str]: ...

    def topics_keyed(self, keys: Iterable[str]) -> list[str]: ...

    def fetch_all(self) -> None: ...


# A summary as an install stores it beside its file: (summary, keys, normal), see
# :func:`stored_form`.
StoredSummary = tuple[str, list[str], bool]

# Store a (path, version, summary, keys, normal) row; a newer version's summary is never
# replaced by an older one (installs of one path may commit out of order with their
# summaries' writes).
STORE_SUMMARY_SQL = ("INSERT INTO memory_topic_summaries (path, version, summary, keys, "
                     "normal) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (path) DO UPDATE SET "
                     "version = EXCLUDED.version, summary = EXCLUDED.summary, "
                     "keys = EXCLUDED.keys, normal = EXCLUDED.normal WHERE "
                     "memory_topic_summaries.version < EXCLUDED.version")


def id_keys(block: Any) -> set[str]:
    """``i:`` each id of ``block`` (a parsed block or a stored one) and each block id its
    block links name: the keys of the topics an install of ``block`` must be checked
    against."""
    return {f"i:{i}" for i in block.ids} | {f"i:{bid}" for _, bid in block.links}


def topic_keys(summary: TopicSummary) -> list[str]:
    """What a catalog may be asked about a topic, as stored beside its summary: ``i:`` each
    block id and alias, and each block id its block links name; ``r:`` each cited source;
    ``t:`` each footnote target; ``n:`` its names (:func:`~.catalog.name_keys`); ``l``
    when it has block links (an install that moves a paragraph rewrites the links to it)."""
    keys = {f"n:{key}" for key in name_keys(summary)}
    for b in summary.blocks:
        keys |= id_keys(b)
        keys.update(f"r:{ref}" for ref in b.refs)
        keys.update(f"t:{target}" for target in b.targets)
        if b.links:
            keys.add("l")
    return sorted(keys)


def stored_form(summary: TopicSummary) -> StoredSummary:
    """(summary as stored, its keys, whether normalisation wrote the file: the directory
    catalog's ``normal``): the row an install writes beside its file."""
    return summary_json(summary), topic_keys(summary), summary.normal


def summary_json(summary: TopicSummary) -> str:
    """A summary as stored (no fingerprint: it names a version, not a local file)."""
    return json.dumps([summary.sha, [[b.id, b.ids, b.line, b.links, b.targets, b.refs,
                                      b.unresolved] for b in summary.blocks], summary.title],
                      ensure_ascii=False, separators=(",", ":"))


def summary_of(path: str, stored: Any, normal: bool = False) -> TopicSummary | None:
    """A stored summary back, ``normal`` as stored beside it (None when it cannot be read:
    the file is parsed instead)."""
    try:
        sha, blocks, title = json.loads(stored) if isinstance(stored, (str, bytes)) else stored
        return TopicSummary(path, str(sha), (0, 0, 0, 0), 0, tuple(
            BlockSummary(i, tuple(ids), int(line), tuple(tuple(x) for x in links),
                         tuple(targets), tuple(refs), bool(unresolved))
            for i, ids, line, links, targets, refs, unresolved in blocks), str(title),
            bool(normal))
    except (ValueError, TypeError):
        return None


class PgTopicCatalog(TopicCatalog):
    """A catalog fed by its workspace's mirror refreshes (see the module docstring)."""

    def __init__(self, workspace: MirrorPlace) -> None:
        super().__init__(workspace.root, workspace.sources, None)  # nothing saved: a cache
        self.workspace = workspace
        self.shared = 0  # summaries taken from the database instead of parsing (tests count)
        self._announced: dict[str, TopicSummary] = {}  # by the install under way (installing)

    def refresh(self, hold: int | None = None) -> "PgTopicCatalog":
        """Learn the topic files the mirror changed since the last refresh: the stored
        summary of that exact version when there is one, else a parse of the file, all in
        one write of the catalog. Outside a write step (upkeep, readers) the topics the
        mirror left in the database are fetched first, and the mirror is walked as a
        directory catalog walks ``topics/``, so a file written into it by hand is seen; a
        write step never walks (its cost follows the batch, not the number of topics)."""
        with self._lock:
            if hold is not None and hold == self._fresh_hold:
                return self
            step = self.workspace.in_write_step()
            if not step:
                self.workspace.fetch_all()
            learnt: list[TopicSummary | str] = []
            shared: list[TopicSummary] = []
            for rel, summary in self.workspace.mirror_changes().items():
                if summary is None:
                    learnt.append(self._parsed(rel))
                else:
                    shared.append(summary)
            self._write(learnt, [], 0)
            self._take(shared)
            if not step:
                super().refresh(hold)
                return self
            self._resolve_again()
            self._fresh_hold = hold
            return self

    # -- the topics a worker's mirror left in the database (see the module docstring) ------

    def _bring(self, keys: Iterable[str], *, redo: bool) -> None:
        """Fetch the topics this mirror does not hold whose stored keys meet ``keys``, and
        learn them, so the local answer that follows is the whole tree's. ``redo``: asked
        inside a transaction, whose stage lacks them: stop it (retryable StaleTransaction)
        so its retry runs on a stage that holds them."""
        found = self.workspace.topics_keyed(keys)
        if not found:
            return
        fetched = self.workspace.fetch_topics(found)
        self.refresh()
        if redo:
            from .transaction import StaleTransaction

            self.workspace.conflicts += 1
            raise StaleTransaction(f"{(fetched or found)[0]} (written by another worker) "
                                   "concerns this write and was not in this mirror; fetched "
                                   "it: write again on a fresh stage",
                                   code=ReasonCode.CONCURRENT_UPDATE)

    def named(self, stem: str, title: str) -> list[str]:
        """As the directory catalog's, the topics this mirror left in the database
        included: one found is fetched and the writer asking is stopped (see
        :meth:`_bring`; it would otherwise start the topic afresh on a stage without it)."""
        keys = [f"stem:{stem}"] + ([f"title:{title}"] if title else [])
        self._bring([f"n:{key}" for key in keys], redo=True)
        return super().named(stem, title)

    def cited(self, refs: Iterable[str] | None = None) -> set[str]:
        """As the directory catalog's, over the whole tree: the topics this mirror left in
        the database that cite one of ``refs`` are fetched first (a batch another worker
        wrote but did not live to mark is cited there: it must not be written twice)."""
        if refs is None:
            self.workspace.fetch_all()
            self.refresh()
            return super().cited(None)
        refs = list(refs)
        self._bring([f"r:{ref}" for ref in refs], redo=False)
        return super().cited(refs)

    def paths_citing(self, target: str) -> list[str]:
        """As the directory catalog's, the topics left in the database included."""
        self._bring([f"t:{target}"], redo=True)
        return super().paths_citing(target)

    def before_validate(self, docs: Mapping[str, TopicDoc]) -> None:
        """A transaction parsed the files it installs and is about to check them against
        the tree: fetch (and redo it with) any topic left in the database that holds one
        of their block ids or the ids they link to, or that has block links of its own,
        so every later question of the check (ids, duplicates, links, refs) is answered
        from topics this mirror holds. One query, whatever the tree's size."""
        keys = {"l"}
        for rel, doc in docs.items():
            for block in doc.blocks:
                keys |= id_keys(block)
            summary = self.summary(rel)
            for old in summary.blocks if summary is not None else ():
                keys.update(f"i:{i}" for i in old.ids)
        self._bring(keys, redo=True)

    def _take(self, shared: list[TopicSummary]) -> None:
        """Record summaries other writers stored, in one write. Their footnotes are kept
        without the key of the archive file each was resolved in (that file is in the
        database, seldom in this mirror): :meth:`resolutions` does not vouch for them, so
        an install that touches such a topic resolves its footnotes again."""
        if not shared:
            return
        db = self.db
        with db.transaction():
            for summary in shared:
                db.put(summary, name_keys(summary))
        self.shared += len(shared)

    def _parsed(self, rel: str) -> "TopicSummary | str":
        """The summary of the mirror's ``rel``, parsed (its path alone: gone)."""
        data = self.workspace.topic_bytes(rel)
        if data is None:
            return rel
        self.parses += 1
        return summarize(parse_topic_bytes(data, rel, strict=False), self.sources,
                         sha=sha256(data), title=title_of(data))

    def installing(self, docs: dict[str, TopicDoc | None], data: dict[str, bytes | None],
                   shas: Mapping[str, str], resolve: Resolve | None = None) -> None:
        """An install is about to publish ``docs``: hand their summaries to the workspace,
        which stores them in the install's own database transaction, so no other worker
        ever sees those files without their summaries (and parses them). Each says the
        transaction's normalisation wrote the file, as :meth:`installed` records it."""
        announced = {}
        for rel, doc in docs.items():
            body = data.get(rel)
            if doc is not None and body is not None:
                announced[rel] = replace(super()._installed_summary(rel, doc, body, shas[rel],
                                                                    resolve), normal=True)
        self._announced = announced  # what :meth:`installed` learns, not summarized again
        self.workspace.install_summaries({rel: stored_form(s) for rel, s in announced.items()})

    def _installed_summary(self, rel: str, doc: TopicDoc, body: bytes, sha: str,
                           resolve: Resolve | None) -> TopicSummary:
        summary = self._announced.pop(rel, None)
        if summary is not None and summary.sha == sha:
            return summary
        return super()._installed_summary(rel, doc, body, sha, resolve)

    def installed(self, docs: dict[str, TopicDoc | None], data: dict[str, bytes | None],
                  shas: Mapping[str, str], resolve: Resolve | None = None) -> None:
        """Learn an install (as the directory catalog does); the summaries went to the
        database with it (:meth:`installing`), or are stored now (an install that did not
        say it was coming)."""
        super().installed(docs, data, shas, resolve)
        stored = self.workspace.stored_summaries()
        with self._lock:
            summaries = {rel: self.summary(rel) for rel in docs if rel not in stored}
        rows = [(rel, version, *stored_form(s)) for rel, s in sorted(summaries.items())
                if s is not None and (version := self.workspace.version_of(rel)) is not None]
        if rows:
            self._store(rows)

    def _store(self, rows: list[tuple[str, int, str, list[str], bool]]) -> None:
        """Store (path, version, summary, keys, normal) rows; a newer version's summary is
        never replaced by an older one. Best effort: a summary not stored is a parse for the
        others (and a worker that left that topic in the database fetches it whole)."""
        pg = self.workspace.pg
        try:
            with pg.connection() as conn, conn.cursor() as cur:
                cur.executemany(STORE_SUMMARY_SQL, rows)
        except pg._psycopg.Error:
            pass  # derived: the other writers parse that version
