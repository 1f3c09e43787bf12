"""`steplog fork RUN --at-step N --set-result JSON`: replay a run from a corrected step. Step N is
recorded in the fork with the person's result instead of being run, marked as edited with the
parent's result kept beside it, and the fork runs on from step N + 1 with it."""

from __future__ import annotations

import json
from typing import Any

import pytest

import steplog
from helpers.engine import Engine
from helpers.openai_server import FakeOpenAI
from helpers.paths import AGENTS

RELAY = f"{AGENTS}:relay"


def fork(engine: Engine, *args: str) -> Any:
    return engine.run("fork", *args, "--db", str(engine.db))


def step_copied(engine: Engine, run_id: str) -> dict[int, dict[str, Any]]:
    rows = engine.query(
        "SELECT seq, data FROM event WHERE run_id = ? AND kind = 'step_copied' ORDER BY seq",
        run_id,
    )
    return {seq: json.loads(data) for seq, data in rows}


@pytest.mark.backends("sqlite", "postgres")
def test_the_fork_runs_on_from_the_edited_result(engine: Engine) -> None:
    done = engine.run("run", RELAY, "--run-id", "parent", "--db", str(engine.db))
    assert done.returncode == 0, done.stderr
    assert engine.status("parent")["result"] == 5  # 1 + four additions

    made = fork(engine, "parent", "--at-step", "2", "--set-result", "100", "--run-id", "child")
    assert made.returncode == 0, made.stderr
    assert "step 2 recorded with the edited result" in made.stderr
    child = engine.status("child")
    assert child["status"] == "succeeded" and child["result"] == 102  # 100, then steps 3 and 4
    # Step 2 never ran in the fork: its row is the edit, spent nothing, no engine worked on it.
    assert engine.query(
        "SELECT result, incarnation, tokens_in + tokens_out, cost_usd FROM step"
        " WHERE run_id = 'child' AND seq = 2"
    ) == [("100", 0, 0, 0)]
    assert child["steps_committed"] == 4 and child["step_executions"] == 4  # nothing redone
    copied = step_copied(engine, "child")
    assert sorted(copied) == [1, 2]
    assert copied[2]["edited"] is True and copied[2]["original_result"] == 3
    assert "edited" not in copied[1]
    created = engine.query(
        "SELECT data FROM event WHERE run_id = 'child' AND kind = 'run_created'"
    )[0][0]
    assert json.loads(created)["forked_from"] == {
        "run_id": "parent",
        "at_step": 2,
        "edited_step": 2,
    }
    # The parent is as it was.
    assert engine.query("SELECT result FROM step WHERE run_id = 'parent' AND seq = 2") == [("3",)]


def test_a_failed_step_can_be_given_the_result_it_should_have_had(
    engine: Engine, tmp_path: Any
) -> None:
    witness = tmp_path / "witness.json"
    args = [
        "--param",
        "n=2",
        "--param",
        f"witness={witness}",
        "--param",
        f"fixed_when={tmp_path / 'never-made'}",
    ]
    failed = engine.run("run", f"{AGENTS}:fixable", "--run-id", "p", "--db", str(engine.db), *args)
    assert failed.returncode == 4, failed.stderr
    check = engine.query("SELECT seq FROM step WHERE run_id = 'p' AND name = 'check'")[0][0]

    made = fork(engine, "p", "--at-step", str(check), "--set-result", '"fixed"', "--run-id", "c")
    assert made.returncode == 0, made.stderr
    assert engine.status("c")["status"] == "succeeded"
    assert engine.status("c")["result"] == {"sent": 4}


def test_a_chat_steps_edit_replaces_the_answers_text_and_asks_the_model_nothing(
    engine: Engine, fake_openai: FakeOpenAI
) -> None:
    key = {"OPENAI_API_KEY": "sk-test-0000000000000000000000"}
    model = ["--model", "gpt-4o-mini", "--base-url", fake_openai.base_url]
    done = engine.run(
        "run", f"{AGENTS}:chatty", "--param", "n=3", "--run-id", "talk", "--db", str(engine.db),
        *model, env=key,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    made = engine.run(
        "fork", "talk", "--at-step", "2", "--set-result", '"What a person wrote instead."',
        "--run-id", "talk-2", "--db", str(engine.db), *model, env=key,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    keys = fake_openai.calls_by_key()
    assert keys["talk-2:3"] == 1 and "talk-2:2" not in keys and "talk-2:1" not in keys
    (result,) = engine.query("SELECT result FROM step WHERE run_id = 'talk-2' AND seq = 2")[0]
    answer = json.loads(result)
    assert answer["text"] == "What a person wrote instead."
    assert answer["usage"]["input_tokens"] == 0 and answer["cost_usd"] == 0
    assert answer["model"] == "gpt-4o-mini"  # the rest of the recorded answer is kept


def test_from_python_null_is_an_edit_too(engine: Engine) -> None:
    assert (
        engine.run(
            "run", RELAY, "--param", "n=2", "--run-id", "r", "--db", str(engine.db)
        ).returncode
        == 0
    )
    new_id = steplog.fork("r", 2, db=engine.db, new_run_id="r-null", set_result=None)
    assert new_id == "r-null"
    assert engine.query("SELECT result FROM step WHERE run_id = 'r-null' AND seq = 2") == [
        ("null",)
    ]
    plain = steplog.fork("r", 2, db=engine.db, new_run_id="r-plain")
    assert engine.query("SELECT count(*) FROM step WHERE run_id = ?", plain) == [(1,)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--at-step", "7", "--set-result", "1"], "run r has committed steps 1..2 only"),
        (["--at-step", "3", "--set-result", "1"], "run r has no step 3 to edit"),
        (["--at-step", "2", "--set-result", "{oops"], "--set-result is not JSON (Expecting"),
        (["--at-step", "2", "--set-result", "NaN"], "--set-result: "),
    ],
)
def test_an_edit_that_cannot_be_made_is_refused_and_writes_nothing(
    engine: Engine, args: list[str], message: str
) -> None:
    assert (
        engine.run(
            "run", RELAY, "--param", "n=2", "--run-id", "r", "--db", str(engine.db)
        ).returncode
        == 0
    )
    before = engine.query("SELECT count(*) FROM run")
    done = fork(engine, "r", *args, "--run-id", "nope")
    assert done.returncode == 2
    assert done.stderr.startswith(f"steplog: {message}") and done.stderr.count("\n") == 1, (
        done.stderr
    )
    assert engine.query("SELECT count(*) FROM run") == before


def test_a_chat_step_takes_text_or_a_whole_answer(engine: Engine, fake_openai: FakeOpenAI) -> None:
    key = {"OPENAI_API_KEY": "sk-test-0000000000000000000000"}
    model = ["--model", "gpt-4o-mini", "--base-url", fake_openai.base_url]
    done = engine.run(
        "run", f"{AGENTS}:chatty", "--param", "n=1", "--run-id", "t", "--db", str(engine.db),
        *model, env=key,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    bad = fork(engine, "t", "--at-step", "1", "--set-result", '{"answer": "hi"}', "--no-start")
    assert bad.returncode == 2
    assert "is a chat step, whose result is the model's answer" in bad.stderr
