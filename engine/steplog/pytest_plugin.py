"""The kill test inside your own test suite (registered as a ``pytest11`` plugin named ``steplog``).

::

    def test_my_agent_survives_kills(killtest):
        report = killtest("my_pkg.agent:main", kills=10)
        assert report.passed, report.summary()

``killtest(agent_spec, *, kills=10, seed=0, sweep=False, params=None, tmp_dir=None, ...)`` runs the
reference, the storm (and the sweep) as real processes under the test's ``tmp_path`` and returns a
``steplog.killtest.report.Report``: ``.passed``, ``.verdict`` (a ``steplog.verdict.Verdict``),
``.summary()``. The agent must be importable by this test process (the engines it launches get the
same project paths).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from steplog.killtest.report import Report

KilltestFn = Callable[..., "Report"]


@pytest.fixture
def killtest(tmp_path: Path) -> KilltestFn:
    """A callable that kill-tests an agent spec and returns the report (see the module
    docstring)."""
    counter = itertools.count(1)

    def run(
        agent_spec: str,
        *,
        kills: int = 10,
        seed: int = 0,
        sweep: bool = False,
        params: Mapping[str, Any] | None = None,
        tmp_dir: Path | str | None = None,
        jobs: int = 2,
        time_limit: float = 300.0,
        sweep_points: tuple[str, ...] | None = None,
    ) -> Report:
        from steplog.killtest.harness import Options
        from steplog.killtest.harness import killtest as run_killtest

        base = Path(tmp_dir) if tmp_dir is not None else tmp_path / f"killtest-{next(counter)}"
        opts = Options(
            agent=agent_spec,
            kills=kills,
            seed=seed,
            sweep=sweep,
            params={k: str(v) for k, v in (params or {}).items()},
            jobs=jobs,
            time_limit=time_limit,
            sweep_points=sweep_points,
        )
        return run_killtest(opts, base)

    return run
