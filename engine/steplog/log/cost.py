"""What the runs in a log cost: tokens and dollars summed by model, agent, day, run or tag.

The sums come from the step rows (what each step's usage recorded when it committed or failed),
so a window (``since``/``until``) takes the spending that happened in it, by the time each step
finished, not by when its run started. A fork's copies of its parent's steps (``incarnation`` 0:
no engine ran them) are left out: their tokens were spent, and are counted, in the parent.

SQL sums per run (and per 15-minute slot for ``day``); the groups are folded here, in Python,
because a run's tags are rows of their own (``tags.tags_of``, read once for the runs summed) and
a local day is a time zone's business: every zone in use is a whole number of 15-minute slots
from UTC, so a slot lies inside one local day in any of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from steplog.errors import UsageError
from steplog.log.db import LogConnection
from steplog.log.tags import tags_of

SLOT_SECONDS = 900
"""The time grain of ``by="day"``: a quarter hour (see the module docstring)."""

GROUPINGS = ("model", "agent", "day", "run")
"""``by`` may be one of these or ``tag:KEY``."""

NO_TAG = "(no tag)"
"""The group of runs without the tag ``cost --by tag:KEY`` groups by."""


@dataclass
class CostRow:
    """One group's spending. ``estimated_tokens`` of ``tokens`` were counted by steplog's estimate
    because the model reported no usage."""

    key: str
    tokens: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    estimated_tokens: int = 0
    cost_usd: float = 0.0
    steps: int = 0
    run_ids: set[str] = field(default_factory=set)
    agent: str = ""
    """The agent of the group's last run read (for a group of one run: its agent)."""
    model: str = ""
    """Likewise its model."""

    @property
    def runs(self) -> int:
        return len(self.run_ids)

    def as_json(self, by: str) -> dict[str, Any]:
        """The row as ``steplog cost --json`` prints it: the group's key under the name of the
        grouping (``model``, ``agent``, ``day``, ``run``, ``tag``) and as ``key``."""
        name = "tag" if by.startswith("tag:") else by
        return {
            name: self.key,
            "key": self.key,
            "tokens": self.tokens,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "tokens_cached": self.tokens_cached,
            "estimated_tokens": self.estimated_tokens,
            "cost_usd": round(self.cost_usd, 9),
            "runs": self.runs,
            "steps": self.steps,
        }


def check_grouping(by: str) -> str:
    """``by`` as given, or ``UsageError`` naming the choices."""
    if by in GROUPINGS or (by.startswith("tag:") and by[4:].strip()):
        return by
    raise UsageError(
        f"--by {by!r} is not a grouping; use one of {', '.join(GROUPINGS)} or tag:KEY "
        "(e.g. --by tag:team)"
    )


def _local_day(slot: int) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(slot * SLOT_SECONDS))


def cost_by(
    conn: LogConnection,
    by: str,
    *,
    since: float | None = None,
    until: float | None = None,
) -> list[CostRow]:
    """The spending of the steps that finished in ``[since, until)`` (epoch seconds; ``None``:
    unbounded), grouped ``by`` (``GROUPINGS`` or ``tag:KEY``), most expensive first (then most
    tokens, then by key). Steps with neither tokens nor cost are counted in ``steps`` too."""
    key_of = _key_of(by)
    return _fold(_spending(conn, since, until, tags=by.startswith("tag:")), key_of)


@dataclass(frozen=True)
class CostReport:
    """What the monitor's Costs view draws, from one read of the log: the groups' totals, each
    group's spending per local hour or day (``series``: ``(bucket start, key, tokens, cost)``,
    in time order), and the most expensive runs (``runs``: ``CostRow`` keyed by run id, with
    ``agent`` and ``model``)."""

    by: str
    bucket: str
    totals: list[CostRow]
    series: list[tuple[float, str, int, float]]
    runs: list[CostRow]


BUCKETS = ("hour", "day")


def read_costs(
    location: Any,
    by: str,
    *,
    since: float | None = None,
    until: float | None = None,
    bucket: str = "day",
    top_runs: int = 20,
) -> CostReport:
    """``CostReport`` of the log at ``location`` (opened read-only, closed again; nothing held
    between calls): spending ``by`` (``GROUPINGS`` but ``day``/``run``, or ``tag:KEY``) per local
    ``bucket`` (``hour`` or ``day``)."""
    from steplog.log.db import open_readonly

    key_of = _key_of(by)
    if bucket not in BUCKETS:
        raise UsageError(f"bucket {bucket!r}: use hour or day")
    conn = open_readonly(location, one_shot=True)
    try:
        rows = _spending(conn, since, until, tags=by.startswith("tag:"))
    finally:
        conn.close()
    per_bucket: dict[tuple[float, str], list[float]] = {}
    starts: dict[int, float] = {}
    for r in rows:
        slot = int(r[4])
        begin = starts.get(slot)
        if begin is None:
            begin = starts[slot] = _bucket_start(slot, bucket)
        cell = per_bucket.setdefault((begin, key_of(r)), [0.0, 0.0])
        cell[0] += int(r[6] or 0) + int(r[7] or 0)
        cell[1] += float(r[10] or 0.0)
    series = [(t, k, int(v[0]), v[1]) for (t, k), v in sorted(per_bucket.items())]
    runs = _fold(rows, _key_of("run"))[: max(0, top_runs)]
    return CostReport(by, bucket, _fold(rows, key_of), series, runs)


def _bucket_start(slot: int, bucket: str) -> float:
    moment = time.localtime(slot * SLOT_SECONDS)
    if bucket == "hour":
        fields = (*moment[:4], 0, 0, *moment[6:8], -1)
    else:
        fields = (*moment[:3], 0, 0, 0, *moment[6:8], -1)
    return time.mktime(time.struct_time(fields))


def _key_of(by: str) -> Callable[[tuple[Any, ...]], str]:
    check_grouping(by)
    if by == "model":
        return lambda r: r[2] or "offline"
    if by == "agent":
        return lambda r: str(r[1])
    if by == "run":
        return lambda r: str(r[0])
    if by == "day":
        return lambda r: _local_day(int(r[4]))
    tag_key = by[4:].strip()
    return lambda r: _tag_value(r[3], tag_key)


def _spending(
    conn: LogConnection, since: float | None, until: float | None, *, tags: bool
) -> list[tuple[Any, ...]]:
    """Per run and 15-minute slot: ``(run id, agent, model, tags, slot, steps, tokens in, tokens
    out, cached, estimated tokens, cost)``; ``tags`` read (else ``{}``) only when asked: a
    grouping by model or agent never needs them."""
    slot = f"CAST(ROUND(s.finished_at / {SLOT_SECONDS} - 0.5) AS INTEGER)"
    where = ["s.incarnation > 0", "s.finished_at IS NOT NULL"]
    args: list[Any] = []
    if since is not None:
        where.append("s.finished_at >= ?")
        args.append(since)
    if until is not None:
        where.append("s.finished_at < ?")
        args.append(until)
    sql = (
        f"SELECT s.run_id, r.agent, r.model, NULL, {slot} AS slot, COUNT(*),"
        " SUM(s.tokens_in), SUM(s.tokens_out), SUM(s.tokens_cached),"
        " SUM(s.tokens_estimated * (s.tokens_in + s.tokens_out)),"
        " SUM(s.cost_usd)"
        " FROM step s JOIN run r ON r.id = s.run_id"
        f" WHERE {' AND '.join(where)}"
        " GROUP BY s.run_id, r.agent, r.model, slot"
    )
    rows = list(conn.execute(sql, args).fetchall())
    if not tags:
        return [(*r[:3], {}, *r[4:]) for r in rows]
    of_run = tags_of(conn, (r[0] for r in rows))  # one read of the runs' tags, not a join a step
    return [(r[0], r[1], r[2], of_run[r[0]], *r[4:]) for r in rows]


def _tag_value(tags: dict[str, Any], key: str) -> str:
    value = tags.get(key)
    return NO_TAG if value is None else str(value)


def _fold(
    rows: Iterable[tuple[Any, ...]], key_of: Callable[[tuple[Any, ...]], str]
) -> list[CostRow]:
    groups: dict[str, CostRow] = {}
    for r in rows:
        key = key_of(r)
        g = groups.get(key)
        if g is None:
            g = groups[key] = CostRow(key)
        tin, tout, cached, est = (int(v or 0) for v in r[6:10])
        g.steps += int(r[5])
        g.tokens_in += tin
        g.tokens_out += tout
        g.tokens_cached += cached
        g.tokens += tin + tout
        g.estimated_tokens += est
        g.cost_usd += float(r[10] or 0.0)
        g.run_ids.add(r[0])
        g.agent, g.model = r[1], r[2] or "offline"
    return sorted(groups.values(), key=lambda g: (-g.cost_usd, -g.tokens, g.key))
