"""Start-up milestones of the monitor, for the demo's start-up benchmark (issue 29).

With ``STEPLOG_TRACE_STARTUP=PATH`` in its environment the monitor appends one line per milestone
to ``PATH``: ``<time.time()> <name>``, each stamped when first reached: ``main`` (the monitor's
code starts), ``qapplication``, ``window_built``, ``window_painted``, ``outbox_listening``,
``engine_spawned``, ``views_ready`` (the timeline built), ``first_step_drawn``; and, at the
first paint, ``loaded_at_paint:NAME`` for each of the heavy packages the paint does not need
that was imported by then (``LATER``: none should be). Without the variable ``mark`` does
nothing. It only writes the file it is given, never the log: harmless to leave set.
``tests/benchmarks/demo_startup.py`` reads it.

Only ``os`` and ``time`` are imported here (both already loaded by the interpreter), so the trace
costs the first paint nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

ENV = "STEPLOG_TRACE_STARTUP"
LATER = ("pyqtgraph", "watchdog")
"""Imported after the first paint (``app.main``): the plots and the file watcher. (The outbox
panel's HTTP client is imported on a pool thread whenever its first poll comes: no wait for the
paint.)"""
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


def mark_loaded(modules: Mapping[str, object], names: tuple[str, ...] = LATER) -> None:
    """``loaded_at_paint:NAME`` for each of ``names`` in ``modules`` (``sys.modules``)."""
    for name in names:
        if name in modules:
            mark(f"loaded_at_paint:{name}")
