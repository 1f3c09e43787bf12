"""The witness: a SQLite file the test owns, playing a far side that deduplicates on the
idempotency key (table ``applied``) and records every attempt (table ``attempt``). The
``witness`` agent of ``agents_for_tests`` sends its effects there."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from helpers.engine import Engine
from helpers.paths import AGENTS

CRASH_AT = "after_effect_started@8"
"""A witness run that dies (os._exit) while step 8's effect is in flight, then resumes."""


def witness_args(
    engine: Engine, run_id: str, witness: Path, n: int, pause: float = 0.0
) -> list[str]:
    """``steplog run`` arguments for the ``witness`` agent: ``n`` items, ``pause`` s per step."""
    return [
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        run_id,
        "--db",
        str(engine.db),
        "--param",
        f"n={n}",
        "--param",
        f"witness={witness}",
        "--param",
        f"pause={pause}",
    ]


def applied(witness: Path) -> list[tuple[str, int]]:
    """(key, item) of every effect the far side applied, in order."""
    if not witness.exists():
        return []
    conn = sqlite3.connect(witness)
    try:
        return [(k, i) for k, i in conn.execute("SELECT key, i FROM applied ORDER BY rowid")]
    except sqlite3.OperationalError:  # the first engine is creating the table right now
        return []
    finally:
        conn.close()


def items_of(witness: Path, run_id: str) -> list[int]:
    """The items the far side applied for one run, sorted."""
    return sorted(i for k, i in applied(witness) if k.startswith(f"{run_id}:"))
