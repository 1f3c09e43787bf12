"""A run's tags: ``--tag KEY=VALUE`` on ``steplog run``/``submit``, ``tags={...}`` in Python.

Tags are text labels a person filters and groups runs by (``steplog runs --tag team=support``,
``steplog cost --by tag:team``). They are written once, with the run's row, and never change;
a fork carries its parent's, an export and an import carry them as rows of ``run_tag`` (one per
key, ``schema`` v10 says why not a JSON column).

Readers: ``tags_of(conn, run_ids)`` (a page of runs at once) and ``TAG_TABLE``/``TAG_COLUMNS``
for a grouping query written elsewhere in the log package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from steplog.errors import UsageError

if TYPE_CHECKING:
    from steplog.log.connection import LogConnection

TAG_TABLE = "run_tag"
"""The table of tags: ``(run_id, key, value)``, primary key ``(run_id, key)``."""

MAX_KEY = 64
MAX_VALUE = 256
_BAD_KEY_CHARS = set("=,\n\r\t ")


def tag_problem(key: Any, value: Any) -> str | None:
    """What is wrong with tag ``key=value`` (``None``: nothing)."""
    if not isinstance(key, str) or not key:
        return "a tag key must be non-empty text"
    if len(key) > MAX_KEY or any(c in _BAD_KEY_CHARS for c in key):
        return f"tag key {key!r} must be at most {MAX_KEY} characters without spaces, '=' or ','"
    if not isinstance(value, str):
        return f"tag {key!r} has a {type(value).__name__} value; a tag value is text"
    if len(value) > MAX_VALUE or "\n" in value or "\r" in value:
        return f"tag {key}'s value must be one line of at most {MAX_VALUE} characters"
    return None


def check_tags(tags: Mapping[str, Any] | None) -> dict[str, str]:
    """``tags`` as stored (sorted by key), or ``UsageError`` naming the first bad one."""
    if not tags:
        return {}
    if not isinstance(tags, Mapping):
        raise UsageError(f"tags must be a dict of text to text, not {type(tags).__name__}")
    for key, value in tags.items():
        problem = tag_problem(key, value)
        if problem:
            raise UsageError(f"{problem}; write tags as {{'KEY': 'VALUE'}} or --tag KEY=VALUE")
    return {k: tags[k] for k in sorted(tags)}


def parse_tag(text: str, *, option: str = "--tag") -> tuple[str, str]:
    """``KEY=VALUE`` as ``(key, value)``; ``UsageError`` with the fix when it is not one."""
    key, sep, value = text.partition("=")
    key = key.strip()
    problem = "it has no '='" if not sep else tag_problem(key, value)
    if problem:
        raise UsageError(f"{option} {text!r} is malformed ({problem}); write {option} KEY=VALUE")
    return key, value


def parse_tags(values: Iterable[str], *, option: str = "--tag") -> dict[str, str]:
    """Repeated ``--tag KEY=VALUE`` options as one dict (a key given twice: the last wins)."""
    out: dict[str, str] = {}
    for text in values:
        key, value = parse_tag(text, option=option)
        out[key] = value
    return check_tags(out)


# -- the rows ----------------------------------------------------------------------------------


def has_tags_table(conn: LogConnection) -> bool:
    """Whether the log has tags at all (a log before schema 10, read without migrating, has not)."""
    from steplog.log.db import has_column

    return has_column(conn, TAG_TABLE, "run_id")


def write_tags(conn: LogConnection, run_id: str, tags: Mapping[str, str]) -> None:
    """Record ``tags`` of a new run (inside the caller's transaction)."""
    if not tags:
        return
    marks = ", ".join("(?, ?, ?)" for _ in tags)
    conn.execute(
        f"INSERT INTO {TAG_TABLE} (run_id, key, value) VALUES {marks}",
        tuple(v for k, val in tags.items() for v in (run_id, k, val)),
    )


def copy_tags(conn: LogConnection, from_run: str, to_run: str) -> None:
    """Give run ``to_run`` the tags of ``from_run`` (a fork; inside the caller's transaction)."""
    conn.execute(
        f"INSERT INTO {TAG_TABLE} (run_id, key, value) SELECT ?, key, value FROM {TAG_TABLE} "
        "WHERE run_id = ?",
        (to_run, from_run),
    )


_CHUNK = 500
"""Run ids bound per query (SQLite's default limit of bound values is well above it)."""


def tags_of(conn: LogConnection, run_ids: Iterable[str]) -> dict[str, dict[str, str]]:
    """The tags of each of ``run_ids`` (``{}`` for a run without any), keys sorted."""
    ids = list(dict.fromkeys(run_ids))
    out: dict[str, dict[str, str]] = {rid: {} for rid in ids}
    if not ids or not has_tags_table(conn):
        return out
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        marks = ", ".join("?" for _ in chunk)
        for rid, key, value in conn.execute(
            f"SELECT run_id, key, value FROM {TAG_TABLE} WHERE run_id IN ({marks}) "
            "ORDER BY run_id, key",
            chunk,
        ):
            out[rid][key] = value
    return out


__all__ = [
    "TAG_TABLE",
    "check_tags",
    "copy_tags",
    "has_tags_table",
    "parse_tag",
    "parse_tags",
    "tag_problem",
    "tags_of",
    "write_tags",
]
