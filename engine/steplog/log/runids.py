"""Run ids: what a run may be called and how a new one is made."""

from __future__ import annotations

import re
import time

from steplog.errors import UsageError

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}")


def check_run_id(run_id: str) -> None:
    if not _RUN_ID.fullmatch(run_id):
        raise UsageError(
            f"run id {run_id!r} may use letters, digits, '-', '_' and '.' only (at most 100)"
        )


def new_run_id() -> str:
    """Sortable by start time, unique without coordination."""
    import secrets  # here: a resumed run is named already, and secrets brings hmac and OpenSSL

    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
