"""A big run opened from its log is the run folded event by event, held without an object per
step: its step count, last step and redone bars, its names (read back one at a time and searched
in one string), and timeline geometry that follows what the fold adds after the open."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers.gui import assert_same
from helpers.synthetic_log import SyntheticRun, write_log
from steplog.log.logread import Event
from steplog.log.reader import NAME_SEPARATOR, LogRepository, NameColumns
from steplog.log.steps import result_of
from steplog_gui.model.bulk_load import add_details, load_details, load_run
from steplog_gui.model.run_state import COMMITTED, REDONE, LogState, RunState
from steplog_gui.model.step_names import StepNames
from steplog_gui.model.timeline_data import bars, name_filter, spans

STEPS = 30_000


@pytest.fixture
def big_log(tmp_path: Path) -> Path:
    db = tmp_path / "big.db"
    write_log(db, SyntheticRun("big", STEPS, kills=(10_000, 20_000), max_steps=STEPS * 2))
    return db


def opened(db: Path) -> tuple[RunState, LogRepository]:
    repo = LogRepository(db)
    upto = repo.max_event_id()
    run = load_run(repo, "big", upto)
    add_details(run, load_details(repo, "big", upto))
    return run, repo


def test_a_big_run_opens_with_its_steps_its_last_step_and_its_redone_bars(big_log: Path) -> None:
    run, repo = opened(big_log)
    try:
        ex = run.executions
        assert run.steps_committed == STEPS and run.status == "succeeded"
        assert int(ex["seq"].max()) == STEPS and run.step_names[STEPS] == (f"s{STEPS - 1}", "call")
        assert (
            run.redone == 2 and len(run.kills) == 2
        )  # each kill cut a step whose start it never wrote
        assert np.count_nonzero(ex["outcome"] == COMMITTED) == STEPS
        assert sorted(ex["seq"][ex["outcome"] == REDONE].tolist()) == [10_001, 20_001]
        folded = LogState()
        folded.apply(repo.events_since(0, limit=10**9))
        assert_same(run, folded.runs["big"], "a 30k-step run with two kills")
    finally:
        repo.close()


def test_a_big_run_opened_then_followed_draws_what_the_fold_adds(big_log: Path) -> None:
    run, repo = opened(big_log)
    repo.close()
    x0, x1 = spans(run, 0.0)
    assert len(x0) == STEPS + 2
    before = bars(run, COMMITTED, 0.0)
    run.apply(
        Event(
            10**9,
            "big",
            run.last_ts + 1.0,
            3,
            "step_committed",
            STEPS + 1,
            {"name": "more", "kind": "call", "started": run.last_ts + 0.5},
        )
    )
    x0, x1 = spans(run, 0.0)
    after = bars(run, COMMITTED, 0.0)
    assert len(x0) == STEPS + 3 and len(after.x0) == len(before.x0) + 1
    assert x1[-1] - x0[-1] == pytest.approx(0.5)
    assert run.step_names[STEPS + 1] == ("more", "call") and STEPS + 1 in run.step_names


def columns(names: list[tuple[int, str, str]]) -> NameColumns:
    kinds: dict[str, int] = {}
    return NameColumns(
        seq=np.array([s for s, _, _ in names], dtype=np.int64),
        length=np.array([len(n) for _, n, _ in names], dtype=np.int64),
        kind=np.array([kinds.setdefault(k, len(kinds)) for _, _, k in names], dtype=np.int16),
        kinds=tuple(kinds),
        text=NAME_SEPARATOR.join(n for _, n, _ in names),
    )


def test_step_names_in_columns_read_back_as_the_dict_they_replace() -> None:
    rows = [
        (1, "load", "call"),
        (2, "classify A", "chat"),
        (3, "Ünïcode ß", "call"),
        (2, "classify B", "chat"),
        (4, "", "effect"),
        (5, "nul\x00inside", "call"),
    ]
    names = StepNames(columns(rows))
    as_dict = {seq: (name, kind) for seq, name, kind in rows}  # the last wins
    assert names == as_dict and dict(names) == as_dict and len(names) == 5
    names[6] = ("live", "call")
    names[1] = ("renamed", "call")  # set since the load: wins over the columns
    assert names[1] == ("renamed", "call") and names[6] == ("live", "call") and len(names) == 6
    assert 7 not in names and names.get(7) is None and sorted(names) == [1, 2, 3, 4, 5, 6]
    assert names.matching("classify").tolist() == [2]  # only the name that is current
    assert names.matching("CLASSIFY a").tolist() == []
    assert names.matching("ü").tolist() == [3] and names.matching("SS").tolist() == [2]
    assert names.matching("load").tolist() == [] and names.matching("renamed").tolist() == [1]
    assert names.matching("l\x00I").tolist() == [5]  # a needle with the separator: name by name
    assert names.matching("dA").tolist() == []  # never across two names ("loaD" + "Ünï"...)


def test_the_name_filter_keeps_the_executions_of_matching_steps(big_log: Path) -> None:
    run, repo = opened(big_log)
    repo.close()
    keep = name_filter(run, " S2999 ")
    assert keep is not None
    kept = sorted(set(run.executions["seq"][keep].tolist()))
    assert kept == [s + 1 for s in sorted([2999, *range(29990, 30000)])]  # s2999 and s29990..s29999


@pytest.mark.parametrize(
    "text",
    ["0", "12", "-3.5", '"text"', "null", "true", '{"a":[1,2,{"b":null}]}', "[]", " 7", "1e400"],
)
def test_a_replayed_result_is_what_json_reads_from_the_log(text: str) -> None:
    assert result_of(text) == json.loads(text) or (result_of(text) != result_of(text))


def test_a_replayed_result_of_nothing_is_none_and_bad_json_fails_as_json_does() -> None:
    assert result_of(None) is None and result_of("") is None
    with pytest.raises(ValueError):
        result_of("1 2")
