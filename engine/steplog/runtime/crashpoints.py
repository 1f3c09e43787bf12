"""Test-only crash points: make the engine die at an exact place, to prove recovery from there.

``STEPLOG_CRASH_AT="after_effect_started@5"`` makes the engine ``os._exit(CRASH_EXIT_CODE)`` the
moment step 5 reaches that point, after printing one line to stderr that proves it got there.
Several points may be given, comma-separated. Never set it outside tests: it exists so the kill
test's sweep and our own tests can hit each window deterministically.
"""

from __future__ import annotations

import os
import sys

POINTS = (
    "after_decision",  # the model's answer is committed, nothing acted yet
    "after_effect_started",  # the ledger says "started"; the effect has not been done
    "after_effect_applied",  # the far side has the effect; the ledger still says "started"
    "after_effect_completed",  # the effect is done and ledgered; the step is not recorded
    "before_step_record",  # the step body returned; its checkpoint is not committed
    "after_step_record",  # the checkpoint is committed
)
CRASH_EXIT_CODE = 86
ENV = "STEPLOG_CRASH_AT"


def _parse(spec: str) -> frozenset[tuple[str, int]]:
    out = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        point, _, seq = part.partition("@")
        if point not in POINTS or not seq.isdigit():
            raise SystemExit(
                f"steplog: bad {ENV}={spec!r}: use POINT@SEQ with POINT one of {', '.join(POINTS)}"
            )
        out.add((point, int(seq)))
    return frozenset(out)


_ARMED = _parse(os.environ.get(ENV, ""))

# TEST-ONLY: a deliberately broken engine, so the kill test can prove its verdict catches one.
# ``STEPLOG_TEST_BREAK=unstable_keys`` makes idempotency keys differ from one engine process to
# the next (a resumed step re-sends under a new key: the far side delivers twice);
# ``record_before_act`` marks an effect completed in the ledger before doing it (a kill in between
# loses the effect). Comma-separated; never in production.
BREAK_ENV = "STEPLOG_TEST_BREAK"
BREAKS = ("unstable_keys", "record_before_act")
_BROKEN = frozenset(filter(None, (b.strip() for b in os.environ.get(BREAK_ENV, "").split(","))))


def broken(flaw: str) -> bool:
    """TEST-ONLY: is this deliberate engine flaw switched on (``STEPLOG_TEST_BREAK``)?"""
    return flaw in _BROKEN


def reached(point: str, seq: int) -> None:
    """Die here if this point of this step is armed (a no-op otherwise, and cheap)."""
    if _ARMED and (point, seq) in _ARMED:
        sys.stderr.write(f"steplog: crash point {point}@{seq} reached\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)
