"""Writers turn a batch of turns into topic edits inside a transaction's stage.

One protocol (:class:`~.base.Writer`): given a :class:`~.base.WriteRequest` (the batch, the
stage directory, what memory already cites), edit ``stage/topics/**.md`` and return an audit.
What changed is decided by the transaction, never by the writer's own claims.
"""

from .base import WriteRequest, Writer, WriterAudit, make_writer, run_writer

__all__ = ["WriteRequest", "Writer", "WriterAudit", "make_writer", "run_writer"]
