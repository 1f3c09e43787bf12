"""Waiting on real processes: poll a condition until it holds, or fail saying what never did."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], bool], what: str = "the engine got there", timeout: float = 60.0
) -> None:
    """Return once ``condition()`` holds; fail the test after ``timeout`` s (a deadline for a
    hang, not a bound on speed: pick it far above the time the condition needs)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)
