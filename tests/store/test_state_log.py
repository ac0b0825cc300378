"""A `StateLog` in a saved state: the store writes only the items it gained, reads the
list back whole, and a state without one is saved as before (issue 18)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tunefleet._state_log import StateLog, join, split
from tunefleet.store import ExperimentStore, StoreReader


def _state(log: StateLog, step: int) -> dict[str, Any]:
    return {"seed": 7, "step": step, "inner": {"history": log, "flat": [1, 2]}}


def test_split_and_join_round_trip_nested_logs() -> None:
    log = StateLog([{"x": 1}, {"x": 2}])
    state: dict[str, Any] = {"a": 1, "nested": {"log": log, "b": [3]}, "top": StateLog([5])}
    head, logs = split(state)
    assert logs == {"nested/log": log, "top": [5]}
    assert head["nested"]["log"] == {"$state_log": "nested/log"} and head["nested"]["b"] == [3]
    assert state["nested"]["log"] is log  # the caller's state is not changed
    back = join(head, lambda path: list(logs[path]))
    assert back == state and isinstance(back["nested"]["log"], StateLog)
    plain = {"a": [1], "b": {"c": 2}}
    assert split(plain)[0] is plain  # nothing to split: not even copied


def test_each_item_is_written_once_however_long_the_log(tmp_path: Path) -> None:
    store = ExperimentStore(tmp_path)
    log = StateLog()
    costs = []
    for step in range(1, 2001):
        log.append({"trial": f"t{step:05d}", "value": step / 7})
        before = store.state_bytes_written
        store.save_state("searcher", _state(log, step))
        store.flush()
        costs.append(store.state_bytes_written - before)
    store.close()
    # The cost of a save does not grow with the log: the last saves cost what the first did.
    assert max(costs[-100:]) <= max(costs[:100]) + 8, (costs[:3], costs[-3:])
    with StoreReader(tmp_path) as reader:
        saved = reader.state("searcher")
    assert saved is not None and saved["step"] == 2000
    assert saved["inner"]["history"] == list(log) and saved["inner"]["flat"] == [1, 2]


def test_a_plain_list_is_saved_whole_as_before(tmp_path: Path) -> None:
    store = ExperimentStore(tmp_path)
    history: list[int] = []
    costs = []
    for step in range(200):
        history.append(step)
        before = store.state_bytes_written
        store.save_state("scheduler", {"history": history})
        store.flush()
        costs.append(store.state_bytes_written - before)
    store.close()
    assert costs[-1] > 5 * costs[0]  # whole: it grows with the list
    with StoreReader(tmp_path) as reader:
        assert reader.state("scheduler") == {"history": history}


def test_a_reopened_store_appends_after_what_is_on_disk(tmp_path: Path) -> None:
    items = [f"{i}" + "x" * 200 for i in range(7)]
    with ExperimentStore(tmp_path) as store:
        store.save_state("searcher", _state(StateLog(items[:5]), 1))
    resumed = ExperimentStore(tmp_path)
    loaded = resumed.load_state("searcher")
    assert loaded is not None and loaded["inner"]["history"] == items[:5]
    log = loaded["inner"]["history"]
    log.extend(items[5:])
    resumed.save_state("searcher", _state(log, 2))
    resumed.close()
    assert resumed.state_bytes_written < 3 * 210  # the head and two rows, not seven
    with StoreReader(tmp_path) as reader:
        saved = reader.state("searcher")
    assert saved is not None and saved["inner"]["history"] == items


def test_a_log_that_shrank_is_written_again_in_full(tmp_path: Path) -> None:
    with ExperimentStore(tmp_path) as store:
        store.save_state("searcher", {"log": StateLog([1, 2, 3])})
        store.flush()
        store.save_state("searcher", {"log": StateLog([9])})
    with StoreReader(tmp_path) as reader:
        assert reader.state("searcher") == {"log": [9]}


def test_a_store_from_before_state_logs_still_reads(tmp_path: Path) -> None:
    with ExperimentStore(tmp_path) as store:
        store.save_state("searcher", {"seed": 1, "trials": [1, 2]})
    with sqlite3.connect(tmp_path / "experiment.db") as db:
        db.execute("DROP TABLE state_log")
    with StoreReader(tmp_path) as reader:
        assert reader.state("searcher") == {"seed": 1, "trials": [1, 2]}
    with ExperimentStore(tmp_path) as store:  # the writer adds the table back
        assert store.load_state("searcher") == {"seed": 1, "trials": [1, 2]}
        store.save_state("searcher", {"seed": 1, "trials": StateLog([1, 2, 3])})
    with StoreReader(tmp_path) as reader:
        assert reader.state("searcher") == {"seed": 1, "trials": [1, 2, 3]}
