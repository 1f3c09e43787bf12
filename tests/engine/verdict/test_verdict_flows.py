"""The verdict of every everyday flow, through the real CLI and real engines (CONTRACT "steplog
verdict").

PASS and FAIL come from kills only. A run never killed is UNTESTED once it ends, whatever its
outcome, retries, stops, waits or cancels; its outcome is reported beside the verdict, never
folded into it. Redone work is work repeated because an engine died without warning, counted per
kill from the log; a killed run that then fails for its own reasons can still PASS.

Each flow drives real processes against a real outbox and returns the run to judge; the table
below is the specification: flow, expected verdict, outcome, kills and redone steps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine, kill_group
from helpers.paths import AGENTS
from steplog.outbox import OutboxProcess, start_outbox

POSTER = f"{AGENTS}:poster"


@dataclass
class Case:
    engine: Engine
    outbox: OutboxProcess
    tmp: Path

    def args(self, run_id: str, *params: str) -> list[str]:
        return [
            "run",
            POSTER,
            "--run-id",
            run_id,
            "--db",
            str(self.engine.db),
            "--outbox",
            self.outbox.url,
            *(x for p in params for x in ("--param", p)),
        ]

    def start_until(self, run_id: str, steps: int, *params: str) -> subprocess.Popen[str]:
        """Start the run and return once ``steps`` steps have committed (the engine still going)."""
        proc = self.engine.start(*self.args(run_id, *params))
        deadline = time.monotonic() + 60
        while self.engine.committed(run_id) < steps:
            assert proc.poll() is None, f"the engine ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the engine made no progress"
            time.sleep(0.02)
        return proc


def verdict(engine: Engine, run_id: str, *extra: str) -> dict[str, Any]:
    done = engine.run("verdict", run_id, "--db", str(engine.db), "--json", *extra)
    assert done.returncode in (0, 1), done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    assert done.returncode == (1 if out["verdict"] == "FAIL" else 0)
    return out


def ended(proc: subprocess.Popen[str], code: int) -> None:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, (out, err)


# -- the flows ----------------------------------------------------------------------------------


def transient_failure_then_success(c: Case) -> str:
    done = c.engine.run(*c.args("r", f"hiccup={c.tmp / 'hiccup'}"))
    assert done.returncode == 0, done.stderr
    assert c.engine.status("r")["step_executions"] == c.engine.status("r")["steps_committed"] + 1
    return "r"


def failed_for_good(c: Case) -> str:
    assert c.engine.run(*c.args("r", f"fixed_when={c.tmp / 'fix'}")).returncode == 4
    return "r"


def failed_then_retried(c: Case) -> str:
    args = c.args("r", f"fixed_when={c.tmp / 'fix'}")
    assert c.engine.run(*args).returncode == 4
    assert verdict(c.engine, "r")["verdict"] == "UNTESTED"  # before the retry, too
    (c.tmp / "fix").touch()
    assert c.engine.run("retry", "r", "--db", str(c.engine.db)).returncode == 0
    done = c.engine.run(*args)
    assert done.returncode == 0, done.stderr
    return "r"


def cancelled_while_running(c: Case) -> str:
    proc = c.start_until("r", 2, "n=12", "pause=0.2")
    assert (
        c.engine.run("cancel", "r", "--db", str(c.engine.db), "--reason", "not needed").returncode
        == 0
    )
    ended(proc, 5)
    return "r"


def stopped_then_resumed(c: Case) -> str:
    proc = c.start_until("r", 2, "n=8", "pause=0.3")
    os.killpg(proc.pid, signal.SIGTERM)  # the monitor's Stop engine: a graceful stop, not a kill
    proc.communicate(timeout=60)
    mid = verdict(c.engine, "r")
    assert (mid["verdict"], mid["kills"], mid["redone"]) == ("RUNNING", 0, 0)
    assert mid["explanation"].startswith("stopped: no engine works on the run")
    done = c.engine.run(*c.args("r", "n=8", "pause=0.3"))
    assert done.returncode == 0, done.stderr
    return "r"


def waited_for_a_signal(c: Case) -> str:
    args = c.args("r", "wait=approve")
    first = c.engine.run(*args, "--exit-when-waiting")
    assert c.engine.status("r")["status"] == "waiting", first.stderr
    assert verdict(c.engine, "r")["verdict"] == "RUNNING"
    assert c.engine.run("signal", "r", "approve", "--db", str(c.engine.db)).returncode == 0
    done = c.engine.run(*args)
    assert done.returncode == 0, done.stderr
    return "r"


def killed_once_mid_step(c: Case) -> str:
    params = ("n=6", "pause=0.4")
    proc = c.start_until("r", 3, *params)
    time.sleep(0.1)  # inside the next step's pause
    at = kill_group(proc)
    done = c.engine.run(*c.args("r", *params), "--killed-at", str(at))
    assert done.returncode == 0, done.stderr
    return "r"


def killed_then_failed_for_its_own_reasons(c: Case) -> str:
    params = ("n=6", "pause=0.3", f"fixed_when={c.tmp / 'fix'}")
    proc = c.start_until("r", 2, *params)
    at = kill_group(proc)
    assert c.engine.run(*c.args("r", *params), "--killed-at", str(at)).returncode == 4
    return "r"


@dataclass(frozen=True)
class Expected:
    verdict: str
    outcome: str
    kills: int
    redone: tuple[int, ...]
    """Allowed numbers of redone steps (a kill may land between steps: then 0)."""


FLOWS: dict[str, tuple[Callable[[Case], str], Expected]] = {
    "a step failed transiently once, then succeeded": (
        transient_failure_then_success,
        Expected("UNTESTED", "succeeded", 0, (0,)),
    ),
    "a run failed for good": (failed_for_good, Expected("UNTESTED", "failed", 0, (0,))),
    "a failed run, retried": (failed_then_retried, Expected("UNTESTED", "succeeded", 0, (0,))),
    "a run cancelled while its engine ran": (
        cancelled_while_running,
        Expected("UNTESTED", "cancelled", 0, (0,)),
    ),
    "Stop engine (SIGTERM), then Resume": (
        stopped_then_resumed,
        Expected("UNTESTED", "succeeded", 0, (0,)),
    ),
    "a run that exited while waiting for a signal": (
        waited_for_a_signal,
        Expected("UNTESTED", "succeeded", 0, (0,)),
    ),
    "a run killed once mid-step": (killed_once_mid_step, Expected("PASS", "succeeded", 1, (0, 1))),
    "a killed run that then failed for its own reasons": (
        killed_then_failed_for_its_own_reasons,
        Expected("PASS", "failed", 1, (0, 1)),
    ),
}


@pytest.fixture
def case(engine: Engine, tmp_path: Path) -> Iterator[Case]:
    with start_outbox(tmp_path / "outbox" / "outbox.db") as ob:
        yield Case(engine, ob, tmp_path)


@pytest.mark.parametrize("flow", list(FLOWS))
def test_every_everyday_flow_gets_the_verdict_its_kills_earn(case: Case, flow: str) -> None:
    drive, want = FLOWS[flow]
    run_id = drive(case)
    got = verdict(case.engine, run_id)
    assert (got["verdict"], got["outcome"], got["kills"]) == (
        want.verdict,
        want.outcome,
        want.kills,
    ), got
    assert got["redone"] in want.redone, got
    assert got["duplicates"] == 0 and got["missing"] == 0, got
    assert not [c for c in got["checks"] if c["passed"] is False], got["checks"]
    if not want.kills:
        assert got["explanation"].startswith(
            f"not kill-tested: the run {want.outcome} without being killed"
        )
        redone = next(c for c in got["checks"] if c["name"] == "at most one redone step per kill")
        assert (
            redone["passed"] is None and "never killed" in redone["evidence"]
        )  # no "1 redone after 0 kills"
    text = case.engine.run("verdict", run_id, "--db", str(case.engine.db))
    assert text.stdout.startswith(f"{want.verdict}  {run_id} (outcome {want.outcome}): "), (
        text.stdout
    )


# -- evidence that cannot be read is "not checked", never FAIL ---------------------------------


class _Foreign(BaseHTTPRequestHandler):
    """Answers GET /messages in another format (deliveries without ids)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"deliveries": [{"key": "r:2"}], "attempts": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_an_outbox_that_is_gone_leaves_its_checks_unchecked_and_the_run_untested(
    engine: Engine, tmp_path: Path
) -> None:
    with start_outbox(tmp_path / "outbox" / "outbox.db") as ob:
        c = Case(engine, ob, tmp_path)
        assert engine.run(*c.args("r", "n=6")).returncode == 0
    for file in (tmp_path / "outbox").iterdir():
        file.unlink()  # no outbox answers at the recorded URL, and no file to read instead
    got = verdict(engine, "r")
    assert got["verdict"] == "UNTESTED" and got["outcome"] == "succeeded"
    checks = {ch["name"]: ch for ch in got["checks"]}
    assert checks["no duplicate effects"]["passed"] is None
    assert "not answering" in checks["no duplicate effects"]["evidence"]
    assert not [ch for ch in got["checks"] if ch["passed"] is False]


def test_an_outbox_answering_in_another_format_is_not_evidence_of_loss(
    engine: Engine, tmp_path: Path
) -> None:
    with start_outbox(tmp_path / "outbox" / "outbox.db") as ob:
        c = Case(engine, ob, tmp_path)
        proc = c.start_until("r", 2, "n=6", "pause=0.3")
        at = kill_group(proc)
        assert engine.run(*c.args("r", "n=6", "pause=0.3"), "--killed-at", str(at)).returncode == 0
        url = ob.url
    server = ThreadingHTTPServer(("127.0.0.1", int(url.rsplit(":", 1)[1])), _Foreign)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        got = verdict(engine, "r")
    finally:
        server.shutdown()
        server.server_close()
    assert got["verdict"] == "UNTESTED", (
        got
    )  # killed, but its deliveries cannot be read: not proven
    assert not [ch for ch in got["checks"] if ch["passed"] is False], got["checks"]
    assert "not with an outbox's ledger" in got["explanation"]


def test_an_outbox_holding_none_of_the_runs_messages_is_another_outbox_not_a_loss(
    engine: Engine, tmp_path: Path
) -> None:
    with start_outbox(tmp_path / "outbox" / "outbox.db") as ob:
        c = Case(engine, ob, tmp_path)
        proc = c.start_until("r", 2, "n=6", "pause=0.3")
        at = kill_group(proc)
        assert engine.run(*c.args("r", "n=6", "pause=0.3"), "--killed-at", str(at)).returncode == 0
    with start_outbox(tmp_path / "other" / "outbox.db") as other:  # a new, empty outbox
        got = verdict(engine, "r", "--outbox", other.url)
    assert got["verdict"] == "UNTESTED", got
    assert not [ch for ch in got["checks"] if ch["passed"] is False], got["checks"]
    assert "holds none of this run's messages" in got["explanation"]


def test_a_step_stopped_again_and_again_is_no_poison_pill_and_nothing_redone(
    engine: Engine,
) -> None:
    """Stop engine three times inside one long step, with a limit of one engine death per step:
    a stop is not a death, so the run resumes each time and finishes; nothing is redone."""
    args = [
        "run",
        f"{AGENTS}:patient",
        "--run-id",
        "p",
        "--db",
        str(engine.db),
        "--param",
        "n=2",
        "--param",
        "pause=3",
    ]
    for _ in range(3):
        proc = engine.start(*args)
        deadline = time.monotonic() + 60
        while engine.events("step_started", 1) < 1 + _:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        time.sleep(0.2)  # inside the step's body
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=60)
    done = engine.run(*args)
    assert done.returncode == 0, done.stderr
    got = verdict(engine, "p")
    assert (got["verdict"], got["outcome"], got["redone"]) == ("UNTESTED", "succeeded", 0)
    assert "3 run again after a stop or cancel: not redone work" in got["explanation"]
