"""The experiment store: writer buffering and transactions, the read-only reader, resume."""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tunefleet
from tunefleet._redact import redact
from tunefleet.store import (
    SCHEMA_VERSION,
    ExperimentStore,
    StoreReader,
    default_storage_path,
    list_experiments,
    resolve_experiment,
)
from tunefleet.store._schema import DECODED_AT_ONCE, decode, decode_each, decode_many, encode
from tunefleet.store._writer import StoreWriteError
from tunefleet.trial import FailureKind, FailureRecord, Trial, TrialStatus

PACKAGE_ROOT = str(Path(tunefleet.__file__).resolve().parent.parent)


def make_trial(exp: Path, index: int, **config: Any) -> Trial:
    trial_id = f"t{index:04d}"
    return Trial(
        trial_id=trial_id,
        index=index,
        name=f"train_{trial_id}",
        config=dict(config),
        resources={"cpu": 1.0},
        path=str(exp / "trials" / trial_id),
    )


def result(iteration: int, **metrics: Any) -> dict[str, Any]:
    return {"training_iteration": iteration, **metrics}


@pytest.fixture
def exp(tmp_path: Path) -> Path:
    return tmp_path / "results" / "exp"


def test_creates_directory_database_and_schema(exp: Path) -> None:
    with ExperimentStore(exp):
        pass
    assert (exp / "experiment.db").is_file()
    assert (exp / "trials").is_dir()
    conn = sqlite3.connect(exp / "experiment.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"events", "results", "checkpoints", "trials", "meta", "state", "state_log"}
    conn.close()
    with StoreReader(exp) as reader:
        assert reader.meta() == {"schema_version": SCHEMA_VERSION}


def test_round_trip_of_meta_trials_state_and_events(exp: Path) -> None:
    store = ExperimentStore(exp)
    store.write_meta({"name": "exp", "metric": "loss", "mode": "min", "param_space": {"lr": 1}})
    trial = make_trial(exp, 0, lr=0.1, nested={"a": [1, 2]})
    store.add_trial(trial)
    store.add_event(None, "experiment_started", {"pid": 1})
    store.save_state("searcher", {"seen": [1, 2, 3]})
    store.flush()
    store.write_meta({"status": "finished"})  # upsert keeps the other keys
    store.save_state("searcher", {"seen": [1, 2, 3, 4]})
    store.close()

    with StoreReader(exp) as reader:
        meta = reader.meta()
        assert meta["metric"] == "loss" and meta["status"] == "finished"
        assert meta["param_space"] == {"lr": 1}
        assert reader.trials() == [trial]
        assert reader.trial("t0000").config == {"lr": 0.1, "nested": {"a": [1, 2]}}
        assert reader.state("searcher") == {"seen": [1, 2, 3, 4]}
        assert reader.state("scheduler") is None
        events = reader.events()
        assert [e["kind"] for e in events] == ["added", "experiment_started"]
        assert events[0]["trial_id"] == "t0000" and events[0]["data"]["config"]["lr"] == 0.1
        assert reader.events(kinds="experiment_started")[0]["data"] == {"pid": 1}
        assert reader.last_update() is not None


def test_nothing_is_written_before_flush(exp: Path) -> None:
    store = ExperimentStore(exp)
    store.add_trial(make_trial(exp, 0))
    store.add_result("t0000", result(1, loss=1.0))
    with StoreReader(exp) as reader:
        assert reader.trials() == [] and reader.all_results() == {}
        store.flush()
        assert len(reader.trials()) == 1  # the same open reader sees the new commit
        assert reader.results("t0000") == [result(1, loss=1.0)]
    store.close()


def test_many_updates_of_a_trial_write_its_state_at_flush(exp: Path) -> None:
    store = ExperimentStore(exp)
    trial = make_trial(exp, 0)
    store.add_trial(trial)
    for i in range(1, 6):
        trial.last_result = result(i, loss=1.0 / i)
        trial.num_results = i
        store.update_trial(trial)
    trial.status = TrialStatus.RUNNING  # changed after the last update_trial, before flush
    store.flush()
    store.close()
    with StoreReader(exp) as reader:
        (stored,) = reader.trials()
    assert stored.status is TrialStatus.RUNNING and stored.num_results == 5
    assert stored.iteration == 5


def test_results_come_in_the_order_they_were_reported(exp: Path) -> None:
    # A PBT trial that exploited another continues from the source's iteration, so
    # its iterations repeat: the order reported is the history, not the sort.
    with ExperimentStore(exp) as store:
        store.add_trial(make_trial(exp, 0))
        for it in (1, 2, 3, 2, 3):
            store.add_result("t0000", result(it, loss=float(it)))
    with StoreReader(exp) as reader:
        assert [r["training_iteration"] for r in reader.results("t0000")] == [1, 2, 3, 2, 3]


def test_nan_and_infinity_read_back(exp: Path) -> None:
    with ExperimentStore(exp) as store:
        trial = make_trial(exp, 0)
        trial.last_result = result(1, loss=math.nan)
        store.add_trial(trial)
        store.add_result("t0000", result(1, loss=math.nan, up=math.inf, down=-math.inf))
        store.add_checkpoint("t0000", 1, "/x", {"loss": math.nan})
    with StoreReader(exp) as reader:
        (row,) = reader.results("t0000")
        assert math.isnan(row["loss"]) and row["up"] == math.inf and row["down"] == -math.inf
        assert math.isnan(reader.checkpoints("t0000")[0][2]["loss"])
        last = reader.trial("t0000").last_result
        assert last is not None and math.isnan(last["loss"])


def test_values_json_cannot_take_are_converted_not_lost(exp: Path) -> None:
    np = pytest.importorskip("numpy")
    circular: dict[str, Any] = {}
    circular["self"] = circular
    with ExperimentStore(exp) as store:
        store.add_trial(make_trial(exp, 0))
        store.add_result("t0000", result(1, loss=np.float32(0.5), n=np.int64(3), v=np.arange(3)))
        store.add_result("t0000", result(2, obj=object(), keys={(1, 2): "tuple key"}))
        store.add_result("t0000", result(3, loop=circular))
        store.add_result("t0000", result(4, loss=0.25))
    with StoreReader(exp) as reader:
        rows = reader.results("t0000")
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["loss"] == 0.5 and rows[0]["n"] == 3 and rows[0]["v"] == [0, 1, 2]
    assert rows[1]["obj"].startswith("<object object") and rows[1]["keys"] == {
        "(1, 2)": "tuple key"
    }
    assert isinstance(rows[2]["loop"]["self"], dict)
    assert rows[3]["loss"] == 0.25


@settings(max_examples=40, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=10,
    )
)
def test_encoding_round_trips_every_json_value(value: Any) -> None:
    back = decode(encode(value))
    # What is stored is the value with its secrets hidden (a key such as "Passphrase"
    # holds "***" even when empty); everything else comes back exactly.
    # NaN != NaN: compare through a canonical text form instead.
    assert json.dumps(back, sort_keys=True) == json.dumps(redact(value), sort_keys=True)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.none() | st.floats() | st.text() | st.lists(st.integers()), max_size=6))
def test_many_texts_decode_at_once_as_each_alone(values: list[Any]) -> None:
    texts = [encode(v) for v in values]
    together = decode_many(texts)
    assert json.dumps(together) == json.dumps([decode(t) for t in texts])


@pytest.mark.parametrize("bad", ["1,2", "", "[1", '"a', "{}x"])
def test_texts_that_are_not_one_value_each_are_not_decoded_at_once(bad: str) -> None:
    assert decode_many(["1", bad, "2]" if bad == "[1" else "3"]) is None


def test_bytes_texts_decode_at_once_unless_not_utf8() -> None:
    assert decode_many([b'{"a": 1}', "2", None]) == [{"a": 1}, 2, None]
    assert decode_many([b"\xff", "2"]) is None  # then one by one: its own error


def test_decode_each_reads_chunks_at_once_and_names_a_bad_text_by_its_own_error() -> None:
    texts = [encode({"i": i}) for i in range(DECODED_AT_ONCE + 5)]  # two chunks
    assert decode_each(texts) == [{"i": i} for i in range(DECODED_AT_ONCE + 5)]
    assert decode_each([]) == []
    texts[DECODED_AT_ONCE + 2] = '{"i": '  # damaged, in the second chunk
    with pytest.raises(json.JSONDecodeError, match="Expecting value"):
        decode_each(texts)


def test_kept_checkpoints_and_all_results_read_every_row(exp: Path) -> None:
    with ExperimentStore(exp) as store:
        for i in range(3):
            store.add_trial(make_trial(exp, i, x=i))
            for it in (1, 2):
                store.add_result(f"t{i:04d}", {"training_iteration": it, "loss": i + it})
                store.add_checkpoint(f"t{i:04d}", it, f"/c/{i}/{it}", {"loss": i + it})
        kept = store.kept_checkpoints()
    assert kept == [
        (f"t{i:04d}", f"/c/{i}/{it}", {"loss": i + it}) for i in range(3) for it in (1, 2)
    ]
    with StoreReader(exp) as reader:
        results = reader.all_results()
    assert {tid: [r["loss"] for r in rs] for tid, rs in results.items()} == {
        f"t{i:04d}": [i + 1, i + 2] for i in range(3)
    }


def test_a_damaged_trial_among_many_is_named(exp: Path) -> None:
    with ExperimentStore(exp) as store:
        for i in range(700):  # more than one chunk of rows read at once
            store.add_trial(make_trial(exp, i, x=i))
    with sqlite3.connect(exp / "experiment.db") as db:
        db.execute("UPDATE trials SET data = '{\"trial_id\": ' WHERE idx = 600")
    with StoreReader(exp) as reader, pytest.raises(ValueError, match=r"trial 't0600'.*unreadable"):
        reader.trials()
    with sqlite3.connect(exp / "experiment.db") as db:
        db.execute("DELETE FROM trials WHERE idx = 600")
    with StoreReader(exp) as reader:
        trials = reader.trials()
    assert [t.config["x"] for t in trials] == [i for i in range(700) if i != 600]
    assert trials[0].last_result == {} and trials[699 - 1].trial_id == "t0699"


def test_encoding_hides_secret_keys_even_when_empty() -> None:
    assert decode(encode({"Passphrase": "", "lr": 0.1, "n": [1, "a"]})) == {
        "Passphrase": "***",
        "lr": 0.1,
        "n": [1, "a"],
    }


def test_checkpoints_and_deletion(exp: Path) -> None:
    with ExperimentStore(exp) as store:
        store.add_trial(make_trial(exp, 0))
        for it in (1, 2, 3):
            store.add_checkpoint("t0000", it, f"/ckpt/{it}", {"loss": 1.0 / it})
        store.mark_checkpoint_deleted("/ckpt/1")  # in the same batch as its insert
        store.flush()
        store.mark_checkpoint_deleted("/ckpt/2")
    with StoreReader(exp) as reader:
        assert reader.checkpoints("t0000") == [(3, "/ckpt/3", {"loss": 1.0 / 3})]
        assert [c[0] for c in reader.checkpoints("t0000", include_deleted=True)] == [1, 2, 3]
        assert reader.all_checkpoints()["t0000"][0][1] == "/ckpt/3"


def test_events_filter_by_trial_and_kind(exp: Path) -> None:
    with ExperimentStore(exp) as store:
        for i in range(2):
            store.add_trial(make_trial(exp, i))
            store.add_event(f"t{i:04d}", "started", {"epoch": 1})
        failure = FailureRecord(kind=FailureKind.CRASH, message="boom", exit_code=3)
        store.add_event("t0001", "failed", failure.to_json())
    with StoreReader(exp) as reader:
        assert len(reader.events()) == 5
        assert [e["kind"] for e in reader.events("t0001")] == ["added", "started", "failed"]
        (failed,) = reader.events(kinds=["failed"])
        assert FailureRecord.from_json(failed["data"]).exit_code == 3
        assert len(reader.events("t0000", kinds=("started", "failed"))) == 1
        seqs = [e["seq"] for e in reader.events()]
        assert seqs == sorted(seqs)


def test_unknown_trial_is_a_keyerror_listing_valid_ids(exp: Path) -> None:
    with ExperimentStore(exp) as store:
        for i in range(7):
            store.add_trial(make_trial(exp, i))
    with StoreReader(exp) as reader:
        for call in (reader.trial, reader.results, reader.checkpoints):
            with pytest.raises(KeyError, match=r"t0009.*did you mean.*t0000, t0001.*7 in all"):
                call("t0009")
        assert reader.results("t0003") == []  # a known trial without results


def test_reader_of_a_missing_experiment(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="No experiment database"):
        StoreReader(tmp_path / "nothing")


class _CommitHook:
    """Wraps the writer's connection to run `hook` inside flush(), just before COMMIT."""

    def __init__(self, conn: sqlite3.Connection, hook: Any) -> None:
        self.conn, self.hook = conn, hook

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self.hook()
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


_READER_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from tunefleet.store import StoreReader
    start = time.perf_counter()
    with StoreReader(sys.argv[1]) as reader:
        out = {
            "trials": [t.trial_id for t in reader.trials()],
            "results": {k: len(v) for k, v in reader.all_results().items()},
            "meta": reader.meta().get("status"),
        }
    out["seconds"] = time.perf_counter() - start
    print(json.dumps(out))
    """
)


def _read_in_other_process(exp: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}
    proc = subprocess.run(
        [sys.executable, "-c", _READER_SCRIPT, str(exp)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=True,
    )
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_reader_in_another_process_sees_committed_data_only_and_never_blocks(exp: Path) -> None:
    store = ExperimentStore(exp)
    store.write_meta({"status": "running"})
    store.add_trial(make_trial(exp, 0))
    store.add_result("t0000", result(1, loss=1.0))
    store.flush()  # committed

    store.write_meta({"status": "finished"})
    store.add_trial(make_trial(exp, 1))
    store.add_result("t0000", result(2, loss=0.5))
    seen: dict[str, Any] = {}

    def read_during_transaction() -> None:  # the write lock is held, rows are uncommitted
        seen.update(_read_in_other_process(exp))

    store._conn = _CommitHook(store._db, read_during_transaction)  # type: ignore[assignment]
    store.flush()
    assert seen["trials"] == ["t0000"]
    assert seen["results"] == {"t0000": 1} and seen["meta"] == "running"
    assert seen["seconds"] < 5.0  # it did not wait for the writer's lock
    store.close()

    after = _read_in_other_process(exp)
    assert after["trials"] == ["t0000", "t0001"] and after["results"]["t0000"] == 2
    assert after["meta"] == "finished"


def test_an_open_reader_does_not_block_the_writer(exp: Path) -> None:
    store = ExperimentStore(exp)
    store.add_trial(make_trial(exp, 0))
    store.flush()
    reader = StoreReader(exp)
    assert len(reader.trials()) == 1
    for i in range(1, 6):  # a blocked writer would raise "database is locked" here
        store.add_result("t0000", result(i, loss=1.0))
        store.flush()
    assert len(reader.results("t0000")) == 5
    reader.close()
    store.close()


def test_failed_flush_rolls_back_and_keeps_the_buffer(exp: Path) -> None:
    store = ExperimentStore(exp)
    store.add_trial(make_trial(exp, 0))
    store.add_result("t0000", result(1, loss=1.0))

    def fail() -> None:
        raise sqlite3.OperationalError("disk I/O error (simulated)")

    real = store._db
    store._conn = _CommitHook(real, fail)  # type: ignore[assignment]
    with pytest.raises(StoreWriteError, match=r"could not write 1 result\(s\).*simulated"):
        store.flush()
    store._conn = real
    with StoreReader(exp) as reader:
        assert reader.trials() == []  # rolled back
    store.flush()  # the retry writes everything once
    store.close()
    with StoreReader(exp) as reader:
        assert len(reader.trials()) == 1 and len(reader.results("t0000")) == 1
        assert len(reader.events()) == 1


def test_ten_thousand_results_in_batches(exp: Path) -> None:
    store = ExperimentStore(exp)
    trials = [make_trial(exp, i) for i in range(100)]
    for trial in trials:
        store.add_trial(trial)
    store.flush()
    calls = flushes = 0.0
    for step in range(20):  # 20 controller steps of 500 results each
        start = time.perf_counter()
        for trial in trials:
            for k in range(5):
                it = step * 5 + k + 1
                trial.last_result = result(it, loss=1.0 / it, acc=0.5, time_total_s=it * 0.1)
                store.add_result(trial.trial_id, trial.last_result)
                store.update_trial(trial)
        calls += time.perf_counter() - start
        start = time.perf_counter()
        store.flush()
        flushes += time.perf_counter() - start
    store.close()
    n = 100 * 100
    print(
        f"\n{n} results: {calls / n * 1e6:.1f} us per add_result+update_trial, "
        f"{flushes / 20 * 1e3:.1f} ms per flush of 500 results + 100 trials"
    )
    with StoreReader(exp) as reader:
        everything = reader.all_results()
        assert sum(len(v) for v in everything.values()) == n
        assert [r["training_iteration"] for r in everything["t0042"]] == list(range(1, 101))
        assert reader.trial("t0099").iteration == 100


def test_resume_reopens_and_keeps_appending(exp: Path) -> None:
    store = ExperimentStore(exp)
    store.write_meta({"name": "exp", "status": "running"})
    trial = make_trial(exp, 0, lr=0.1)
    store.add_trial(trial)
    store.add_result("t0000", result(1, loss=1.0))
    store.save_state("scheduler", {"rungs": [1]})
    store.close()

    store = ExperimentStore(exp)  # resume
    assert store.load_meta()["status"] == "running"
    assert store.load_meta()["schema_version"] == SCHEMA_VERSION
    (restored,) = store.load_trials()
    assert restored == trial
    assert store.load_state("scheduler") == {"rungs": [1]}
    assert store.load_state("missing") is None
    restored.status = TrialStatus.RUNNING
    store.update_trial(restored)
    store.add_result("t0000", result(2, loss=0.5))
    store.add_trial(make_trial(exp, 1))
    store.add_event("t0000", "started", {"epoch": 2})
    store.close()
    store.close()  # twice is harmless

    with StoreReader(exp) as reader:
        assert [r["loss"] for r in reader.results("t0000")] == [1.0, 0.5]
        assert reader.trial("t0000").status is TrialStatus.RUNNING
        assert [e["kind"] for e in reader.events()] == ["added", "added", "started"]


def test_a_newer_schema_is_refused(exp: Path) -> None:
    ExperimentStore(exp).close()
    conn = sqlite3.connect(exp / "experiment.db")
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError, match="schema version 99"):
        ExperimentStore(exp)


def test_using_a_closed_store_is_a_clear_error(exp: Path) -> None:
    store = ExperimentStore(exp)
    store.close()
    store.add_event(None, "late")
    with pytest.raises(RuntimeError, match="closed"):
        store.flush()


def test_paths_of_a_moved_experiment_point_into_its_new_place(tmp_path: Path) -> None:
    old = tmp_path / "old" / "exp"
    with ExperimentStore(old) as store:
        trial = make_trial(old, 0)
        ckpt = Path(trial.path, "checkpoints", "checkpoint_000001")
        ckpt.mkdir(parents=True)
        trial.latest_checkpoint = str(ckpt)
        store.add_trial(trial)
        store.add_checkpoint("t0000", 1, str(ckpt), {})
    new = tmp_path / "new" / "exp"
    shutil.move(str(old), str(new))
    with StoreReader(new) as reader:
        moved = reader.trial("t0000")
        assert moved.path == str(new.resolve() / "trials" / "t0000")
        assert moved.latest_checkpoint == str(Path(moved.path, "checkpoints", "checkpoint_000001"))
        assert reader.checkpoints("t0000")[0][1] == moved.latest_checkpoint


def test_default_storage_path_and_resolving_experiments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUNEFLEET_STORAGE", raising=False)
    assert default_storage_path() == os.path.expanduser("~/tunefleet_results")
    monkeypatch.setenv("TUNEFLEET_STORAGE", str(tmp_path))
    assert default_storage_path() == str(tmp_path)
    for name in ("beta", "alpha"):
        ExperimentStore(tmp_path / name).close()
    (tmp_path / "not_an_experiment").mkdir()
    assert [p.name for p in list_experiments()] == ["alpha", "beta"]
    assert list_experiments(tmp_path / "missing") == []

    alpha = (tmp_path / "alpha").resolve()
    assert resolve_experiment("alpha") == alpha
    assert resolve_experiment(str(tmp_path / "alpha")) == alpha
    assert resolve_experiment(str(tmp_path / "alpha" / "experiment.db")) == alpha
    with pytest.raises(FileNotFoundError, match=r"'alpah'.*Did you mean 'alpha'.*alpha, beta"):
        resolve_experiment("alpah")
    with pytest.raises(FileNotFoundError, match="no experiments under"):
        resolve_experiment("x", storage_path=tmp_path / "empty")
