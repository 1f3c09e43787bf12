"""Where things are: the repository, the tests, and the agents the tests run by file path."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
AGENTS = TESTS / "helpers" / "agents_for_tests.py"
"""The test agents, named by path (``f"{AGENTS}:witness"``) as a user names their own file."""
TIME_AGENTS = TESTS / "helpers" / "agents_time.py"
"""The time and messages agents (``f"{TIME_AGENTS}:sleeper"``)."""
