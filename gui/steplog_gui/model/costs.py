"""The Costs view's figures, Qt-free: a ``CostReport`` from the log as stacks to draw.

The chart stacks each group's spending per local hour or day, the most expensive group at the
bottom. Past ``MAX_GROUPS`` groups the rest are summed as one, "other", so a log of a hundred
agents still draws a chart a person can read; the totals table lists every group.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from steplog.log.cost import CostReport, CostRow

MAX_GROUPS = 7
"""Groups drawn as their own stack; the rest are drawn as "other"."""
OTHER = "other"

PERIODS: tuple[tuple[str, float | None, str], ...] = (
    ("Last 24 hours", 86_400.0, "hour"),
    ("Last 7 days", 7 * 86_400.0, "day"),
    ("Last 30 days", 30 * 86_400.0, "day"),
    ("All time", None, "day"),
)
"""The view's periods: label, span back from now (None: all), and the bar per hour or day."""


@dataclass(frozen=True)
class Stacks:
    """Bars to draw: ``starts[i]`` a bucket's start (epoch seconds), ``width`` seconds per bar;
    for group ``g`` (``groups[g]``, most expensive first) its bar spans ``base[g][i]`` to
    ``base[g][i] + height[g][i]``."""

    starts: npt.NDArray[np.float64]
    width: float
    groups: list[str]
    base: npt.NDArray[np.float64]
    height: npt.NDArray[np.float64]

    @property
    def empty(self) -> bool:
        return not self.groups or not len(self.starts)


def stacks(report: CostReport, *, tokens: bool = False) -> Stacks:
    """The report's series as stacked bars of cost (``tokens``: of tokens)."""
    ranked = [row.key for row in report.totals]
    if tokens:
        ranked.sort(key=lambda k: -next(r.tokens for r in report.totals if r.key == k))
    shown = ranked[:MAX_GROUPS] if len(ranked) <= MAX_GROUPS else ranked[: MAX_GROUPS - 1]
    groups = shown + ([OTHER] if len(ranked) > len(shown) else [])
    row_of = {k: i for i, k in enumerate(shown)}
    starts = sorted({t for t, _k, _n, _c in report.series})
    col_of = {t: i for i, t in enumerate(starts)}
    height = np.zeros((len(groups), len(starts)))
    for t, key, n, usd in report.series:
        height[row_of.get(key, len(groups) - 1), col_of[t]] += n if tokens else usd
    base = np.zeros_like(height)
    if len(groups) > 1:
        base[1:] = np.cumsum(height, axis=0)[:-1]
    width = 3600.0 if report.bucket == "hour" else 86_400.0
    return Stacks(np.asarray(starts, dtype=np.float64), width, groups, base, height)


def share(row: CostRow, totals: list[CostRow]) -> float:
    """The group's part of the whole cost (of the tokens when nothing cost money), 0..1."""
    total = sum(r.cost_usd for r in totals)
    if total > 0:
        return row.cost_usd / total
    tokens = sum(r.tokens for r in totals)
    return row.tokens / tokens if tokens else 0.0


def money(usd: float) -> str:
    """Dollars as a person reads them: cents once it is a dollar or more, else four places."""
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:,.4f}"


def bucket_label(start: float, bucket: str) -> str:
    """A bar's time as its axis shows it: ``Dec 07 14:00`` for an hour, ``Dec 07`` for a day."""
    fmt = "%b %d %H:%M" if bucket == "hour" else "%b %d"
    return time.strftime(fmt, time.localtime(start))
