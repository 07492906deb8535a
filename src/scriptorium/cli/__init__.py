"""Command-line interface: ``scriptorium [--home DIR] <group> <command>``.

Importing this package registers every command module on the groups defined in
:mod:`scriptorium.cli.app`.
"""

from .app import main, memory, session  # noqa: F401

# Command modules register themselves on import. Each module owns its commands.
from . import session_cmds  # noqa: E402,F401
from . import memory_cmds  # noqa: E402,F401
from . import read_cmds  # noqa: E402,F401
from . import write_cmds  # noqa: E402,F401
from . import demo_cmd  # noqa: E402,F401
from . import upgrade_cmds  # noqa: E402,F401
from . import verify_cmds  # noqa: E402,F401
from . import view_cmd  # noqa: E402,F401
from . import import_cmds  # noqa: E402,F401
from . import mcp_cmd  # noqa: E402,F401
from . import home_cmds  # noqa: E402,F401

__all__ = ["main"]
