"""``python -m scriptorium``: the same CLI as the ``scriptorium`` command."""

from .cli import main

main()
