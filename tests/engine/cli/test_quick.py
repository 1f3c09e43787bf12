"""A relaunch reaches its first step at the cost of little more than ``import steplog`` (issue 29):
a plain ``steplog run`` is read without click, and reads exactly as click reads it, and the
engine loads nothing a resume does not need."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import pytest

from helpers.engine import Engine
from helpers.paths import AGENTS
from steplog.cli import quick
from steplog.cli.commands import cli, run


def click_reading(argv: Sequence[str]) -> dict[str, Any] | None:
    """The keywords click passes ``steplog run``'s function for ``argv``, or ``None`` when click
    refuses the command line."""
    if not argv or argv[0] != "run":
        return None
    try:
        with cli.make_context("steplog", []) as parent:
            with run.make_context("run", list(argv[1:]), parent=parent) as ctx:
                return dict(ctx.params)
    except (click.ClickException, click.exceptions.Exit):
        return None


def plain_command_lines(tmp_path: Path) -> list[list[str]]:
    folder = tmp_path / "a folder"
    folder.mkdir()
    return [
        ["run", "flaky"],
        ["run", "--run-id", "r1", f"{AGENTS}:noop"],
        ["run", "demo", "--run-id", "a", "--run-id", "b"],
        ["run", "demo", "--run-id", ""],
        ["run", "demo", "--db", str(tmp_path / "log.db"), "--param", "n=1", "--param=m=x=y"],
        ["run", "demo", "--db=postgresql://me@127.0.0.1:5432/logs"],
        ["run", "demo", "--workdir", str(tmp_path / "not yet")],
        ["run", "demo", "--workdir", str(folder)],
        ["run", "demo", "--outbox", "http://127.0.0.1:1", "--killed-at", "1700000000.25"],
        [
            "run",
            "demo",
            *("--pace", "0.5", "--max-steps", "10", "--max-tokens", "1_000"),
            *("--max-seconds", "2.5", "--max-cost", "1e-3", "--max-retries", "0"),
            *("--model", "offline", "--base-url", "http://127.0.0.1:2", "--lease-seconds", "3"),
            *("--sync", "normal", "--exit-when-waiting", "--exit-when-waiting"),
        ],
    ]


def other_command_lines(tmp_path: Path) -> list[list[str]]:
    """Command lines ``quick`` leaves to click: refused ones, help, other commands."""
    a_file = tmp_path / "a file"
    a_file.write_text("")
    return [
        [],
        ["run"],
        ["run", "demo", "flaky"],
        ["run", "demo", "--help"],
        ["run", "demo", "--"],
        ["run", "demo", "--bogus"],
        ["run", "demo", "--run-id"],
        ["run", "demo", "--pace", "-1"],
        ["run", "demo", "--max-steps", "many"],
        ["run", "demo", "--max-steps", "0"],
        ["run", "demo", "--max-cost", "nan"],
        ["run", "demo", "--max-retries", "1.5"],
        ["run", "demo", "--sync", "FULL"],
        ["run", "demo", "--model", ""],
        ["run", "demo", "--model", " gpt"],
        ["run", "demo", "--db", "postgresql://"],
        ["run", "demo", "--workdir", str(a_file)],
        ["run", "demo", "--exit-when-waiting=1"],
        ["--version"],
        ["status", "r"],
        ["submit", "demo"],
    ]


def test_a_plain_run_reads_as_click_reads_it(tmp_path: Path) -> None:
    for argv in plain_command_lines(tmp_path):
        quick_reading = quick.parse(argv)
        assert quick_reading is not None, argv  # read without click
        assert quick_reading == click_reading(argv), argv


def test_what_quick_is_not_sure_of_goes_to_click(tmp_path: Path) -> None:
    """Every command line click refuses is click's to refuse; a command line ``quick`` reads but
    click would not is never among them (``--pace -1`` is read by click and refused later)."""
    for argv in other_command_lines(tmp_path):
        assert quick.parse(argv) is None, argv
    for argv in other_command_lines(tmp_path) + plain_command_lines(tmp_path):
        if click_reading(argv) is None:
            assert quick.parse(argv) is None, argv


def test_a_shell_asking_for_completions_gets_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(quick.COMPLETE_VAR, "bash_complete")
    assert quick.parse(["run", "demo"]) is None


HEAVY = {
    # The command line's parser, and what it brings.
    "click",
    "gettext",
    "locale",
    "platform",
    "uuid",
    # Other backends, adapters and tracing: loaded when asked for, never by a SQLite resume.
    "psycopg",
    "psycopg_pool",
    "psycopg2",
    "sqlalchemy",
    "sqlmodel",
    "opentelemetry",
    "httpx",
    "httpcore",
    "anyio",
    "openai",
    "anthropic",
    "pydantic",
    # OpenSSL (hashlib, secrets, ssl), event loops and processes a sync agent never uses.
    "hashlib",
    "_hashlib",
    "secrets",
    "ssl",
    "asyncio",
    "concurrent",
    "subprocess",
    "http",
    "email",
}
HEAVY_STEPLOG = (
    "steplog.cli.commands",
    "steplog.cli.options",
    "steplog.llm.prices",
    "steplog.llm.tickets",
    "steplog.llm.openai_compat",
    "steplog.llm.anthropic",
    "steplog.llm.anthropic_errors",
    "steplog.tracing.otel",
    "steplog.tracing.export",
    "steplog.log.pg",
    "steplog.log.pgschema",
    "steplog.log.pglisten",
    "steplog.runtime.arun",
    "steplog.control",
    "steplog.verdict",
    "steplog.killtest",
    "steplog.outbox",
    "steplog.agents",
)


def test_a_relaunch_after_sigkill_imports_only_what_a_resume_needs(
    engine: Engine, tmp_path: Path
) -> None:
    """The real thing: an engine SIGKILLed inside a step, ``steplog run`` again, and the modules
    loaded when the first new step runs. Whatever the interpreter loads on its own here (site
    hooks of the machine) is left out."""
    if not isinstance(engine.db, Path):
        pytest.skip("the PostgreSQL driver is what a resume on PostgreSQL needs")
    listing = tmp_path / "modules.json"
    args = (
        *("run", f"{AGENTS}:relaunched", "--run-id", "r", "--db", str(engine.db)),
        *("--param", f"listing={listing}"),
    )
    killed = engine.run(*args)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = engine.run(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert "steplog: resuming run r" in resumed.stderr
    assert resumed.stdout.strip() == "run r succeeded: 1"

    bare = subprocess.run(
        [sys.executable, "-c", "import sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        env=engine.env,
        check=True,
    )
    loaded = set(json.loads(listing.read_text())) - set(json.loads(bare.stdout))
    assert "steplog.runtime.engine" in loaded  # the listing is the engine's
    needless = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY_STEPLOG))
    assert needless == []
