"""Issue 29's targets, each figure beside its bound, in one table.

``compare.py`` measures the figures of its own (steps, resume) and runs the benchmarks that measure
the rest (``postgres_bench.py``, the monitor's ``test_gui_bench.py``, the demo's start-up); those
report a figure by ``record(key, value)``, which appends one JSON line to the file named by
``STEPLOG_BENCH_FIGURES`` (nothing happens when it is unset, as in a plain pytest run of them).
Every target is a ratio in the same run or a time on this machine; a figure not measured in a run
prints ``-`` and says why, it is never filled in from an earlier run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

FIGURES_ENV = "STEPLOG_BENCH_FIGURES"


@dataclass(frozen=True)
class Target:
    key: str
    figure: str
    bound: float
    at_most: bool  # True: the figure must be <= bound; False: >= bound
    unit: str  # "x" for a ratio in the same run, else the unit of the figure

    def met(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound

    def describe(self) -> str:
        unit = self.unit if self.unit == "x" else f" {self.unit}"
        return f"{'<=' if self.at_most else '>='} {self.bound:g}{unit}"


TARGETS = (
    Target(
        "steps_full_vs_fastest_peer",
        "durable no-op steps/s at FULL / fastest peer's",
        3.0,
        False,
        "x",
    ),
    Target(
        "steps_full_vs_raw_floor",
        "durable no-op steps/s at FULL / raw sqlite3 commit floor",
        0.8,
        False,
        "x",
    ),
    Target("bytes_vs_dbos", "bytes per no-op step / DBOS's", 1.0, True, "x"),
    Target(
        "relaunch_vs_import", "kill -> first new step / python -c 'import steplog'", 1.2, True, "x"
    ),
    Target(
        "pg_steps_vs_dbos",
        "PostgreSQL steps/s at FULL / DBOS's on the same server",
        3.0,
        False,
        "x",
    ),
    Target(
        "pg_steps_vs_floor",
        "PostgreSQL steps/s at FULL / psycopg INSERT+COMMIT floor",
        0.5,
        False,
        "x",
    ),
    Target(
        "pg_fleet_4_vs_1",
        "PostgreSQL fleet: 4 engines' steps/s / one engine's (FULL)",
        3.0,
        False,
        "x",
    ),
    Target("monitor_commit_to_pixel_p95_ms", "monitor: commit -> pixel, p95", 100.0, True, "ms"),
    Target("demo_window_s", "steplog demo from source: window up", 1.5, True, "s"),
    Target("demo_first_step_s", "steplog demo from source: first step drawn", 2.5, True, "s"),
    Target("open_100k_s", "monitor: open a 100k-step run to a painted timeline", 0.5, True, "s"),
    Target("open_1m_s", "monitor: open a 1M-step run", 3.0, True, "s"),
    Target("open_1m_mb", "monitor: peak memory opening a 1M-step run", 300.0, True, "MB"),
    Target("resume_1m_s", "resume a 1M-step run: start -> first new step", 0.5, True, "s"),
    Target(
        "stream_steps_vs_main",
        "no-op steps/s, nothing streamed / main's (issue 30)",
        0.95,
        False,
        "x",
    ),
    Target(
        "stream_short_cpu_vs_unstreamed",
        "CPU of a streamed model call / unstreamed, ~20 chunks",
        1.05,
        True,
        "x",
    ),
    Target(
        "stream_long_cpu_vs_unstreamed",
        "CPU of a streamed model call / unstreamed, ~210 chunks",
        1.05,
        True,
        "x",
    ),
)
BY_KEY = {t.key: t for t in TARGETS}


def record(key: str, value: float) -> None:
    """Report a measured figure to ``compare.py`` when it runs this benchmark (see module doc)."""
    if key not in BY_KEY:
        raise KeyError(f"{key!r} is not one of the targets' figures: {', '.join(BY_KEY)}")
    where = os.environ.get(FIGURES_ENV)
    if where:
        with open(where, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "value": value}) + "\n")


def recorded(path: Path) -> dict[str, float]:
    """The figures appended to ``path``; the last one of a key wins."""
    found: dict[str, float] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                found[row["key"]] = float(row["value"])
    return found


def print_targets(
    measured: Mapping[str, float | None], why_missing: Mapping[str, str], out: Callable[[str], None]
) -> None:
    """One line per target: the figure, what this run measured, the bound, met or not."""
    out("\n0. Issue 29's targets: each figure of this run beside its target")
    out(f"{'figure':<62} {'this run':>10} {'target':>10}  met")
    for t in TARGETS:
        value = measured.get(t.key)
        if value is None:
            shown, verdict = "-", f"not measured: {why_missing.get(t.key, 'figure not chosen')}"
        else:
            digits = 2 if t.unit in ("x", "s") else 0
            shown = f"{value:,.{digits}f}{'x' if t.unit == 'x' else ''}"
            verdict = "yes" if t.met(value) else "NO"
        out(f"{t.figure:<62} {shown:>10} {t.describe():>10}  {verdict}")
