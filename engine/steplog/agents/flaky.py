"""``flaky``: a step that keeps almost succeeding.

Its call to a "partner API" fails transiently every time. The step's own retry policy would go
on for a long while, but the run's retry budget runs out first, and the run ends ``gave_up``
(exit 3) with the budget named: giving up gracefully instead of spinning.
"""

from __future__ import annotations

from typing import Any

import steplog
from steplog.errors import TransientError
from steplog.policies import Budget, RetryPolicy


def _prepare(batch: int) -> dict[str, Any]:
    return {"batch": batch, "records": [f"rec-{batch}-{i}" for i in range(3)]}


def _sync_with_partner(batch: dict[str, Any], attempt_note: str) -> dict[str, Any]:
    raise TransientError(f"partner API timed out syncing batch {batch['batch']} ({attempt_note})")


@steplog.agent(
    budget=Budget(max_steps=50, max_seconds=120, max_retries=5),
    retry=RetryPolicy(
        max_attempts=1000, initial_interval=0.01, backoff_factor=1.5, max_interval=0.1
    ),
)
def flaky(run: steplog.Run, batches: int = 2) -> dict[str, Any]:
    """Prepare a batch, then try to sync it with a partner that never quite answers."""
    synced = 0
    for b in range(1, batches + 1):
        batch = run.step(f"prepare batch {b}", _prepare, b)
        run.step(f"sync batch {b}", _sync_with_partner, batch, "almost there")
        synced += 1
    return {"synced": synced}
