"""The runtime's promises, in-process: replay, determinism checks, JSON results, retries, events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import steplog
from helpers.logs import log_bytes, query_log
from steplog.errors import TransientError

pytestmark = pytest.mark.backends("sqlite", "postgres")


class Interrupt(BaseException):
    """Stands in for a kill inside a step (the engine releases the lease and stops)."""


def rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    return query_log(db, sql, *args)


def test_completed_steps_return_recorded_results_without_running_again(db: Path) -> None:
    calls: list[str] = []
    interrupt_at: list[str] = ["c"]

    def work(name: str) -> str:
        calls.append(name)
        if interrupt_at and name == interrupt_at[0]:
            interrupt_at.clear()
            raise Interrupt
        return name.upper()

    @steplog.agent
    def three(run: steplog.Run) -> list[str]:
        return [run.step(n, work, n) for n in ("a", "b", "c")]

    with pytest.raises(Interrupt):
        three.run("r", db=db)
    assert calls == ["a", "b", "c"]
    assert three.run("r", db=db) == ["A", "B", "C"]
    assert calls == ["a", "b", "c", "c"]  # only the unfinished step ran again
    assert rows(db, "SELECT incarnation FROM run") == [(2,)]


def test_a_replay_that_reaches_another_step_is_refused_and_the_run_kept(db: Path) -> None:
    names = iter(["first", "second"])

    @steplog.agent
    def drifting(run: steplog.Run) -> None:
        run.step(next(names), int, 1)
        raise Interrupt

    with pytest.raises(Interrupt):
        drifting.run("r", db=db)
    with pytest.raises(
        steplog.Blocked,
        match="step 1: recorded `first\\(…\\)` under version .*, the code asks `second\\(1\\)`",
    ) as info:
        drifting.run("r", db=db)
    assert info.value.at_step == 1
    assert rows(db, "SELECT status FROM run") == [("running",)]
    assert rows(db, "SELECT count(*) FROM event WHERE kind = 'resume_refused'") == [(1,)]


def test_results_are_the_json_round_trip_on_first_run_and_replay(db: Path) -> None:
    @steplog.agent
    def shapes(run: steplog.Run) -> Any:
        return run.step("pair", lambda: (1, 2))

    assert shapes.run("r", db=db) == [1, 2]
    assert shapes.run("r", db=db) == [1, 2]


def test_a_result_that_is_not_json_fails_the_run_clearly(db: Path) -> None:
    @steplog.agent
    def bad(run: steplog.Run) -> None:
        run.step("object", object)

    with pytest.raises(
        steplog.RunFailed, match="returned object, which cannot be recorded as JSON"
    ):
        bad.run("r", db=db)


def test_transient_errors_are_retried_per_policy_with_attempts_committed(db: Path) -> None:
    failures = [TransientError("try again"), TransientError("and again")]

    def shaky() -> str:
        if failures:
            raise failures.pop(0)
        return "ok"

    @steplog.agent(retry=steplog.RetryPolicy(max_attempts=3, initial_interval=0.001))
    def patient(run: steplog.Run) -> str:
        return run.step("shaky", shaky)

    assert patient.run("r", db=db) == "ok"
    assert rows(db, "SELECT attempts, status FROM step") == [(3, "committed")]
    assert rows(db, "SELECT used_retries, step_executions, used_steps FROM run") == [(2, 3, 1)]
    kinds = [k for (k,) in rows(db, "SELECT kind FROM event ORDER BY id")]
    assert kinds == [
        "run_created",
        "lease_acquired",
        "step_started",
        "step_attempt_failed",
        "step_started",
        "step_attempt_failed",
        "step_started",
        "step_committed",
        "run_finished",
    ]


def test_errors_past_the_retry_policy_fail_the_run(db: Path) -> None:
    @steplog.agent(retry=steplog.RetryPolicy(max_attempts=2, initial_interval=0.001))
    def doomed(run: steplog.Run) -> None:
        run.step("boom", lambda: 1 / 0)

    with pytest.raises(steplog.RunFailed, match="step 1 'boom' failed after 2 attempt"):
        doomed.run("r", db=db)


def test_an_agent_that_swallows_a_stop_cannot_carry_on(db: Path) -> None:
    @steplog.agent(budget=steplog.Budget(max_steps=2))
    def stubborn(run: steplog.Run) -> str:
        for i in range(5):
            try:
                run.step(f"s{i}", int, i)
            except Exception:
                pass
        return "done anyway"

    with pytest.raises(steplog.GaveUp, match="steps used 2 of 2"):
        stubborn.run("r", db=db)


def test_current_key_is_stable_and_only_inside_steps(db: Path) -> None:
    seen: list[str] = []

    @steplog.agent
    def keyed(run: steplog.Run) -> str:
        run.step("one", int, 1)
        return run.step("two", lambda: seen.append(steplog.current_key()) or steplog.current_key())

    assert keyed.run("k1", db=db) == "k1:2"
    with pytest.raises(steplog.UsageError, match="only inside a step"):
        steplog.current_key()


def test_file_effects_stay_inside_the_workdir(db: Path, tmp_path: Path) -> None:
    @steplog.agent
    def escaping(run: steplog.Run) -> None:
        run.write_file("../../outside.txt", "nope")

    with pytest.raises(steplog.RunFailed, match="escapes the run's workdir"):
        escaping.run("r", db=db, workdir=tmp_path / "wd")
    assert not (tmp_path / "outside.txt").exists()


def test_secrets_in_errors_never_reach_the_log(db: Path) -> None:
    def leak() -> None:
        raise RuntimeError(
            "auth failed for key sk-abcdefghijklmnopqrstuvwx and Bearer abc.def.ghi123"
        )

    @steplog.agent(retry=steplog.RetryPolicy(max_attempts=1))
    def leaky(run: steplog.Run) -> None:
        run.step("leak", leak)

    with pytest.raises(steplog.RunFailed):
        leaky.run("r", db=db)
    files = (
        [log_bytes(db)]
        if isinstance(db, str)
        else [p.read_bytes() for p in db.parent.glob("steplog.db*")]
    )
    dump = "\n".join("\n".join(f.decode("latin-1") for f in files).splitlines())
    assert "sk-abcdefghijklmnopqrstuvwx" not in dump
    assert "abc.def.ghi123" not in dump
    assert "[redacted]" in rows(db, "SELECT reason FROM run")[0][0]


def test_every_state_change_writes_an_event_in_the_same_transaction(
    db: Path, tmp_path: Path
) -> None:
    @steplog.agent
    def one_of_each(run: steplog.Run) -> None:
        run.step("call", int, 1)
        run.chat([{"role": "user", "content": "hello"}], name="ask", max_tokens=400)
        run.write_file("a.txt", "A")
        run.merge("m.db", "t", key={"id": 1}, values={"v": 2})

    one_of_each.run("r", db=db)
    by_seq: dict[int, list[str]] = {}
    for seq, kind in rows(db, "SELECT seq, kind FROM event WHERE seq IS NOT NULL ORDER BY id"):
        by_seq.setdefault(seq, []).append(kind)
    # A plain step is one transaction and one event: its start is in its step_committed.
    assert by_seq[1] == ["step_committed"]
    assert by_seq[2] == ["step_started", "decision_recorded", "step_committed"]
    assert (
        by_seq[3]
        == by_seq[4]
        == ["step_started", "effect_started", "effect_completed", "step_committed"]
    )
    usage = json.loads(rows(db, "SELECT data FROM event WHERE kind = 'run_finished'")[0][0])[
        "usage"
    ]
    assert (
        usage["steps"] == 4 and usage["tokens"] > 0 and usage["tokens_estimated"] == usage["tokens"]
    )


def test_steps_cannot_nest(db: Path) -> None:
    @steplog.agent
    def nested(run: steplog.Run) -> None:
        run.step("outer", lambda: run.step("inner", int, 1))

    with pytest.raises(steplog.RunFailed, match="called inside another step"):
        nested.run("r", db=db)


def test_steps_from_another_thread_are_refused(db: Path) -> None:
    import threading

    errors: list[BaseException] = []

    @steplog.agent
    def threaded(run: steplog.Run) -> None:
        def worker() -> None:
            try:
                run.step("from a thread", int, 1)
            except BaseException as exc:  # noqa: BLE001 (collected for the assertion)
                errors.append(exc)

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        run.step("from the agent", int, 2)

    threaded.run("r", db=db)
    assert len(errors) == 1 and "from another thread" in str(errors[0])
    assert rows(db, "SELECT seq, name FROM step") == [(1, "from the agent")]


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -float("inf"), {"score": [1.0, float("nan")]}]
)
def test_a_step_result_that_is_nan_or_infinite_fails_the_run_like_any_non_json_value(
    db: Path, value: Any
) -> None:
    """NaN and Infinity are not JSON: a step returning one fails the run clearly, and nothing
    that is not strict JSON reaches the log."""

    @steplog.agent
    def measuring(run: steplog.Run) -> Any:
        return run.step("measure", lambda: value)

    with pytest.raises(
        steplog.RunFailed, match="step 1 'measure' returned .*which cannot be recorded as JSON"
    ):
        measuring.run("r", db=db)
    assert rows(db, "SELECT result FROM step") == [(None,)]


def test_an_agent_result_that_is_not_finite_fails_the_run(db: Path) -> None:
    @steplog.agent
    def infinite(run: steplog.Run) -> float:
        return float("inf")

    with pytest.raises(
        steplog.RunFailed, match="the agent returned float, which cannot be recorded as JSON"
    ):
        infinite.run("r", db=db)
    assert rows(db, "SELECT result FROM run") == [(None,)]


@pytest.mark.parametrize("value", [float("nan"), object()])
def test_params_that_are_not_json_are_refused_before_the_log_is_opened(
    db: Path, value: Any
) -> None:
    @steplog.agent
    def echo(run: steplog.Run, x: Any = None) -> Any:
        return run.step("echo", lambda: x)

    with pytest.raises(steplog.UsageError, match="param x=.* cannot be stored in the log as JSON"):
        echo.run("r", db=db, x=value)
    assert not db.exists()


@pytest.mark.parametrize("path", [".", "sub/..", "./", "sub/", "sub/.", "a/b/../..", "existing"])
@pytest.mark.parametrize("effect", ["write_file", "merge"])
def test_a_file_effect_must_name_a_file_strictly_inside_the_workdir(
    db: Path, tmp_path: Path, path: str, effect: str
) -> None:
    """The workdir itself, or any directory, is not a file target: refused before the step runs,
    and nothing appears beside the workdir (a temp file of ``write_file('.')`` used to land in the
    workdir's parent)."""
    workdir = tmp_path / "area" / "wd"
    (workdir / "existing").mkdir(parents=True)
    before = sorted(p.name for p in workdir.parent.iterdir())

    @steplog.agent
    def misdirected(run: steplog.Run) -> None:
        if effect == "write_file":
            run.write_file(path, "content")
        else:
            run.merge(path, "t", key={"id": 1}, values={"v": 1})

    with pytest.raises(
        steplog.RunFailed, match=f"effect path '{path}' names a directory, not a file"
    ):
        misdirected.run("r", db=db, workdir=workdir)
    assert sorted(p.name for p in workdir.parent.iterdir()) == before
    assert [p.name for p in workdir.iterdir()] == ["existing"]
    assert rows(db, "SELECT count(*) FROM step") == [(0,)]


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            lambda run: run.merge("m.db", "bad table", key={"id": 1}, values={"v": 1}),
            r"step 1 'merge bad table id=1' .*'bad table' is not a plain SQL identifier",
        ),
        (
            lambda run: run.merge("m.db", "t", key={}, values={"v": 1}),
            r"step 1 'merge t ' .*key must name at least one column",
        ),
        (
            lambda run: run.write_file("../outside.txt", "x"),
            r"step 1 'write ../outside.txt' .*escapes the run's workdir",
        ),
        (
            lambda run: run.write_file("/etc/passwd", "x", name="save"),
            r"step 1 'save' .*must be relative to the run's workdir",
        ),
        (
            lambda run: run.step("outer", lambda: run.step("inner", int, 1)),
            r"step 1 'outer' .*step 'inner' was called inside another step",
        ),
        (
            lambda run: run.step("deep", _nested, 100_000),
            r"step 1 'deep' returned list, which cannot be recorded as JSON \(it is nested too "
            r"deeply\)",
        ),
    ],
)
def test_a_refusal_inside_a_step_names_the_step(
    db: Path, tmp_path: Path, body: Any, message: str
) -> None:
    """Bad input met while a step runs (a path, an identifier, a nested step, a result nested too
    deeply) fails that step, and the reason says which step, never "outside any step"."""

    @steplog.agent
    def refused(run: steplog.Run) -> None:
        body(run)

    with pytest.raises(steplog.RunFailed, match=message) as info:
        refused.run("r", db=db, workdir=tmp_path / "wd")
    assert "outside any step" not in str(info.value)
    assert "outside any step" not in rows(db, "SELECT reason FROM run")[0][0]


def test_an_agent_result_nested_too_deeply_fails_the_run_clearly(db: Path) -> None:
    @steplog.agent
    def deep(run: steplog.Run) -> Any:
        return _nested(100_000)

    with pytest.raises(
        steplog.RunFailed,
        match=r"the agent returned list, which cannot be recorded as JSON "
        r"\(it is nested too deeply\)",
    ):
        deep.run("r", db=db)


def test_a_step_left_current_by_an_earlier_run_does_not_block_the_next_one(db: Path) -> None:
    """A stop signal can land on the very line that clears "the step being executed" (the
    stop-at-every-line test found it); the next run in the same thread must still work."""
    from steplog.runtime import run as runtime

    @steplog.agent
    def plain(run: steplog.Run) -> int:
        return run.step("one", int, 1)

    stale = runtime.StepContext(run=object(), seq=1, name="interrupted")  # type: ignore[arg-type]
    token = runtime._current.set(stale)
    try:
        assert plain.run("r", db=db) == 1
    finally:
        runtime._current.reset(token)
