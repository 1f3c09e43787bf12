"""``python -m steplog`` is the ``steplog`` command."""

from .cli import main

main()
