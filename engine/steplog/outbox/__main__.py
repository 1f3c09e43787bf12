"""``python -m steplog.outbox``: the outbox service on its own (``steplog outbox`` is the same)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import SteplogError
from ..options import Seconds
from .server import serve


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="0 lets the OS pick a free port.",
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The outbox's SQLite file [default: outbox.db in the user data directory].",
)
@click.option(
    "--port-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the bound port here (atomically) once listening.",
)
@click.option(
    "--delay",
    type=Seconds(0, 3600),
    default=0.0,
    show_default=True,
    help="Seconds of simulated processing per delivery.",
)
def main(host: str, port: int, db: Path | None, port_file: Path | None, delay: float) -> None:
    """Serve POST/GET /messages with idempotency keys until SIGTERM or Ctrl-C."""
    try:
        serve(host=host, port=port, db=db, port_file=port_file, delay=delay)
    except SteplogError as exc:
        click.echo(f"steplog: {exc}", err=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main(prog_name="python -m steplog.outbox")
