"""Policies are values: budgets that bound a run, and how a failing step is retried."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

from steplog.errors import PermanentError, TransientError, UsageError

INT64_MAX = 2**63 - 1
"""The largest value a SQLite INTEGER holds; every limit must fit the run row."""

_COUNTS = ("max_steps", "max_tokens", "max_retries", "max_recoveries")
_MAY_BE_ZERO = ("max_retries", "max_recoveries")


def limit_problem(name: str, value: Any) -> str | None:
    """What is wrong with a value for budget field ``name``, or ``None``.

    A limit is a number (a whole one for counts), finite (SQLite stores NaN as NULL, which means
    *no limit*), positive (0 allowed for retries and recoveries) and fits a 64-bit INTEGER.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, got {value!r}"
    if not math.isfinite(value):
        return f"must be a finite number (got {value}); omit it for no limit"
    if name in _COUNTS and not isinstance(value, int):
        return f"must be a whole number (got {value})"
    if name in _MAY_BE_ZERO and value < 0:
        return f"must be 0 or more (got {value}); omit it for the default"
    if name not in _MAY_BE_ZERO and value <= 0:
        return f"must be positive (got {value}); omit it for no limit"
    if value > INT64_MAX:
        return f"must be at most {INT64_MAX} (got {value})"
    return None


def check_seconds(option: str, value: Any, *, zero_ok: bool, most: float) -> None:
    """Refuse an option in seconds that is not a finite number in ``[0 or more than 0, most]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{option} must be a finite number of seconds (got {value!r})")
    if value < 0 or (value == 0 and not zero_ok):
        raise UsageError(
            f"{option} must be {'0 or more' if zero_ok else 'more than 0'} seconds (got {value})"
        )
    if value > most:
        raise UsageError(f"{option} must be at most {most:g} seconds (got {value:g})")


@dataclass(frozen=True)
class Budget:
    """Limits of one run. ``None`` means unlimited. They live in the run row, so kills and
    restarts never reset them; raise one and run the same id again to resume a run that gave up.
    """

    max_steps: int | None = None
    """Committed steps."""
    max_tokens: int | None = None
    """Model tokens, input plus output, as reported by the provider (estimates flagged). Each call
    reserves its upper bound first, so the run never spends past this, kills included."""
    max_seconds: float | None = None
    """Active wall-clock seconds, summed over every engine process that worked on the run."""
    max_cost_usd: float | None = None
    """Model cost in USD from the price table (local and offline models cost 0)."""
    max_retries: int | None = 20
    """Retries (attempts after the first) of all steps together; exhausting it is giving up."""
    max_recoveries: int | None = 20
    """Engines that may die on one step before it is a poison pill and the run fails."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            problem = None if value is None else limit_problem(f.name, value)
            if problem:
                raise UsageError(f"budget {f.name} {problem}")

    def merged(self, **overrides: Any) -> Budget:
        """This budget with the given limits replaced (``None`` overrides are ignored)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


BUDGET_NAMES = ("steps", "tokens", "seconds", "cost_usd")
"""The budgets reported in status JSON, in display order."""


class RetryPolicy(NamedTuple):
    """How a failing step is retried. Every attempt's counter is committed *before* the attempt,
    so kills cannot reset it."""

    max_attempts: int = 3
    """Attempts in all, the first included; past it the run fails (exit 4)."""
    initial_interval: float = 0.5
    """Seconds before the first retry."""
    backoff_factor: float = 2.0
    """Multiplier of the interval after each retry."""
    max_interval: float = 30.0
    """Cap on the interval; a provider's Retry-After may still ask for longer."""
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    """Exception types worth retrying; others fail the step at once. A ``PermanentError``
    (bad request, bad key, a 4xx) is never retried unless it is also a ``TransientError``."""

    def retries(self, exc: BaseException) -> bool:
        """Is another attempt worth making after ``exc``?"""
        if isinstance(exc, PermanentError) and not isinstance(exc, TransientError):
            return False
        return isinstance(exc, self.retry_on)

    def interval(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return min(self.max_interval, self.initial_interval * self.backoff_factor ** (attempt - 1))
