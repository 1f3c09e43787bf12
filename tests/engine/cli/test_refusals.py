"""Bad input gets one line, not a traceback (issue 27): exit 2, a line on stderr that names the
problem and the way out, and nothing written: no log created or changed, no file left behind.

Every case runs the real command line in its own process, on real logs, files and sockets.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine
from helpers.logs import log_bytes
from helpers.paths import AGENTS
from steplog.outbox import start_outbox

NOOP = f"{AGENTS}:noop"


def refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one line of a refusal (exit 2), checked to hold ``words``."""
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steplog: "), done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def finished_run(engine: Engine, run_id: str = "r", n: int = 5) -> None:
    done = engine.run("run", NOOP, "--run-id", run_id, "--db", str(engine.db), "--param", f"n={n}")
    assert done.returncode == 0, done.stderr


# -- fork ------------------------------------------------------------------------------------


@pytest.mark.backends("sqlite", "postgres")
@pytest.mark.parametrize("at_step", ["99999999999999999999", str(2**63), str(2**63 - 1), "7"])
def test_fork_at_a_step_past_any_the_log_can_hold_is_refused(engine: Engine, at_step: str) -> None:
    """``--at-step 99999999999999999999`` was an OverflowError from SQLite; now the same line as
    any step beyond the run's committed ones."""
    finished_run(engine)
    before = log_bytes(engine.db)

    done = engine.run("fork", "r", "--at-step", at_step, "--db", str(engine.db), "--no-start")

    refused(done, "run r has committed steps 1..5 only", "from 1 to 6")
    assert log_bytes(engine.db) == before


def test_a_fork_workdir_is_private_like_every_other_workdir(engine: Engine, tmp_path: Path) -> None:
    """A workdir the person made 0755 for the parent was copied with its mode, and the folders
    made for the fork's were 0755 too; now all are 0700, as ``run`` makes them."""
    parent = tmp_path / "parent-wd"
    parent.mkdir(mode=0o755)
    parent.chmod(0o755)
    done = engine.run(
        "run",
        NOOP,
        "--run-id",
        "p",
        "--db",
        str(engine.db),
        "--param",
        "n=3",
        "--workdir",
        str(parent),
    )
    assert done.returncode == 0, done.stderr
    deep = tmp_path / "new" / "deeper" / "fork-wd"

    for run_id, extra in (("f1", []), ("f2", ["--workdir", str(deep)])):
        done = engine.run(
            "fork", "p", "--at-step", "2", "--run-id", run_id, "--db", str(engine.db), *extra
        )
        assert done.returncode == 0, done.stderr

    default = engine.db.parent / "runs" / "f1"
    for folder in (default, default.parent, deep, deep.parent, deep.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE(parent.stat().st_mode) == 0o755, "the parent's own folder is left as it was"


# -- malformed PostgreSQL URLs, on every command that takes --db -------------------------------


BAD_URLS = {
    "postgresql://": "names no database",
    "postgresql://u@h:notaport/db": "port is not a number",
    "postgresql://[::1": "not a URL",
    "postgresql://u:s3cret@[::1/db": "not a URL",
    "postgresql://u@h:99999/db": "out of range",
    "postgresql://u@h:0/db": "out of range",
    "postgresql://u:s3cret@h/%zz": "%XX",
    "postgresql://u@h/a%FFb": "not UTF-8",
    "postgresql://u@h/a%00b": "NUL",
    "postgresql://u@h/a b": "space",
    "postgresql://u:s3cret/db": "port is not a number",
}
TAKES_DB = {
    "gui": ["gui"],
    "demo": ["demo"],
    "run": ["run", NOOP],
    "status": ["status", "r"],
    "runs": ["runs"],
    "verdict": ["verdict", "r"],
    "check": ["check"],
    "cancel": ["cancel", "r"],
    "retry": ["retry", "r"],
    "fork": ["fork", "r", "--at-step", "1"],
    "signal": ["signal", "r", "go"],
    "submit": ["submit", NOOP],
    "worker": ["worker"],
    "prune": ["prune", "--status", "succeeded"],
    "export": ["export", "r"],
    "import": ["import", "x.jsonl"],
    "killtest": ["killtest", NOOP, "--kills", "0"],
}


def _in_empty_folder(
    engine: Engine, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> Any:
    return subprocess.run(
        engine.argv(*args),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        env={**engine.env, **(env or {})},
    )


def test_a_malformed_postgresql_url_is_named_in_one_line(engine: Engine, tmp_path: Path) -> None:
    """``postgresql://[::1`` was a ValueError traceback from ``urlsplit``, ``%FF`` one from
    psycopg; a port of 99999 was "not a number". Each is named now, the password never shown,
    and nothing is written (the command runs in an empty folder, which stays empty)."""
    for url, words in BAD_URLS.items():
        line = refused(_in_empty_folder(engine, tmp_path, "runs", "--db", url), words)
        assert "s3cret" not in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("command", list(TAKES_DB))
def test_every_command_that_takes_a_log_refuses_a_malformed_url_in_one_line(
    engine: Engine, tmp_path: Path, command: str
) -> None:
    """The same on every command with ``--db``, and from ``$STEPLOG_DB``."""
    for url in (
        "postgresql://u:s3cret@[::1/db",
        "postgresql://u@h/a%FFb",
        "postgresql://u@h:99999/db",
    ):
        done = _in_empty_folder(engine, tmp_path, *TAKES_DB[command], "--db", url)
        line = refused(done, BAD_URLS[url])
        assert "s3cret" not in line, line
    # The monitor reads $STEPLOG_DB itself, after the exec; the kill test gives each run a log
    # of its own.
    if command not in ("gui", "demo", "killtest"):
        from_env = _in_empty_folder(
            engine,
            tmp_path,
            *TAKES_DB[command],
            env={"STEPLOG_DB": "postgresql://u:s3cret@[::1/db"},
        )
        assert "s3cret" not in refused(from_env, "not a URL")
    assert list(tmp_path.iterdir()) == []


# -- export -o ---------------------------------------------------------------------------------


def test_export_never_overwrites_a_file_unless_forced(engine: Engine, tmp_path: Path) -> None:
    finished_run(engine)
    target = tmp_path / "r.jsonl"
    target.write_text("precious\n")

    done = engine.run("export", "r", "--db", str(engine.db), "-o", str(target))

    refused(done, f"{target} exists", "--force")
    assert target.read_text() == "precious\n" and done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "r.jsonl"], "no temporary file"
    forced = engine.run("export", "r", "--db", str(engine.db), "-o", str(target), "--force")
    assert forced.returncode == 0 and forced.stderr == "", forced.stderr
    end = json.loads(target.read_text().splitlines()[-1])
    assert (end["end"], end["rows"]["run"], end["rows"]["step"]) == ("r", 1, 5)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_export_and_archive_onto_a_full_disk_leave_no_file_and_change_nothing(
    engine: Engine, tmp_path: Path, tiny_fs: Path
) -> None:  # noqa: F811 - the fixture
    finished_run(engine, n=3000)  # about 1.5 MB of JSON lines: more than the 256 KiB disk holds
    before = log_bytes(engine.db)

    exported = engine.run("export", "r", "--db", str(engine.db), "-o", str(tiny_fs / "r.jsonl"))
    archived = engine.run(
        "prune", "r", "--db", str(engine.db), "--archive", str(tiny_fs / "r.jsonl")
    )

    for done in (exported, archived):
        refused(done, "cannot write", "No space left on device", "nothing of it was left")
    assert list(tiny_fs.iterdir()) == [], "no partial file and no temporary one"
    assert engine.status("r")["status"] == "succeeded", "the run was not pruned without its archive"
    assert log_bytes(engine.db) == before


# -- numbers that are not ----------------------------------------------------------------------


NOT_NUMBERS = [
    ("worker", "--poll", "nan"),
    ("worker", "--poll", "inf"),
    ("worker", "--poll", "-1"),
    ("worker", "--poll", "0"),
    ("worker", "--grace", "nan"),
    ("worker", "--grace", "-1"),
    ("worker", "--lease-seconds", "nan"),
    ("worker", "--lease-seconds", "0"),
    ("cancel", "--wait", "nan"),
    ("cancel", "--wait", "-1"),
    ("outbox", "--delay", "nan"),
    ("outbox", "--delay", "inf"),
    ("killtest", "--time-limit", "nan"),
    ("killtest", "--time-limit", "inf"),
]


@pytest.mark.parametrize(("command", "option", "value"), NOT_NUMBERS)
def test_a_number_of_seconds_that_is_nan_infinite_or_out_of_range_is_refused(
    engine: Engine, tmp_path: Path, command: str, option: str, value: str
) -> None:
    """``worker --poll nan`` passed click's range check (every comparison with NaN is false) and
    crashed in ``time.sleep``; ``cancel --wait nan`` would wait for ever."""
    args = {
        "worker": ["worker", "--db", str(engine.db)],
        "cancel": ["cancel", "r", "--db", str(engine.db)],
        "outbox": ["outbox", "--port", "0", "--db", str(tmp_path / "outbox.db")],
        "killtest": ["killtest", NOOP, "--kills", "0", "--keep", str(tmp_path / "keep")],
    }[command]

    done = engine.run(*args, option, value, timeout=60)

    refused(done, option)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no log, outbox or kill test folder"


# -- --model '' --------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["", "  ", " gpt-4o-mini", "gpt\n4"])
def test_a_model_name_that_names_no_model_is_refused_before_anything_runs(
    engine: Engine, model: str
) -> None:
    """``--model ''`` was accepted and the run failed at its first model step; ``run``,
    ``submit``, ``retry`` and ``fork`` refuse it now, with the log as it was."""
    db = str(engine.db)
    for args in (["run", NOOP, "--run-id", "new"], ["submit", NOOP]):
        refused(engine.run(*args, "--db", db, "--model", model), "--model")
        assert not engine.db.exists(), "no log was created"
    witness = engine.db.parent / "w.db"
    done = engine.run(
        "run",
        f"{AGENTS}:witness",
        "--run-id",
        "w",
        "--db",
        db,
        "--param",
        "n=2",
        "--param",
        f"witness={witness}",
    )
    assert done.returncode == 0, done.stderr
    before = log_bytes(engine.db)
    for args in (["retry", "w"], ["fork", "w", "--at-step", "2", "--run-id", "f"]):
        refused(engine.run(*args, "--db", db, "--model", model), "--model")
    assert log_bytes(engine.db) == before


# -- import ------------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["../../etc", "a b", "", "-x", "x" * 101, "é", None, 7])
def test_an_archive_whose_run_id_steplog_would_never_accept_is_refused(
    engine: Engine, tmp_path: Path, run_id: Any
) -> None:
    """Run ids have a documented charset (``run --run-id``: letters, digits, '-', '_', '.',
    at most 100, starting with a letter or digit); an edited archive carried any id in."""
    finished_run(engine)
    exported = engine.run("export", "r", "--db", str(engine.db)).stdout
    lines = [json.loads(line) for line in exported.splitlines()]
    for obj in lines:
        if "steplog_export" in obj:
            obj["run_id"] = run_id
        elif "end" in obj:
            obj["end"] = run_id
        else:
            obj["row"]["id" if obj["table"] == "run" else "run_id"] = run_id
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(obj) + "\n" for obj in lines))
    other = tmp_path / "other" / "steplog.db"

    refused(engine.run("import", str(edited), "--db", str(other)), "is not a run id", "line 1")
    assert not other.exists() and not other.parent.exists()


# -- prune -------------------------------------------------------------------------------------


def test_prune_of_a_log_that_does_not_exist_creates_none(engine: Engine, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "steplog.db"
    for extra in ([], ["--dry-run"], ["--reclaim", "vacuum"]):
        refused(
            engine.run("prune", "--db", str(missing), "--status", "succeeded", *extra),
            f"no log at {missing}",
        )
    assert not missing.parent.exists()


# -- the outbox and a body cut short -----------------------------------------------------------


def _post_raw(port: int, body: bytes, *, length: int, then: str) -> tuple[bytes, float]:
    """POST ``body`` with a Content-Length of ``length``; ``then``: "half-close" (shut our
    sending side) or "stall" (send nothing more, keep the socket open). The answer and how long
    it took."""
    head = (
        f"POST /messages HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: k-{then}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head + body)
        if then == "half-close":
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer, time.monotonic() - started


@pytest.mark.parametrize("then", ["half-close", "stall"])
def test_a_body_shorter_than_its_content_length_is_refused_and_delivers_nothing(
    tmp_path: Path, then: str
) -> None:
    """``{"ticket_id": "T-1"}`` announced as 64 bytes and then cut: a JSON object all the same,
    and it was delivered (201). Now a closed body is a 400 and a stalled one a 408 after the
    read timeout (not a hang, not a 500), nothing is delivered, the attempt is on the ledger, and
    the same key with the whole body is then delivered once."""
    body = b'{"ticket_id": "T-1"}'
    with start_outbox(tmp_path / "outbox.db") as outbox:
        answer, took = _post_raw(outbox.port, body, length=64, then=then)

        status = int(answer.split(b" ", 2)[1])
        assert status == (400 if then == "half-close" else 408), answer
        error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        assert "nothing was delivered" in error["message"], error
        assert took < 30, "answered after the read timeout, not never"
        ledger = outbox.ledger()
        assert ledger.deliveries == ()
        assert [(a.status, a.outcome) for a in ledger.attempts] == [(status, "rejected")]

        import httpx

        whole = httpx.post(
            f"{outbox.url}/messages",
            content=body,
            timeout=30,
            headers={"Idempotency-Key": f"k-{then}", "Content-Type": "application/json"},
        )
        assert whole.status_code == 201, whole.text
        assert [d.body for d in outbox.ledger().deliveries] == [{"ticket_id": "T-1"}]
