"""The runs list's rows: which runs, in what order, a page at a time; Qt-free.

The list never holds every run of the log. It holds the pages read so far of one ``RunQuery``
(newest first: ``steplog.log.find``), and grows by a page when the person scrolls to its end.
Runs the log gains while it is shown are *admitted*: asked of the log by id under the same query,
and put at their place when that place is among the runs already read (a newer one on top; an
older one comes with its page). So opening a log of 100,000 runs reads one page, and a filter
reads one page of what it selects.

``RunsSource`` is the seam to the log (``LogRunsSource`` reads it through
``steplog.log.find``); a test may give another.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Protocol

from steplog.log.find import Page, RunQuery, read_page
from steplog.log.location import LogLocation
from steplog_gui.model.run_state import RunState

PAGE_SIZE = 100
"""Runs read at a time: a screenful or two."""

Key = tuple[float, str]
"""A run's place in the list, newest first: ``(created_at, run_id)`` descending."""


class RunsSource(Protocol):
    """Where pages come from."""

    def page(self, query: RunQuery, size: int) -> Page: ...

    def close(self) -> None: ...


class LogRunsSource:
    """Pages read from a log (a file or a database URL) through its read API, on one read-only
    connection opened at the first read and kept (no transaction is held between reads)."""

    def __init__(self, path: LogLocation) -> None:
        self.path = path
        self._conn: Any = None

    def page(self, query: RunQuery, size: int) -> Page:
        from steplog.log.db import open_readonly

        if self._conn is None:
            self._conn = open_readonly(self.path)
        try:
            return read_page(self._conn, query, size)
        except Exception:
            self.close()  # a log replaced or a server gone: the next read opens it afresh
            raise

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()


def key_of(run: dict[str, Any]) -> Key:
    return float(run["created_at"]), str(run["run_id"])


class RunsList:
    """The runs one query selects, as far as they are read."""

    def __init__(self, source: RunsSource, *, page_size: int = PAGE_SIZE) -> None:
        self.source = source
        self.page_size = page_size
        self.query = RunQuery()
        self.ids: list[str] = []
        """The runs read, newest first."""
        self.runs: dict[str, dict[str, Any]] = {}
        """Each one's ``steplog status --json`` object (with ``"tags"``) as last read."""
        self.more = False
        """Whether the log has runs of this query past the last one read."""
        self.problem = ""
        """Why the last read failed ('' when it did not): the list is then read again whole."""
        self._keys: list[tuple[float, str]] = []
        """Every read run's ``_neg(key)``, ascending (bisect-able), whatever order ``ids`` is
        in; in the order read (newest first) the two match row for row."""

    def __len__(self) -> int:
        return len(self.ids)

    # -- reading ---------------------------------------------------------------------------------

    def reload(self, query: RunQuery | None = None) -> None:
        """Forget what was read; read the first page of ``query`` (default: the same one)."""
        if query is not None:
            self.query = replace(query, limit=None, before=None)
        self.ids, self.runs, self._keys, self.more = [], {}, [], False
        try:
            page = self.source.page(self.query, self.page_size)
        except Exception as exc:  # a log not made yet, damaged, a server away: shown, retried
            self.problem = str(exc) or type(exc).__name__
            return
        self.problem = ""
        self._append(page)

    def load_more(self) -> int:
        """Read the next page and add it; how many runs it added (0: none left)."""
        before = len(self.ids)
        self.take(self.read_more())
        return len(self.ids) - before

    def read_more(self) -> Page:
        """The next page, read but not added (a view announces the rows first: ``take``)."""
        if not self.more or not self.ids:
            return Page()
        last = max(self.runs.values(), key=lambda r: _neg(key_of(r)))  # the oldest read
        return self.source.page(self.query.next_page(last), self.page_size)

    def take(self, page: Page) -> None:
        """Add ``page`` (from ``read_more``) after the runs read."""
        self._append(page)

    def _append(self, page: Page) -> None:
        for run in page.runs:
            rid = run["run_id"]
            if rid in self.runs:
                continue
            self.ids.append(rid)
            self.runs[rid] = run
            self._keys.append(_neg(key_of(run)))
        self.more = page.more

    # -- keeping current ---------------------------------------------------------------------------

    def admissible(self, run_ids: Iterable[str]) -> list[dict[str, Any]]:
        """Of ``run_ids`` (new to the log, or back in it), those the query selects whose place is
        among the runs read (an older one comes with its page), newest first: for ``insert``."""
        wanted = tuple(r for r in dict.fromkeys(run_ids) if r not in self.runs)
        found: list[dict[str, Any]] = []
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            found += self.source.page(replace(self.query, run_ids=chunk), len(chunk)).runs
        bottom = self._keys[-1] if self.more and self._keys else None
        return [
            run
            for run in sorted(found, key=key_of, reverse=True)
            if bottom is None or _neg(key_of(run)) <= bottom
        ]

    def place(self, run: dict[str, Any]) -> int:
        """The row ``run`` takes in the order read (newest first)."""
        return bisect.bisect_left(self._keys, _neg(key_of(run)))

    def insert(self, run: dict[str, Any]) -> int:
        """Add ``run`` at its ``place``; that row."""
        at = self.place(run)
        self._keys.insert(at, _neg(key_of(run)))
        self.ids.insert(at, run["run_id"])
        self.runs[run["run_id"]] = run
        return at

    def admit(self, run_ids: Iterable[str]) -> list[int]:
        """``insert`` every ``admissible`` one of ``run_ids``; the rows they took."""
        return [self.insert(run) for run in self.admissible(run_ids)]

    def refresh(self, run_ids: Iterable[str]) -> list[int]:
        """Read these runs again (their status changed); the rows that were refreshed."""
        ids = tuple(r for r in dict.fromkeys(run_ids) if r in self.runs)
        if not ids:
            return []
        page = self.source.page(replace(RunQuery(), run_ids=ids), len(ids))
        for run in page.runs:
            self.runs[run["run_id"]] = run
        index = {rid: i for i, rid in enumerate(self.ids)}
        return sorted(index[r["run_id"]] for r in page.runs)

    def remove(self, run_ids: Iterable[str]) -> list[int]:
        """Drop these runs (pruned); the rows they had, descending (remove in that order)."""
        gone = set(run_ids) & set(self.runs)
        rows = sorted((i for i, rid in enumerate(self.ids) if rid in gone), reverse=True)
        for i in rows:
            run = self.runs.pop(self.ids[i])
            del self.ids[i]
            # by value: a view may have put ``ids`` in another order (a sorted column)
            del self._keys[bisect.bisect_left(self._keys, _neg(key_of(run)))]
        return rows

    def oldest_read(self) -> float | None:
        """When the oldest run read was created (``None``: none read)."""
        return -self._keys[-1][0] if self._keys else None

    def rows_of(self, run_ids: Iterable[str]) -> list[int]:
        """The rows of these runs that are read, descending."""
        wanted = set(run_ids)
        return sorted((i for i, rid in enumerate(self.ids) if rid in wanted), reverse=True)

    def row_of(self, run_id: str) -> int:
        if run_id not in self.runs:
            return -1
        return self.ids.index(run_id)


def _neg(key: Key) -> tuple[float, str]:
    """A key that sorts ascending where ``key`` sorts descending (run ids compare as text, so
    each character is inverted)."""
    created, rid = key
    return -created, "".join(chr(0x10FFFF - ord(c)) for c in rid) + chr(0x10FFFF)


def summary_state(run: dict[str, Any]) -> RunState:
    """A ``RunState`` holding what a status object says of a run (no steps, no kills): the row
    of a run the monitor's tailer has not folded (yet), drawn as any other row."""
    budget = run.get("budget", {})
    parent = run.get("forked_from")
    worker = run.get("worker")
    used = {name: float(b.get("used") or 0) for name, b in budget.items()}
    return RunState(
        run_id=run["run_id"],
        agent=run["agent"],
        params=run.get("params") or {},
        model=run.get("model") or "offline",
        limits={name: b.get("limit") for name, b in budget.items()},
        status=run["status"],
        reason=run.get("reason"),
        created=float(run["created_at"]),
        finished=run.get("finished_at"),
        last_ts=float(run.get("updated_at") or run["created_at"]),
        usage={**used, "executions": float(run.get("step_executions", 0))},
        incarnation=int(run.get("incarnations", 0)),
        # an engine the log names but that is gone reads as none: "stopped", Resume continues it
        pid=run.get("lease_pid") if run.get("engine") not in ("none", "gone", None) else None,
        forked_from=(parent["run_id"], int(parent["at_step"])) if parent else None,
        waiting_for=run.get("waiting_for"),
        waiting_since=run.get("waiting_since"),
        worker=(worker["host"], int(worker["pid"])) if worker else None,
    )


__all__ = ["PAGE_SIZE", "LogRunsSource", "RunsList", "RunsSource", "key_of", "summary_state"]
