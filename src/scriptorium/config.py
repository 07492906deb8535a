"""Where the home is and what the settings are.

Home: ``--home DIR`` (or ``--home postgresql://…``), else ``$SCRIPTORIUM_HOME``, else
``~/.scriptorium``.
Settings: ``home/config.toml`` (a directory home only), overridden by ``SCRIPTORIUM_*``
environment variables, overridden by explicit values (CLI flags or library arguments).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from .entrypoints import check_writer_name
from .errors import InvalidInput
from .postgres.url import is_postgres_url, parse_home_url


Home = Path | str  # a home directory, or a PostgreSQL home URL


def resolve_location(home: str | os.PathLike[str] | None = None) -> Home:
    """Where the home is: a directory (a Path, ``~`` expanded) or a PostgreSQL home URL (a
    str, checked here so a typo in ``?home=`` is one clear error before any connection).
    ``home``, else ``$SCRIPTORIUM_HOME``, else ``~/.scriptorium``."""
    chosen = os.fspath(home) if home else os.environ.get("SCRIPTORIUM_HOME")
    if chosen and is_postgres_url(chosen):
        parse_home_url(chosen)
        return chosen
    if chosen:
        return Path(chosen).expanduser()
    return Path.home() / ".scriptorium"


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The scriptorium home directory (not created here). A PostgreSQL home URL is refused
    with one line: the caller works on a directory home only (see :func:`resolve_location`)."""
    where = resolve_location(home)
    if isinstance(where, str):
        raise InvalidInput(f"this operation needs a directory home, not the PostgreSQL home "
                           f"{parse_home_url(where).display}")
    return where


SIDE_BRANCHES = ("conversation", "threshold", "all")


@dataclass(frozen=True)
class Settings:
    """Every knob, with its default. Field names match ``SCRIPTORIUM_<NAME>`` env vars."""

    trigger_tokens: int = 16_000
    idle_allowance_seconds: float = 3600.0
    # which off-head branches the session-boundary write takes below the threshold:
    # "conversation" (a line somebody went down, or a sub-agent's), "threshold", "all"
    side_branches: str = "conversation"
    watcher_idle_seconds: float = 1800.0
    watcher_interval_seconds: float = 10_800.0  # the safety-net poll; moves are told
    writer_kind: str = "embedded"
    llm_base_url: str = ""
    llm_model: str = ""
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_max_turns: int = 20
    llm_timeout_seconds: float = 60.0
    # the whole run (every request and tool call; the workspace lock is held meanwhile);
    # 0: RUN_TIMEOUT_FACTOR x llm_timeout_seconds
    llm_run_timeout_seconds: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # what config.toml holds that is not ours (ignored)


# config.toml section/key -> Settings field
_TOML_KEYS = {
    ("memory", "trigger_tokens"): "trigger_tokens",
    ("memory", "idle_allowance_seconds"): "idle_allowance_seconds",
    ("memory", "side_branches"): "side_branches",
    ("watcher", "idle_seconds"): "watcher_idle_seconds",
    ("watcher", "interval_seconds"): "watcher_interval_seconds",
    ("writer", "kind"): "writer_kind",
    ("writer.llm", "base_url"): "llm_base_url",
    ("writer.llm", "model"): "llm_model",
    ("writer.llm", "api_key_env"): "llm_api_key_env",
    ("writer.llm", "max_turns"): "llm_max_turns",
    ("writer.llm", "timeout_seconds"): "llm_timeout_seconds",
    ("writer.llm", "run_timeout_seconds"): "llm_run_timeout_seconds",
}


def _coerce(name: str, value: Any, origin: str) -> Any:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    try:
        if kind in ("int", int):
            if isinstance(value, bool):
                raise ValueError
            out = int(value)
            if out <= 0:
                raise ValueError
            return out
        if kind in ("float", float):
            seconds = float(value)
            if seconds < 0:
                raise ValueError
            return seconds
        return str(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"invalid setting {name}={value!r} in {origin}") from None


def _check_keys(data: dict[str, Any], path: Path) -> list[str]:
    """An unknown key in a section we own is an error naming it (a typo would otherwise be
    ignored for good); an unknown section is left to whatever owns it, with a warning."""
    warnings = []
    known_sections = {section.split(".")[0] for section, _ in _TOML_KEYS}
    for section, body in data.items():
        if not isinstance(body, dict):
            raise InvalidInput(f"unknown setting {section!r} in {path} (settings live in "
                               f"sections: {', '.join(sorted(known_sections))})")
        if section not in known_sections:
            warnings.append(f"{path}: section [{section}] is not a scriptorium setting; ignored")
            continue
        for key, value in body.items():
            sub = f"{section}.{key}"
            if isinstance(value, dict) and any(s == sub for s, _ in _TOML_KEYS):
                tables = [(sub, inner) for inner in value]
            else:
                tables = [(section, key)]
            for where, name in tables:
                if (where, name) not in _TOML_KEYS:
                    known = ", ".join(k for s, k in _TOML_KEYS if s == where)
                    raise InvalidInput(f"unknown setting [{where}] {name} in {path} "
                                       f"(known: {known})")
    return warnings


def load_settings(home: Home, overrides: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Settings for ``home``: file, then environment, then ``overrides`` (None values skipped).
    A PostgreSQL home has no ``config.toml``: its settings are the environment and flags."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    path = None if is_postgres_url(home) else Path(home) / "config.toml"
    if path is not None and path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"cannot read {path}: {exc}") from None
        values["warnings"] = tuple(_check_keys(data, path))
        for (section, key), name in _TOML_KEYS.items():
            node: Any = data
            for part in section.split("."):
                node = node.get(part, {}) if isinstance(node, dict) else {}
            if isinstance(node, dict) and key in node:
                values[name] = _coerce(name, node[key], str(path))
    for f in fields(Settings):
        env_name = "SCRIPTORIUM_" + f.name.upper()
        if f.name not in ("extra", "warnings") and env_name in environ:
            values[f.name] = _coerce(f.name, environ[env_name], env_name)
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, value, "arguments")
    settings = replace(Settings(), **values)
    if settings.side_branches not in SIDE_BRANCHES:
        raise InvalidInput(f"unknown side_branches {settings.side_branches!r} "
                           f"({', '.join(SIDE_BRANCHES)})")
    if settings.writer_kind != "embedded":  # the default needs no metadata scan
        check_writer_name(settings.writer_kind)  # any registered name (entry points)
    return settings
