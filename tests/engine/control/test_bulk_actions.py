"""`steplog cancel` / `retry` on many runs (issue 32): by ids, by the `runs` filters, or both;
each run acted on by itself, a refusal never stopping the others, a line each and a summary,
exit 2 when any was refused; `--dry-run` changes nothing. Through the console script."""

from __future__ import annotations

from pathlib import Path

from helpers.engine import Engine
from helpers.paths import AGENTS


def waiting_runs(engine: Engine, tmp_path: Path, *ids: str) -> None:
    for rid in ids:
        done = engine.run(
            "run", f"{AGENTS}:approval", "--run-id", rid, "--db", str(engine.db),
            "--param", "n=1", "--param", f"witness={tmp_path / rid}.json", "--exit-when-waiting",
        )  # fmt: skip
        assert done.returncode == 6, done.stderr


def statuses(engine: Engine) -> dict[str, str]:
    return dict(engine.query("SELECT id, status FROM run"))  # type: ignore[arg-type]


def test_cancel_by_filter_and_by_ids_each_run_by_itself(engine: Engine, tmp_path: Path) -> None:
    waiting_runs(engine, tmp_path, "a", "b", "c")
    assert (
        engine.run("run", f"{AGENTS}:noop", "--run-id", "done", "--db", str(engine.db)).returncode
        == 0
    )
    before = statuses(engine)

    dry = engine.run("cancel", "--status", "waiting", "--dry-run", "--db", str(engine.db))
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == ["would cancel c (waiting)", "would cancel b (waiting)",
                                       "would cancel a (waiting)"]  # fmt: skip
    assert "dry run, nothing changed: 3 would be cancelled, 0 refused" in dry.stderr
    assert statuses(engine) == before

    mixed = engine.run(
        "cancel", "a", "done", "ghost", "b", "--reason", "tidy", "--db", str(engine.db)
    )
    assert mixed.returncode == 2  # some were refused
    assert mixed.stdout.splitlines() == ["cancelled a", "cancelled b"]
    assert "refused done: run done already ended succeeded" in mixed.stderr
    assert "refused ghost: no run ghost in this log" in mixed.stderr
    assert mixed.stderr.rstrip().endswith("2 cancelled, 2 refused")
    assert statuses(engine) == {**before, "a": "cancelled", "b": "cancelled"}
    assert engine.status("a")["reason"] == "tidy"

    # Ids and filters together: the named runs that match.
    both = engine.run("cancel", "c", "done", "--status", "waiting", "--db", str(engine.db))
    assert both.returncode == 0 and both.stdout.splitlines() == ["cancelled c"], both.stderr

    nothing = engine.run("cancel", "--db", str(engine.db))
    assert nothing.returncode == 2 and "name the runs (RUN_ID ...) or filter them" in nothing.stderr


def test_retry_sets_every_failed_run_going_again_for_the_workers(
    engine: Engine, tmp_path: Path
) -> None:
    fixed = tmp_path / "fixed"
    for rid in ("f1", "f2"):
        args = ["--param", "n=1", "--param", f"witness={tmp_path / rid}.json",
                "--param", f"fixed_when={fixed}"]  # fmt: skip
        failed = engine.run(
            "run", f"{AGENTS}:fixable", "--run-id", rid, "--db", str(engine.db), *args
        )
        assert failed.returncode == 4, failed.stderr
    assert (
        engine.run("run", f"{AGENTS}:noop", "--run-id", "ok", "--db", str(engine.db)).returncode
        == 0
    )

    retried = engine.run("retry", "--status", "failed,succeeded", "--db", str(engine.db))
    assert retried.returncode == 2  # "ok" succeeded: nothing to retry
    assert sorted(retried.stdout.splitlines()) == [
        "f1 set to run again from its failed step",
        "f2 set to run again from its failed step",
    ]
    assert "refused ok: run ok succeeded; there is nothing to retry" in retried.stderr
    assert statuses(engine) == {"f1": "queued", "f2": "queued", "ok": "succeeded"}
    fixed.touch()
    worked = engine.run("worker", "--db", str(engine.db), "--drain", timeout=120)
    assert worked.returncode == 0, worked.stderr
    assert statuses(engine) == {"f1": "succeeded", "f2": "succeeded", "ok": "succeeded"}
