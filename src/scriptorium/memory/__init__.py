"""The memory workspace and everything that writes and reads it."""
