"""Policies are values: budgets that bound a run, and how a failing step is retried."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

from .errors import PermanentError, TransientError, UsageError


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
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UsageError(f"budget {f.name} must be a number, got {value!r}")
            if f.name in ("max_retries", "max_recoveries"):
                if value < 0:
                    raise UsageError(f"budget {f.name} must be 0 or more (got {value}); omit it for the default")
            elif value <= 0:
                raise UsageError(
                    f"budget {f.name} must be positive (got {value}); omit it for no limit"
                )

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
