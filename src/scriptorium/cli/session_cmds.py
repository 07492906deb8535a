"""``scriptorium session …`` commands (thin wrappers over scriptorium.sessions)."""

from __future__ import annotations
