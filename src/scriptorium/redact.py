"""Secret-looking values taken out of text before a memory writer sees it.

Imported transcripts are full of pasted credentials (API keys in shell commands, tokens in
config files). The session store keeps the user's copy untouched; what goes into memory (the
records a writer gets, hence the archived evidence and the topics) carries ``[REDACTED:kind]``
instead. Deterministic, so a redo after a crash hands the writer the same text.

Caught: OpenAI/Anthropic-style ``sk-…`` keys, GitHub tokens (``ghp_`` ``gho_`` ``ghu_``
``ghs_`` ``ghr_`` ``github_pat_``), AWS access key ids (``AKIA``/``ASIA``…), Slack tokens
(``xox?-``), Google API keys (``AIza…``), ``Bearer``/``Authorization`` header values, PEM
private-key blocks, and ``password=`` / ``api_key:`` / ``secret=`` / ``token=`` assignments.
"""

from __future__ import annotations

import re

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private_key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
        re.S)),
    ("api_key", re.compile(r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("aws_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("google_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b")),
    ("bearer", re.compile(r"(?i)\b(bearer|token)\s+[A-Za-z0-9_\-\.=:/+]{16,}")),
    ("assignment", re.compile(
        r"(?i)\b((?:api[_-]?key|secret(?:[_-]?key)?|access[_-]?token|auth[_-]?token|password|passwd)"
        r"\s*[:=]\s*[\"']?)([^\s\"',;]{8,})")),
]


def redact(text: str) -> str:
    """``text`` with every secret-looking value replaced by ``[REDACTED:<kind>]``."""
    if not text:
        return text
    for kind, pattern in _PATTERNS:
        if kind == "bearer":
            text = pattern.sub(lambda m: f"{m.group(1)} [REDACTED:{kind}]", text)
        elif kind == "assignment":
            text = pattern.sub(lambda m: f"{m.group(1)}[REDACTED:secret]", text)
        else:
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    return text
