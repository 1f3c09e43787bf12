"""Finding runs (issue 32): ``RunQuery`` and ``find_runs`` on SQLite and PostgreSQL alike.

A log of generated finished runs (``helpers.many_runs``: which agent, status and tags run ``i``
has is a function of ``i``) is asked what a person asks: the newest page, one status or several,
one agent, a tag or two, a time window, a word, and page after page to the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from helpers.many_runs import T0, count_where, run_shape, write_runs
from steplog.errors import UsageError
from steplog.log.db import open_readonly
from steplog.log.find import RunQuery, count_runs, find_runs, query_from_options, runs_by_id
from steplog.log.runstatus import RunStatus
from steplog.log.tags import parse_tags, tags_of
from steplog.log.when import parse_when

N = 600

pytestmark = pytest.mark.backends("sqlite", "postgres")


@pytest.fixture
def conn(db: Any) -> Iterator[Any]:
    write_runs(db, N)
    c = open_readonly(db)
    try:
        yield c
    finally:
        c.close()


def ids(runs: list[dict[str, Any]]) -> list[str]:
    return [r["run_id"] for r in runs]


def test_the_newest_page_comes_first_with_its_tags(conn: Any) -> None:
    page = find_runs(conn, RunQuery(limit=50))
    assert ids(page) == [run_shape(i).run_id for i in range(N - 1, N - 51, -1)]
    assert page[0]["tags"] == run_shape(N - 1).tags
    assert page[0]["status"] == run_shape(N - 1).status


def test_paging_by_the_last_run_reads_every_run_once_in_order(conn: Any) -> None:
    q, seen = RunQuery(limit=97), []
    while page := find_runs(conn, q):
        seen += ids(page)
        q = q.next_page(page[-1])
    assert seen == [run_shape(i).run_id for i in reversed(range(N))]


def test_each_filter_narrows_to_exactly_the_runs_it_names(conn: Any) -> None:
    failed = find_runs(conn, RunQuery(statuses=(RunStatus.FAILED,)))
    assert len(failed) == count_where(N, status="failed")
    assert {r["status"] for r in failed} == {"failed"}

    two = RunQuery(statuses=(RunStatus.FAILED, RunStatus.GAVE_UP))
    assert count_runs(conn, two) == count_where(N, status="failed") + count_where(
        N, status="gave_up"
    )

    billing = find_runs(conn, RunQuery(agent="billing"))
    assert len(billing) == count_where(N, agent="billing")

    support = find_runs(conn, RunQuery(tags=(("team", "support"),)))
    assert len(support) == count_where(N, team="support")
    assert all(r["tags"]["team"] == "support" for r in support)


def test_filters_and_tags_together_are_anded(conn: Any) -> None:
    q = RunQuery(
        statuses=(RunStatus.FAILED,),
        agent="triage",
        tags=(("team", "ops"), ("batch", "0")),
    )
    expected = [
        run_shape(i).run_id
        for i in reversed(range(N))
        if run_shape(i).status == "failed"
        and run_shape(i).agent == "triage"
        and run_shape(i).tags == {"team": "ops", "batch": "0"}
    ]
    assert ids(find_runs(conn, q)) == expected
    assert find_runs(conn, RunQuery(tags=(("team", "nobody"),))) == []


def test_a_time_window_takes_runs_created_in_it(conn: Any) -> None:
    q = RunQuery(since=T0 + 100 * 60, until=T0 + 200 * 60)
    assert ids(find_runs(conn, q)) == [run_shape(i).run_id for i in range(199, 99, -1)]


def test_search_finds_text_in_id_agent_reason_and_tags_in_any_case(conn: Any) -> None:
    assert ids(find_runs(conn, RunQuery(search="RUN-000042"))) == ["run-000042"]
    assert len(find_runs(conn, RunQuery(search="Summar"))) == count_where(N, agent="summarise")
    timeouts = find_runs(conn, RunQuery(search="timeout talking"))
    assert len(timeouts) == count_where(N, status="failed")
    assert len(find_runs(conn, RunQuery(search="RESEARCH"))) == count_where(N, team="research")
    # LIKE's own wildcards are plain text here
    assert find_runs(conn, RunQuery(search="run_0")) == []
    assert find_runs(conn, RunQuery(search="%")) == []


def test_a_version_filter_on_a_log_without_versions_finds_nothing(conn: Any) -> None:
    assert find_runs(conn, RunQuery(version="2")) == []


def test_rows_by_id_and_tags_by_id_read_back_what_a_page_shows(conn: Any) -> None:
    wanted = [run_shape(i).run_id for i in (3, 5, 7)]
    got = runs_by_id(conn, [*wanted, "no-such-run"])
    assert sorted(got) == sorted(wanted)
    assert tags_of(conn, wanted)[wanted[0]] == run_shape(3).tags


def test_options_as_typed_become_a_query() -> None:
    q = query_from_options(
        status="failed, gave_up", tags=["team=a", "env=prod"], since="2h", limit=5
    )
    assert q.statuses == (RunStatus.FAILED, RunStatus.GAVE_UP)
    assert q.tags == (("team", "a"), ("env", "prod"))
    assert q.limit == 5 and q.since is not None and q.filtered
    assert not replace(q, statuses=(), tags=(), since=None).filtered


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"status": "done"}, "--status 'done' is not a run status"),
        ({"tags": ["team"]}, "--tag 'team' is malformed"),
        ({"tags": ["=x"]}, "--tag '=x' is malformed"),
        ({"since": "last tuesday"}, "--since 'last tuesday' is not a time"),
        ({"until": "3 fortnights"}, "--until '3 fortnights' is not a time"),
        ({"limit": 0}, "--limit 0 must be 1 or more"),
    ],
)
def test_bad_options_are_refused_with_the_fix(options: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError, match=words):
        query_from_options(**options)


def test_times_are_iso_8601_or_a_span_back_from_now() -> None:
    assert parse_when("2026-12-07T00:00:00Z") == 1796601600.0
    assert parse_when("2026-12-07T01:00:00+01:00") == 1796601600.0
    assert parse_when("90s", now=1000.0) == 910.0
    assert parse_when("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_when("3d", now=1e6) == 1e6 - 3 * 86400


def test_tags_are_checked_before_anything_is_written() -> None:
    assert parse_tags(["b=2", "a=1", "b=3"]) == {"a": "1", "b": "3"}
    with pytest.raises(UsageError, match="malformed"):
        parse_tags(["a b=1"])
