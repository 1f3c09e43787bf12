"""Tags and finding runs through the console script (issue 32).

``steplog run``/``submit --tag KEY=VALUE`` record tags with the run; ``status --json`` shows them;
a fork, an export and an import carry them; ``steplog runs`` finds runs by them and by the other
filters; bad input is one line on stderr, exit 2, the log untouched. Python's
``agent.run(tags=...)`` is the same thing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers.engine import Engine
from helpers.paths import AGENTS

NOOP = f"{AGENTS}:noop"


def runs_json(engine: Engine, *options: str) -> list[dict[str, Any]]:
    done = engine.run("runs", "--db", str(engine.db), "--json", *options)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.backends("sqlite", "postgres")
def test_tags_are_recorded_shown_and_found(engine: Engine) -> None:
    db = str(engine.db)
    tagged = engine.run(
        "run", NOOP, "--run-id", "a", "--db", db, "--param", "n=2",
        "--tag", "team=support", "--tag", "ticket=T-1",
    )  # fmt: skip
    assert tagged.returncode == 0, tagged.stderr
    assert engine.run("run", NOOP, "--run-id", "b", "--db", db, "--param", "n=1").returncode == 0
    queued = engine.run("submit", NOOP, "--run-id", "q", "--db", db, "--tag", "team=sales")
    assert queued.returncode == 0, queued.stderr

    assert engine.status("a")["tags"] == {"team": "support", "ticket": "T-1"}
    assert engine.status("b")["tags"] == {}
    assert [r["run_id"] for r in runs_json(engine)] == ["q", "b", "a"]
    assert [r["run_id"] for r in runs_json(engine, "--tag", "team=support")] == ["a"]
    assert [r["run_id"] for r in runs_json(engine, "--status", "queued")] == ["q"]
    assert [
        r["run_id"]
        for r in runs_json(engine, "--status", "succeeded,queued", "--limit", "2", "--since", "1h")
    ] == ["q", "b"]
    assert runs_json(engine, "--search", "T-1")[0]["run_id"] == "a"
    assert runs_json(engine, "--until", "2000-01-01") == []

    forked = engine.run("fork", "a", "--at-step", "2", "--run-id", "f", "--db", db)
    assert forked.returncode == 0, forked.stderr
    assert engine.status("f")["tags"] == {"team": "support", "ticket": "T-1"}

    text = engine.run("runs", "--db", db, "--tag", "ticket=T-1")
    assert text.returncode == 0 and "team=support ticket=T-1" in text.stdout


def test_a_run_exported_and_imported_keeps_its_tags(engine: Engine, tmp_path: Path) -> None:
    db = str(engine.db)
    done = engine.run("run", NOOP, "--run-id", "a", "--db", db, "--param", "n=1", "--tag", "k=v")
    assert done.returncode == 0, done.stderr
    archive = tmp_path / "a.jsonl"
    exported = engine.run("export", "a", "--db", db)
    assert exported.returncode == 0, exported.stderr
    archive.write_text(exported.stdout)
    other = tmp_path / "other.db"
    imported = engine.run("import", str(archive), "--db", str(other))
    assert imported.returncode == 0, imported.stderr
    found = engine.run("runs", "--db", str(other), "--tag", "k=v", "--json")
    assert [r["tags"] for r in json.loads(found.stdout)] == [{"k": "v"}]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["run", NOOP, "--tag", "team"], "--tag 'team' is malformed (it has no '='); write --tag"),
        (["submit", NOOP, "--tag", "a b=c"], "--tag 'a b=c' is malformed"),
        (["runs", "--status", "finished"], "--status 'finished' is not a run status"),
        (["runs", "--since", "yesterday"], "--since 'yesterday' is not a time"),
        (["runs", "--tag", "x"], "--tag 'x' is malformed"),
    ],
)
def test_bad_tags_and_filters_are_one_line_exit_2_and_write_nothing(
    engine: Engine, argv: list[str], words: str
) -> None:
    done = engine.run(*argv, "--db", str(engine.db))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"steplog: {done.stderr.strip()[9:]}"]
    assert words in done.stderr
    if argv[0] != "runs":
        assert not Path(engine.db).exists(), "nothing written"


def test_resuming_with_other_tags_is_refused(engine: Engine) -> None:
    db = str(engine.db)
    assert engine.run("run", NOOP, "--run-id", "a", "--db", db, "--tag", "k=v").returncode == 0
    again = engine.run("run", NOOP, "--run-id", "a", "--db", db, "--tag", "k=v")
    assert again.returncode == 0, "the same tags: the finished run is reported"
    other = engine.run("run", NOOP, "--run-id", "a", "--db", db, "--tag", "k=w")
    assert other.returncode == 2 and "resume it without --tag" in other.stderr


def test_python_tags_are_the_same_tags(tmp_path: Path) -> None:
    import steplog
    from steplog.log.db import open_readonly
    from steplog.log.find import RunQuery, find_runs

    @steplog.agent
    def hello(run: steplog.Run) -> str:
        return str(run.step("say", lambda: "hi"))

    db = tmp_path / "p.db"
    assert hello.run("p1", db=db, tags={"team": "py"}) == "hi"
    with pytest.raises(steplog.UsageError, match="tag key 'bad key'"):
        hello.run("p2", db=db, tags={"bad key": "x"})
    conn = open_readonly(db)
    try:
        found = find_runs(conn, RunQuery(tags=(("team", "py"),)))
    finally:
        conn.close()
    assert [(r["run_id"], r["tags"]) for r in found] == [("p1", {"team": "py"})]


@pytest.mark.backends("sqlite", "postgres")
def test_cost_by_tag_groups_runs_by_their_tag(engine: Engine) -> None:
    db = str(engine.db)
    for rid, team in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        done = engine.run(
            "run", NOOP, "--run-id", rid, "--db", db, "--param", "n=2", "--tag", f"team={team}"
        )
        assert done.returncode == 0, done.stderr
    assert engine.run("run", NOOP, "--run-id", "none", "--db", db, "--param", "n=1").returncode == 0
    done = engine.run("cost", "--db", db, "--by", "tag:team", "--json")
    assert done.returncode == 0, done.stderr
    runs = {r["tag"]: r["runs"] for r in json.loads(done.stdout)}
    assert runs == {"a": 2, "b": 1, "(no tag)": 1}
