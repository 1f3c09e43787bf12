"""The ``steplog`` command line: ``commands`` declares every command; ``options`` the option types
shared with ``python -m steplog.outbox``."""

from steplog.cli.commands import main

__all__ = ["main"]
