"""`tune.with_parameters` objects go by reference: written once per experiment, read once
per worker process, never pickled into the trainable file or a trial's launch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pytest

import tunefleet as tune
from tunefleet import _params_ref

BIG = 100 * 1024 * 1024  # bytes: 100 MB


def uses_data(config: dict[str, Any], data: np.ndarray) -> None:
    from tunefleet import _params_ref as ref

    meta = Path(tune.get_context().get_trial_dir()).parents[1] / ".tunefleet"
    tune.report(
        {
            "total": float(data[:10].sum()) + config["k"],
            "nbytes": data.nbytes,
            "files_read": ref.files_read,  # in this worker process, so far
            "trainable_file_bytes": (meta / "trainable.pkl").stat().st_size,
            "spilled": len(list(meta.glob("params_*.pkl"))),
        }
    )


def test_large_parameters_pickle_as_a_reference(tmp_path: Path) -> None:
    data = np.ones(BIG // 8)
    wrapped = tune.with_parameters(uses_data, data=data)
    with _params_ref.spill_to(str(tmp_path)):
        first = cloudpickle.dumps(wrapped)
        second = cloudpickle.dumps(wrapped)
    assert len(first) < 100_000 and len(second) < 100_000
    assert len(list(tmp_path.glob("params_*.pkl"))) == 1  # written once
    _params_ref._loaded.clear()  # as in a fresh worker process
    before = _params_ref.files_read
    a, b = cloudpickle.loads(first), cloudpickle.loads(second)
    assert _params_ref.files_read == before + 1  # read once, then kept by hash
    assert a.params["data"] is b.params["data"]
    assert a.params["data"].nbytes == BIG


def test_small_parameters_and_no_spill_directory_stay_inline(tmp_path: Path) -> None:
    small = tune.with_parameters(uses_data, data=np.ones(10))
    with _params_ref.spill_to(str(tmp_path)):
        cloudpickle.dumps(small)
    cloudpickle.dumps(tune.with_parameters(uses_data, data=np.ones(BIG // 8 // 10)))
    assert not list(tmp_path.glob("params_*.pkl"))


def test_a_changed_parameters_file_is_refused(tmp_path: Path) -> None:
    wrapped = tune.with_parameters(uses_data, data=np.ones(BIG // 8 // 50))
    with _params_ref.spill_to(str(tmp_path)):
        payload = cloudpickle.dumps(wrapped)
    (path,) = tmp_path.glob("params_*.pkl")
    path.write_bytes(path.read_bytes() + b"x")
    _params_ref._loaded.clear()
    with pytest.raises(RuntimeError, match="sha256"):
        cloudpickle.loads(payload)


def test_a_100_mb_array_is_read_once_per_worker(storage: str) -> None:
    data = np.ones(BIG // 8)
    grid = tune.Tuner(
        tune.with_parameters(uses_data, data=data),
        param_space={"k": tune.grid_search([1, 2, 3, 4])},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0 and len(grid) == 4
    for result in grid:
        metrics = result.metrics or {}
        assert metrics["total"] == 10.0 + result.config["k"]
        assert metrics["nbytes"] == BIG
        assert metrics["files_read"] == 1  # the second trial in a worker read nothing
        assert metrics["trainable_file_bytes"] < 100_000
        assert metrics["spilled"] == 1
    assert not list(Path(grid.experiment_path, ".tunefleet").glob("params_*.pkl"))
    pids = [(r.metrics or {})["pid"] for r in grid]
    assert len(set(pids)) < len(pids)  # a worker ran several trials and read the file once
