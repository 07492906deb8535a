"""Writers turn a batch of turns into topic edits inside a transaction's stage.

One protocol (:class:`~.base.Writer`): given a :class:`~.base.WriteRequest` (the batch, the
stage directory, what memory already cites), edit ``stage/topics/**.md`` and return an audit.
What changed is decided by the transaction, never by the writer's own claims. Writers are
found by name through the ``scriptorium.writers`` entry-point group (:mod:`.registry`).
"""

from .base import WriteJob, WriteRequest, Writer, WriterAudit, run_writer
from .registry import make_writer

__all__ = ["WriteJob", "WriteRequest", "Writer", "WriterAudit", "make_writer", "run_writer"]
