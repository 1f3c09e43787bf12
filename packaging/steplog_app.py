"""The frozen app's entry point: one executable that is the monitor, the CLI and every child.

- no arguments: the desktop monitor (what double-clicking the app does), as ``steplog`` does;
- ``__module__ MODULE ARGS...``: how the app starts its own children (engine, outbox, the monitor
  from ``steplog gui``), in place of ``python -P -m MODULE`` (``steplog.procs.python_argv``);
- anything else: the ``steplog`` command line (``./steplog run demo``, ``./steplog killtest demo``).
"""

from __future__ import annotations

import os
import sys


def _add_pythonpath() -> None:
    """A bundle ignores ``PYTHONPATH``; children get it from ``steplog.control.procs.child_env``
    (the parent's project paths, then its working directory), so honour it after the bundled
    modules: a person's ``package.module:function`` agent imports as it would with ``python -P
    -m``."""
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.append(entry)


def main() -> None:
    _add_pythonpath()
    from steplog.control.procs import FROZEN_RUN_MODULE, run_module_as_main

    if len(sys.argv) > 1 and sys.argv[1] == FROZEN_RUN_MODULE:
        run_module_as_main(sys.argv[1:])
        return
    from steplog.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
