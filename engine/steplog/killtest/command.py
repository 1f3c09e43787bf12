"""``steplog killtest``: run the harness with a progress line, then print, write and exit."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from steplog.killtest.harness import Options, killtest
from steplog.killtest.junit import write_junit
from steplog.log.location import LogLocation

if TYPE_CHECKING:
    from steplog.killtest.workers import WorkerStormResult

EXIT_PASS, EXIT_FAIL = 0, 1


class ProgressLine:
    """A ``\\r`` progress bar on a terminal; a plain line every so often when not a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._last_plain = 0.0
        self._shown = False
        self._seen: tuple[str, int] | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if (stage, done) == self._seen:
            return
        self._seen = (stage, done)
        if self.tty:
            width = 30
            filled = width * done // total if total else width
            self.stream.write(
                f"\r{stage:<9} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
            )
            self._shown = True
        elif done in (0, total) or time.monotonic() - self._last_plain > 5:
            self.stream.write(f"{stage}: {done}/{total}\n")
            self._last_plain = time.monotonic()
        self.stream.flush()

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()


def run_command(
    agent: str,
    *,
    kills: int,
    seed: int,
    sweep: bool,
    as_json: bool,
    junit: Path | None,
    params: dict[str, str],
    jobs: int,
    time_limit: float,
    keep: Path | None,
    db: LogLocation | None = None,
) -> int:
    opts = Options(
        agent=agent,
        kills=kills,
        seed=seed,
        sweep=sweep,
        params=params,
        jobs=jobs,
        time_limit=time_limit,
        db=db,
    )
    progress = ProgressLine(sys.stderr)
    try:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            report = killtest(opts, keep, progress)
        else:
            with tempfile.TemporaryDirectory(prefix="steplog-killtest-") as tmp:
                report = killtest(opts, Path(tmp), progress)
    finally:
        progress.close()
    if as_json:
        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        print(report.summary())
    if junit is not None:
        write_junit(report, junit)
    return EXIT_PASS if report.passed else EXIT_FAIL


def run_worker_storm_command(
    agent: str,
    *,
    workers: int,
    runs: int,
    kills: int,
    seed: int,
    as_json: bool,
    params: dict[str, str],
    time_limit: float,
    keep: Path | None,
    db: LogLocation | None = None,
) -> int:
    """``steplog killtest AGENT --workers N``: the worker storm (``killtest.workers``)."""
    from dataclasses import asdict

    from steplog.killtest.workers import worker_storm

    def storm(root: Path) -> WorkerStormResult:
        return worker_storm(
            root,
            agent=agent,
            runs=runs,
            workers=workers,
            kills=kills,
            seed=seed,
            params=params,
            time_limit=time_limit,
            db=db,
        )

    if keep is not None:
        result = storm(keep)
    else:
        with tempfile.TemporaryDirectory(prefix="steplog-killtest-workers-") as tmp:
            result = storm(Path(tmp))
    if as_json:
        print(json.dumps({"passed": result.passed, **asdict(result)}, ensure_ascii=False))
    else:
        print(result.summary())
    return EXIT_PASS if result.passed else EXIT_FAIL


def run_upgrade_command(
    agent: str,
    new: str,
    *,
    as_json: bool,
    params: dict[str, str],
    time_limit: float,
    keep: Path | None,
) -> int:
    """``steplog killtest AGENT --upgrade NEW_AGENT`` (``killtest.upgrade``): exit 0 when the new
    code resumes every killed run of the old, 1 when it refuses one."""
    from steplog.killtest.upgrade import upgrade_test

    def test(root: Path) -> int:
        report = upgrade_test(agent, new, root, params=params, time_limit=time_limit)
        print(json.dumps(report.to_json(), ensure_ascii=False) if as_json else report.summary())
        return EXIT_PASS if report.passed else EXIT_FAIL

    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        return test(keep)
    with tempfile.TemporaryDirectory(prefix="steplog-killtest-upgrade-") as tmp:
        return test(Path(tmp))
