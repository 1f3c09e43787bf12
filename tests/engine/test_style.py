"""One formatter and one linter for the whole repository (STYLE 21): ruff, configured in
pyproject.toml (line length 100), finds nothing and would reformat nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_ruff_finds_nothing_to_fix() -> None:
    done = ruff("check", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr


def test_ruff_format_would_change_nothing() -> None:
    done = ruff("format", "--check", ".")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
