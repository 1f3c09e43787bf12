"""``python -m steplog`` is the ``steplog`` command."""

from steplog.cli.commands import main

main()
