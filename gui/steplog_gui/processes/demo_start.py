"""The demo's outbox and first engine, started without Qt: ``steplog demo`` starts them first thing.

The outbox is a process of its own (``steplog.outbox.start_outbox``) whose interpreter takes about
as long to start as the monitor's own imports, and the engine can only start once the outbox
listens (it is given the URL). Started one after the other on a plain thread before the monitor
imports Qt (``EarlyDemo``), both are up by the time the window is, and the demo's first step is
committed while the window is being painted instead of after it (issue 29). The launcher
(``processes.demo``) takes them over. One started here that nobody took (the monitor ended
first) is stopped at exit: both run in sessions of their own and would outlive this process.
"""

from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

from steplog.log.location import LogLocation
from steplog_gui.processes.launch import LaunchSpec, spawn_engine

DEMO_PACE = 3.5
"""Seconds of simulated thinking per model call: the 16-ticket demo lasts about a minute, long
enough for a person to press Kill now several times, each in the middle of a step."""
DEMO_AGENTS = ("demo", "naive")
"""Built-in agents that post to the demo outbox."""
WAIT_AT_EXIT_S = 15.0
"""At exit, how long to wait for an outbox still starting (``start_outbox`` gives up at 10 s)."""


@dataclass
class DemoConfig:
    agent: str = "demo"
    params: dict[str, str] = field(default_factory=dict)
    pace: float = DEMO_PACE


_unadopted: set[Any] = set()
"""Demo outboxes and engines started that no launcher has taken yet."""
_early: list[EarlyDemo] = []


@atexit.register
def _stop_unadopted() -> None:
    from steplog.control.procs import stop_group

    for early in _early:
        early.wait(WAIT_AT_EXIT_S)  # one still starting would be left running otherwise
    for started in list(_unadopted):
        if isinstance(started, Popen):
            stop_group(started, 3.0)  # an engine: SIGTERM, it releases its lease
        else:
            started.stop(grace=1.0)
    _unadopted.clear()


def start_demo_outbox(log: LogLocation, prefer_port: int = 0) -> Any:
    """Start the demo outbox of ``log`` (its file beside the log, ``outbox_file_for``) and return
    the ``OutboxProcess`` once it listens, on ``prefer_port`` if that is free, else on any port.
    It counts as unadopted until ``adopt``."""
    from steplog.errors import UsageError
    from steplog.log.db import private_dir
    from steplog.outbox.process import start_outbox
    from steplog.verdict.evidence import outbox_file_for

    outbox_db = outbox_file_for(log)
    private_dir(outbox_db.parent)
    try:
        outbox = start_outbox(outbox_db, port=prefer_port)
    except UsageError:  # the old port is taken now: any free one will do
        if not prefer_port:
            raise
        outbox = start_outbox(outbox_db)
    _unadopted.add(outbox)
    return outbox


def adopt(started: Any) -> None:
    """``started`` (an outbox or an engine's ``Popen``) has an owner now, who stops it."""
    _unadopted.discard(started)


def new_run_id(taken: list[str]) -> str:
    """A demo run's id: the time it started, made unique among ``taken``."""
    run_id = time.strftime("demo-%Y%m%d-%H%M%S")
    if run_id in taken:  # twice in one second
        run_id += f"-{len(taken) + 1}"
    return run_id


@dataclass
class Started:
    """What ``EarlyDemo`` started: the outbox, and the engine of a new demo run unless the
    outbox was all it was asked for (compare mode starts its own engines)."""

    outbox: Any
    engine: tuple[LaunchSpec, Popen[bytes], Path] | None = None
    engine_error: BaseException | None = None


class EarlyDemo:
    """The demo outbox of ``log``, then (with ``config``) a new demo run's engine posting to it,
    started on a thread of their own from the moment this is made."""

    def __init__(self, log: LogLocation, config: DemoConfig | None) -> None:
        self._done = threading.Event()
        self._started: Started | None = None
        self._error: BaseException | None = None
        _early.append(self)
        thread = threading.Thread(
            target=self._start, args=(log, config), name="steplog-demo-start", daemon=True
        )
        thread.start()

    def _start(self, log: LogLocation, config: DemoConfig | None) -> None:
        try:
            outbox = start_demo_outbox(log)
        except Exception as exc:  # handed to whoever asks for the result
            self._error = exc
            self._done.set()
            return
        started = Started(outbox)
        if config is not None:
            spec = LaunchSpec(
                agent=config.agent,
                run_id=new_run_id([]),
                db=log,
                outbox=outbox.url,
                pace=config.pace,
                params=dict(config.params),
            )
            try:
                proc, output = spawn_engine(spec)
            except OSError as exc:
                started.engine_error = exc
            else:
                _unadopted.add(proc)
                started.engine = (spec, proc, output)
        self._started = started
        self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def result(self) -> Started:
        """What was started (blocks until it is), or the exception that stopped the outbox."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._started is not None
        return self._started
