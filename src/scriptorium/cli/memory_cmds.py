"""``scriptorium memory …`` commands (thin wrappers over scriptorium.memory)."""

from __future__ import annotations
