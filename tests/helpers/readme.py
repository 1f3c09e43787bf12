"""The README's shell blocks, run as printed: line by line with the outbox in the background
(``run_shell_block``), or whole in ``bash`` with this checkout's ``steplog`` on ``PATH``
(``run_in_bash``)."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

from helpers.engine import Engine
from helpers.paths import ROOT

README = ROOT / "README.md"


def run_shell_block(
    engine: Engine, tmp_path: Path, block: str
) -> list[subprocess.CompletedProcess[str]]:
    """Run a README shell block line by line in ``tmp_path``: its first line (``steplog outbox
    --port 8000 &``) in the background, on a free port if 8000 is taken; the outputs of the rest."""
    lines = [ln for ln in block.splitlines() if ln.strip()]
    port = "8000"
    with (
        socket.socket() as probe
    ):  # port 8000 may be taken on this machine: the same commands on a free one
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                port = str(free.getsockname()[1])
    env = {**engine.env, "STEPLOG_DB": str(engine.db)}
    assert lines[0].startswith("steplog outbox") and lines[0].endswith("&")
    background = subprocess.Popen(
        engine.argv(*shlex.split(lines[0].rstrip("&").replace("8000", port))[1:]),
        cwd=tmp_path,
        env={**env, "XDG_DATA_HOME": str(tmp_path / "xdg")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert background.stdout is not None
        said = background.stdout.readline()
        assert f"listening on http://127.0.0.1:{port}" in said, said  # it prints its URL
        outputs = []
        for line in lines[1:]:
            argv = shlex.split(line.replace("8000", port))
            assert argv[0] == "steplog"
            outputs.append(
                subprocess.run(
                    engine.argv(*argv[1:]),
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            )
        return outputs
    finally:
        background.terminate()
        background.wait(timeout=10)
        for pipe in (background.stdout, background.stderr):
            if pipe:
                pipe.close()


def run_in_bash(engine: Engine, tmp_path: Path, block: str) -> tuple[int, str, str]:
    """Run a README shell block as printed, in ``bash``, in ``tmp_path``: ``steplog`` is this
    checkout's (a shim on ``PATH``), port 8000 a free one if 8000 is taken. Whatever it leaves
    running in the background (the outbox) is stopped afterwards: its process group is ended."""
    port = "8000"
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                port = str(free.getsockname()[1])
    shim = tmp_path / "bin" / "steplog"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m steplog "$@"\n')
    shim.chmod(0o755)
    env = {
        **engine.env,
        "STEPLOG_DB": str(engine.db),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "PATH": f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:  # files: the outbox keeps a pipe open
        shell = subprocess.Popen(
            ["bash", "-c", block.replace("8000", port)],
            cwd=tmp_path,
            env=env,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code = shell.wait(timeout=120)
        finally:
            try:
                os.killpg(shell.pid, signal.SIGTERM)  # the outbox it started in the background
            except ProcessLookupError:
                pass
    return code, out.read_text(), err.read_text()
