"""``--since`` / ``--until``: a moment as ISO 8601 or as a span back from now.

One parser for every command that takes a time window (``runs``, ``cost``, ``cancel``/``retry``
filters, the monitor's filter bar), so ``2h`` or ``2026-12-01`` mean the same everywhere. It
lives in the log package because a ``RunQuery`` (``find``) is read from the options here too.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from steplog.errors import UsageError

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_when(text: str, *, option: str = "--since", now: float | None = None) -> float:
    """Epoch seconds for ``text``: ``30m``, ``2h``, ``3d``, ``1w`` (that long before ``now``), or
    an ISO 8601 date or date-time (``2026-12-01``, ``2026-12-01T09:30``, ``...Z``, ``...+01:00``;
    without a zone it is local time, as a person at this machine means it)."""
    raw = text.strip()
    span = _SPAN.fullmatch(raw.lower())
    if span:
        return (time.time() if now is None else now) - float(span[1]) * _UNIT[span[2]]
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option} {text!r} is not a time; give an ISO 8601 date or time (2026-12-01, "
            "2026-12-01T09:30, 2026-12-01T08:30Z) or a span back from now (30m, 2h, 3d, 1w)"
        ) from None
    return moment.timestamp()


__all__ = ["parse_when"]
