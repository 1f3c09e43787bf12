"""``python -m steplog`` is the ``steplog`` command."""

from steplog.cli import main

main()
