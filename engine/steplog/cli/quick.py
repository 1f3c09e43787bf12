"""``steplog run`` without click: the command line of a plain start or resume, read with the
declarations in ``run_options``.

Relaunching a killed engine is the moment a person waits for (the kill test, the monitor's Kill
now, a worker's takeover), and click's import with every command of ``commands`` built came to
about a third of the time from the kill to the first new step (issue 29). ``parse`` reads only
what it is sure of and gives every other command line (help, an unknown option, a value click
would refuse, anything but ``run``) back to click, which answers it as always: click stays the
one judge of a bad command line, and the keywords ``parse`` returns are the ones click would
(``tests/engine/cli/test_quick.py`` holds the two readings equal).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from steplog.cli.run_options import ENGINE_OPTIONS, RUN_OPTIONS, Option
from steplog.errors import UsageError

_OPTIONS = {o.flag: o for o in (*RUN_OPTIONS, *ENGINE_OPTIONS)}

COMPLETE_VAR = "_STEPLOG_COMPLETE"
"""Set by a shell asking click for completions (click's name for ``prog_name="steplog"``)."""


class _NotSure(Exception):
    """This command line is click's to read."""


def parse(argv: Sequence[str]) -> dict[str, Any] | None:
    """The keywords click passes ``steplog run``'s function for ``argv`` (the arguments after
    ``steplog``), or ``None`` when the command line is not a plain ``run`` this reader is sure
    of."""
    if len(argv) < 2 or argv[0] != "run" or COMPLETE_VAR in os.environ:
        return None
    given: dict[str, Any] = {}
    agent: str | None = None
    args = list(argv[1:])
    try:
        while args:
            token = args.pop(0)
            if not token.startswith("-"):
                if agent is not None:
                    raise _NotSure  # a second argument: click's "unexpected extra argument"
                agent = token
                continue
            flag, eq, inline = token.partition("=")
            option = _OPTIONS.get(flag)
            if option is None:
                raise _NotSure  # --help, --, an unknown or misspelt option
            if option.kind == "flag":
                if eq:
                    raise _NotSure  # "--exit-when-waiting=1": click says it takes no value
                given[option.dest] = True
                continue
            if eq:
                text = inline
            elif args and not args[0].startswith("-"):
                text = args.pop(0)
            else:
                raise _NotSure  # no value, or one that looks like an option
            value = _read(option, text)
            if option.multiple:
                given[option.dest] = (*given.get(option.dest, ()), value)
            else:
                given[option.dest] = value
    except _NotSure:
        return None
    if agent is None:
        return None
    out: dict[str, Any] = {"agent": agent}
    for option in _OPTIONS.values():
        out[option.dest] = given.get(option.dest, option.default)
    return out


def _read(option: Option, text: str) -> Any:
    """``text`` as click's type for ``option`` converts it (and the option's check passes), or
    ``_NotSure`` where click would refuse it."""
    try:
        if option.kind == "int":
            value: Any = int(text)
        elif option.kind == "float":
            value = float(text)
        elif option.kind == "choice":
            if text not in option.choices:
                raise _NotSure
            value = text
        elif option.kind == "log":
            from steplog.log.location import parse as parse_location

            value = parse_location(text)
        elif option.kind == "dir":
            value = _folder(text)
        elif option.kind == "model":
            from steplog.llm import check_model

            check_model(text)
            value = text
        else:
            value = text
    except (ValueError, UsageError):
        raise _NotSure from None
    if option.limit is not None:
        from steplog.policies import limit_problem

        if limit_problem(option.limit, value):
            raise _NotSure
    return value


def _folder(text: str) -> Path:
    """``click.Path(file_okay=False, path_type=Path)``: a path that is not there yet, or a folder
    this process may read."""
    try:
        st = os.stat(text)
    except OSError:
        return Path(text)
    import stat

    if not stat.S_ISDIR(st.st_mode) or not os.access(text, os.R_OK):
        raise _NotSure
    return Path(text)


def run(argv: Sequence[str]) -> bool:
    """Run ``steplog run`` for ``argv`` if ``parse`` is sure of it; ``False`` (nothing done) if
    not. Around the command it does what ``commands.main`` and click's ``main`` do: Ctrl-C or
    end of input before the engine takes it is "aborted" (130), a closed stdout a quiet exit 1."""
    kwargs = parse(argv)
    if kwargs is None:
        return False
    from steplog.cli.drive import fail, guard, run_agent

    try:
        guard(run_agent)(**kwargs)
    except (EOFError, KeyboardInterrupt):
        from steplog.cli.drive import echo

        echo("", err=True)
        fail("aborted", 130)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        from click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)
        sys.stderr = PacifyFlushWrapper(sys.stderr)
        sys.exit(1)
    return True


__all__ = ["COMPLETE_VAR", "parse", "run"]
