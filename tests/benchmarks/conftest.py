"""Benchmarks run one at a time in one process: the suite's ``-n 4`` (pyproject) would have them
time each other. This conftest is an initial one when ``tests/benchmarks`` is named on the command
line, so its hook runs before pytest-xdist turns ``-n`` into worker processes."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    if getattr(config.option, "numprocesses", None):
        config.option.numprocesses = 0
        config.option.dist = "no"
