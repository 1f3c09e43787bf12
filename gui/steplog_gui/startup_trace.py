"""Start-up milestones of the monitor, for the demo's start-up benchmark.

With ``STEPLOG_TRACE_STARTUP=PATH`` in its environment the monitor appends one line per milestone
to ``PATH``: ``<time.time()> <name>``, each stamped when first reached: ``main`` (the monitor's
code starts), ``qapplication``, ``window_built``, ``window_painted``, ``outbox_listening``,
``engine_spawned``, ``views_ready`` (the plots built), ``first_step_drawn``. Without the
variable ``mark`` does nothing. It only writes the file it is given, never the log: harmless to
leave set. ``tests/benchmarks/demo_startup.py`` reads it.

Only ``os`` and ``time`` are imported here (both already loaded by the interpreter), so the trace
costs the first paint nothing.
"""

from __future__ import annotations

import os
import time

ENV = "STEPLOG_TRACE_STARTUP"
_path = os.environ.get(ENV)
_seen: set[str] = set()


def enabled() -> bool:
    return bool(_path)


def mark(name: str, when: float | None = None) -> None:
    """Record milestone ``name`` (once: a second call with the same name is ignored)."""
    if not _path or name in _seen:
        return
    _seen.add(name)
    stamp = time.time() if when is None else when
    try:
        with open(_path, "a", encoding="utf-8") as out:
            out.write(f"{stamp:.6f} {name}\n")
    except OSError:
        pass  # a trace that cannot be written must not stop the monitor
