"""A worker whose trainable's module hangs while importing is killed after
`worker_start_timeout_s`; its trial fails as TIMEOUT naming the module, the others run.

The hang is real and endless (the module waits for a file nobody writes), so a busy
machine can only make the test slower, never make it pass wrongly.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

import tunefleet as tune
from tests.helpers.processes import pid_alive
from tests.helpers.results import metrics_of
from tunefleet.backends.local import LocalBackend

MODULE = "tf_hangs_at_import"

# The driver imports it (no env var) so the trainable pickles by reference; the first
# worker to import it claims it and blocks for good, later workers import it normally.
SOURCE = """
import os
import sys
import time

import tunefleet as tune

_DIR = os.environ.get("TF_TEST_HANG_DIR")
if _DIR:
    try:
        fd = os.open(os.path.join(_DIR, "claimed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        pass
    else:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        print("import: waiting for the release file", file=sys.stderr, flush=True)
        while not os.path.exists(os.path.join(_DIR, "release")):
            time.sleep(0.05)


def train(config):
    tune.report(loss=float(config["i"]))
"""


@pytest.mark.timeout(180)
def test_a_worker_hung_importing_the_trainable_is_killed_and_the_experiment_goes_on(
    storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(code))
    module = importlib.import_module(MODULE)
    monkeypatch.setitem(sys.modules, MODULE, module)  # removed again after the test
    monkeypatch.setenv("TF_TEST_HANG_DIR", str(tmp_path))  # for the workers only
    grid = tune.Tuner(
        module.train,
        param_space={"i": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            failure_config=tune.FailureConfig(worker_start_timeout_s=2),
        ),
    ).fit()
    by_i = {r.config["i"]: r for r in grid}
    hung_pid = int((tmp_path / "claimed").read_text())  # the first trial's worker
    err = by_i[0].error
    assert err is not None and err.failure.kind is tune.FailureKind.TIMEOUT
    message = err.failure.message
    assert "hung while loading the trainable" in message, message
    assert f"module '{MODULE}'" in message and "train" in message, message
    assert "worker_start_timeout_s=2" in message, message
    assert "waiting for the release file" in (err.failure.stderr_tail or "")
    assert by_i[1].error is None and metrics_of(by_i[1])["loss"] == 1.0  # it went on
    assert not pid_alive(hung_pid), "the hung worker was killed"


def test_a_bad_start_timeout_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=r"FailureConfig.worker_start_timeout_s=0 .* > 0"):
        tune.FailureConfig(worker_start_timeout_s=0).validate()
    monkeypatch.setenv("TUNEFLEET_WORKER_START_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match=r"\$TUNEFLEET_WORKER_START_TIMEOUT_S='soon' .* > 0"):
        LocalBackend(trainable=len, experiment_name="x", experiment_path=str(tmp_path))
