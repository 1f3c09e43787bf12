"""The ``steplog`` command line: ``commands`` declares every command (with click); ``quick`` runs
a plain ``steplog run`` without importing click; ``drive`` is what ``run`` does once its command
line is read; ``run_options`` declares ``run``'s options for both; ``options`` has the option types
shared with ``python -m steplog.outbox``."""

from __future__ import annotations

import sys


def main() -> None:
    """The ``steplog`` command: a plain ``steplog run`` straight to the engine, any other command
    line through click."""
    from steplog.cli.quick import run

    if run(sys.argv[1:]):
        return
    from steplog.cli.commands import main as with_click

    with_click()


__all__ = ["main"]
