"""A moment as a person writes it on the command line: ``--since``/``--until``.

One reader for every command that takes a time (``steplog runs``, ``steplog cost``, the monitor's
filter bar): ISO 8601 (``2026-12-07``, ``2026-12-07T09:30``, ``2026-12-07T09:30:00Z``,
``...+01:00``; without an offset it is local time, as ``date`` prints it) or a span back from
now (``90s``, ``30m``, ``2h``, ``3d``, ``1w``).
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from steplog.errors import UsageError

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\s*$", re.I)
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}

FORMS = "an ISO 8601 time (2026-12-07, 2026-12-07T09:30Z) or a span back from now (2h, 3d)"


def parse_when(text: str, *, option: str = "--since", now: float | None = None) -> float:
    """``text`` as a Unix time; ``UsageError`` naming ``option`` and the forms it takes."""
    span = _SPAN.match(text)
    if span:
        seconds = float(span.group(1)) * _UNIT_SECONDS[span.group(2).lower()]
        return (time.time() if now is None else now) - seconds
    iso = text.strip()
    if iso.endswith(("Z", "z")):
        iso = iso[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise UsageError(f"{option} {text!r} is not a time; give {FORMS}") from None
    return moment.timestamp()  # naive: local time


__all__ = ["FORMS", "parse_when"]
