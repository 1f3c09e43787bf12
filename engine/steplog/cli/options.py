"""Option types shared by the command lines (``steplog``'s and ``python -m steplog.outbox``'s)."""

from __future__ import annotations

import math
from typing import Any

import click


class Seconds(click.FloatRange):
    """A number of seconds in a range, and a number: ``nan`` passes every range check (all its
    comparisons are false), and ``--poll nan`` crashed the worker in ``time.sleep``. ``inf``
    only where an upper bound says it is allowed (``cancel --wait``: wait for the end)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if math.isnan(seconds):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds
