"""What a run left in its workdir, and how it differs from the reference run's: evidence for the
verdict.

Generic on purpose, so any agent can be kill-tested: every regular file is compared byte for byte,
except SQLite databases, whose bytes differ from run to run (page layout, free lists) even when
their content is the same: those are compared table by table, rows as multisets. SQLite's side
files (``-wal``, ``-shm``, ``-journal``) and atomic-write temp files are not outputs.

Those databases are the user's (``run.merge`` targets in the workdir), not the log: reading them
with ``sqlite3`` here (``_tables_of``) is no exception to "SQL only in ``steplog.log``", which is
about the engine's own log (``tests/engine/test_log_seam.py`` lists it as such).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SQLITE_HEADER = b"SQLite format 3\x00"
_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")

FindingKind = Literal["message", "file", "row"]


@dataclass(frozen=True)
class Finding:
    """One named difference from what should be: a duplicate, a missing or a different output.

    ``subject`` names the thing ("message for ticket T-1004", "replies.log", "helpdesk.db tickets:
    row id=T-1004"); ``detail`` says what is wrong with it ("delivered 2 times (keys a, b)").
    """

    kind: FindingKind
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "subject": self.subject, "detail": self.detail}


@dataclass(frozen=True)
class Outputs:
    """A workdir's outputs: plain files by relative path, and SQLite tables as row multisets."""

    files: dict[str, bytes] = field(default_factory=dict)
    tables: dict[str, Counter[str]] = field(default_factory=dict)
    """``"helpdesk.db tickets"`` → canonical JSON of each row (column → value) → count."""


def snapshot(workdir: Path) -> Outputs:
    """Read every output under ``workdir`` (an absent workdir has none)."""
    files: dict[str, bytes] = {}
    tables: dict[str, Counter[str]] = {}
    if not workdir.is_dir():
        return Outputs()
    for path in sorted(p for p in workdir.rglob("*") if p.is_file()):
        rel = path.relative_to(workdir).as_posix()
        if rel.endswith(_SIDE_SUFFIXES) or (
            path.name.startswith(".") and path.name.endswith(".tmp")
        ):
            continue
        data = path.read_bytes()
        if data.startswith(SQLITE_HEADER):
            for table, rows in _tables_of(path).items():
                tables[f"{rel} {table}"] = rows
        else:
            files[rel] = data
    return Outputs(files=files, tables=tables)


def _tables_of(path: Path) -> dict[str, Counter[str]]:
    """Each table's rows. Read from a copy: the original (and its WAL) is never touched."""
    import sqlite3  # the user's database, not the log (module docstring)

    with tempfile.TemporaryDirectory(prefix="steplog-killtest-") as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        wal = path.with_name(path.name + "-wal")
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        conn = sqlite3.connect(copy)
        try:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                    "'sqlite_%' ORDER BY name"
                )
            ]
            out: dict[str, Counter[str]] = {}
            for name in names:
                cur = conn.execute(f'SELECT * FROM "{name}"')
                cols = [d[0] for d in cur.description]
                out[name] = Counter(_canonical(dict(zip(cols, row, strict=True))) for row in cur)
            return out
        finally:
            conn.close()


def _canonical(row: dict[str, Any]) -> str:
    return json.dumps(
        {k: (v.hex() if isinstance(v, bytes) else v) for k, v in row.items()},
        sort_keys=True,
        ensure_ascii=False,
    )


def row_label(canonical: str) -> str:
    """``id=T-1004`` for a row with an id-like column, else its first column (or the whole row)."""
    row: dict[str, Any] = json.loads(canonical)
    for col in ("id", "key", "name"):
        if col in row:
            return f"{col}={row[col]}"
    if row:
        first = next(iter(row))
        return f"{first}={row[first]}"
    return canonical


@dataclass
class OutputDiff:
    """Outputs compared with the reference's, sorted into the verdict's three kinds of finding."""

    duplicates: list[Finding] = field(default_factory=list)
    missing: list[Finding] = field(default_factory=list)
    different: list[Finding] = field(default_factory=list)


def compare(reference: Outputs, actual: Outputs) -> OutputDiff:
    out = OutputDiff()
    for rel in sorted(reference.files.keys() | actual.files.keys()):
        want, got = reference.files.get(rel), actual.files.get(rel)
        if want is None:
            out.different.append(Finding("file", rel, "extra file, not in the reference"))
        elif got is None:
            out.missing.append(Finding("file", rel, "missing (the reference has it)"))
        elif got != want:
            _file_difference(rel, want, got, out)
    for table in sorted(reference.tables.keys() | actual.tables.keys()):
        want_rows, got_rows = reference.tables.get(table), actual.tables.get(table)
        if want_rows is None:
            out.different.append(Finding("row", table, "extra table, not in the reference"))
            continue
        if got_rows is None:
            out.missing.append(Finding("row", table, "table missing (the reference has it)"))
            continue
        for row in sorted(want_rows.keys() | got_rows.keys(), key=lambda r: (row_label(r), r)):
            w, g = want_rows.get(row, 0), got_rows.get(row, 0)
            subject = f"{table}: row {row_label(row)}"
            if g > w and w > 0:
                out.duplicates.append(
                    Finding("row", subject, f"appears {g} times (the reference has {w})")
                )
            elif g > w:
                out.different.append(
                    Finding("row", subject, f"extra row, not in the reference: {row}")
                )
            elif g < w:
                out.missing.append(
                    Finding("row", subject, f"appears {g} times (the reference has {w})")
                )
    return out


def _file_difference(rel: str, want: bytes, got: bytes, out: OutputDiff) -> None:
    """Name how a file differs; lines appended again (a re-done append) are duplicates."""
    try:
        want_lines, got_lines = (
            Counter(want.decode().splitlines()),
            Counter(got.decode().splitlines()),
        )
    except UnicodeDecodeError:
        out.different.append(
            Finding(
                "file", rel, f"differs byte for byte ({len(got)} bytes, the reference {len(want)})"
            )
        )
        return
    extra, lacking = got_lines - want_lines, want_lines - got_lines
    if extra and not lacking and not (got_lines.keys() - want_lines.keys()):
        n = sum(extra.values())
        sample = next(iter(extra))
        out.duplicates.append(
            Finding(
                "file",
                rel,
                f"{n} extra line{'s' if n != 1 else ''}, written again (e.g. {sample[:60]!r})",
            )
        )
    elif lacking and not extra:
        n = sum(lacking.values())
        out.missing.append(Finding("file", rel, f"{n} line{'s' if n != 1 else ''} missing"))
    else:
        out.different.append(
            Finding(
                "file", rel, f"differs byte for byte ({len(got)} bytes, the reference {len(want)})"
            )
        )
