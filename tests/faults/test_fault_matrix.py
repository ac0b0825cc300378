"""The fault suite: each fault against a real experiment, the same invariants every time.

Every scenario runs `_faulty.faulty` trials (a checkpoint at every iteration) on the
local backend (and the Ray backend where the fault applies), injects one fault, resumes
the experiment when the fault interrupted it, and then checks (`check_invariants`):

- no trial is marked finished that did not finish: a TERMINATED trial has every one
  of its iterations, and what was interrupted was left resumable (PAUSED or PENDING);
- every iteration is recorded exactly once, and the trial's own count agrees (it
  resumed from its checkpoint, not from scratch);
- no process of a trial survives (trials, forked children, daemons);
- every failure names its cause (a kind and a message; the expected text where the
  scenario has one).

The moments of the faults are events (a trial holds at an iteration until the suite
releases it; a fault waits until a sibling surely runs), never sleeps, so a busy
machine changes only how long a scenario takes. `benchmarks/RESULTS.md` records the
faults tried and survived.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.faults._faulty import DriverFault, build, faulty
from tests.helpers.paths import REPO
from tests.helpers.processes import pid_alive
from tests.helpers.scripts import script_env
from tunefleet.results import TrialError
from tunefleet.store import StoreReader
from tunefleet.store._check import CorruptStoreError

N = 5  # iterations of every trial


@dataclass
class Ctx:
    """The folders of one scenario: pids and step marks, once-flags, storage."""

    root: Path
    storage: str
    pids: Path = field(init=False)
    once: Path = field(init=False)

    def __post_init__(self) -> None:
        self.pids = self.root / "pids"
        self.once = self.root / "once"
        self.pids.mkdir()
        self.once.mkdir()

    def config(self, **extra: Any) -> dict[str, Any]:
        return {"n": N, "pids": str(self.pids), "once": str(self.once), **extra}

    def wait_for_steps(self, names: list[str], driver: subprocess.Popen[str] | None = None) -> None:
        """Wait until every `step-X-I` mark in `names` exists (the trials got there)."""
        deadline = time.monotonic() + 300  # a safety net; the marks are the event
        while not all((self.pids / n).exists() for n in names):
            if driver is not None and driver.poll() is not None:
                out = driver.stdout.read() if driver.stdout else ""
                raise AssertionError(f"the driver ended early ({driver.returncode}):\n{out}")
            assert time.monotonic() < deadline, f"the trials never reached {names}"
            time.sleep(0.02)


@pytest.fixture
def ctx(tmp_path: Path, storage: str) -> Ctx:
    return Ctx(tmp_path, storage)


def spec_of(ctx: Ctx, **spec: Any) -> dict[str, Any]:
    return {"storage": ctx.storage, "name": "exp", **spec}


def experiment(ctx: Ctx) -> str:
    return str(Path(ctx.storage, "exp"))


# -- the invariants ---------------------------------------------------------------------------
def assert_nothing_unfinished_is_finished(path: str, n: int = N) -> None:
    """A TERMINATED trial ran all its iterations; every other one is resumable or failed."""
    with StoreReader(path) as reader:
        for trial in reader.trials():
            iterations = [r["training_iteration"] for r in reader.results(trial.trial_id)]
            if trial.status is tune.TrialStatus.TERMINATED:
                assert iterations and iterations[-1] == n, (trial.trial_id, iterations)
            else:
                assert trial.status in (  # RUNNING: as a driver that died left it
                    tune.TrialStatus.RUNNING,
                    tune.TrialStatus.PAUSED,
                    tune.TrialStatus.PENDING,
                    tune.TrialStatus.ERROR,
                ), (trial.trial_id, trial.status)


def check_invariants(
    ctx: Ctx,
    path: str,
    *,
    errors: dict[int, str] | None = None,
    n: int = N,
    roles: tuple[str, ...] = ("trial", "child", "daemon", "hung"),
) -> None:
    """The four invariants; `errors`: x of each trial that must end ERROR -> cause text."""
    errors = errors or {}
    with StoreReader(path) as reader:
        trials = reader.trials()
        assert trials, "no trial was recorded"
        for trial in trials:
            x = trial.config["x"]
            results = reader.results(trial.trial_id)
            iterations = [r["training_iteration"] for r in results]
            assert iterations == list(range(1, len(iterations) + 1)), (x, iterations)
            assert [r["i"] for r in results] == iterations, (x, "resumed from scratch?")
            failed = [e for e in reader.events(trial.trial_id) if e["kind"] == "failed"]
            for event in failed:
                data = event["data"]
                assert data.get("kind") and data.get("message"), ("a failure without cause", data)
            if x in errors:
                assert trial.status is tune.TrialStatus.ERROR, (x, trial.status)
                assert trial.error is not None and errors[x] in trial.error.message, (
                    x,
                    trial.error,
                )
            else:
                assert trial.status is tune.TrialStatus.TERMINATED, (x, trial.status, trial.error)
                assert len(iterations) == n, (x, iterations)
    assert_no_process_survives(ctx, roles)


def assert_no_process_survives(
    ctx: Ctx, roles: tuple[str, ...] = ("trial", "child", "daemon", "hung")
) -> None:
    """No process a trial ran in or started is alive (Ray's pooled workers: `roles`)."""
    pids = [int(p.read_text()) for p in ctx.pids.iterdir() if p.name.split("-")[0] in roles]
    pids = [p for p in pids if p != os.getpid()]
    deadline = time.monotonic() + 60  # a SIGKILLed process needs a moment to be reaped
    while (alive := [p for p in pids if pid_alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"processes of trials survived: {alive}"


def failures(path: str) -> list[dict[str, Any]]:
    """The data of every "failed" event of every trial."""
    with StoreReader(path) as reader:
        return [
            e["data"]
            for t in reader.trials()
            for e in reader.events(t.trial_id)
            if e["kind"] == "failed"
        ]


def fit(spec: dict[str, Any]) -> tune.ResultGrid:
    return tune.Tuner(**build(spec)).fit()


def restore(ctx: Ctx, **kwargs: Any) -> tune.ResultGrid:
    path = experiment(ctx)
    assert tune.Tuner.can_restore(path)
    return tune.Tuner.restore(path, faulty, **kwargs).fit()


# -- faults inside a trial --------------------------------------------------------------------
@dataclass(frozen=True)
class TrialFault:
    fault: str
    at: int = 3
    failure: dict[str, Any] = field(default_factory=lambda: {"max_failures": 1})
    extra: dict[str, Any] = field(default_factory=dict)
    cause: str = ""  # text the failure event must hold
    run: dict[str, Any] = field(default_factory=dict)


TRIAL_FAULTS = {
    "exception, retried": TrialFault("raise", cause="planned failure"),
    "sigkill mid-checkpoint, retried": TrialFault(
        "sigkill_mid_checkpoint", extra={"ckpt_bytes": 8 << 20}, cause="SIGKILL"
    ),
    "sigstop past the heartbeat": TrialFault(
        "sigstop", failure={"max_failures": 1, "heartbeat_timeout_s": 5}, cause="heartbeat"
    ),
    "hang in C holding the GIL": TrialFault(
        "hang_in_c", failure={"max_failures": 1, "heartbeat_timeout_s": 5}, cause="heartbeat"
    ),
    "forked child": TrialFault("fork_child"),
    "daemonised grandchild": TrialFault("daemon"),
    "nan in a batch (worst)": TrialFault("nan", failure={}),
    "ignores SIGTERM after its last report": TrialFault(
        "none", extra={"linger": True}, run={"stop": {"training_iteration": N}}
    ),
}


@pytest.mark.parametrize("case", list(TRIAL_FAULTS), ids=list(TRIAL_FAULTS))
def test_a_fault_in_a_trial(ctx: Ctx, case: str) -> None:
    fault = TRIAL_FAULTS[case]
    config = ctx.config(fault=fault.fault, at=fault.at, who=1, **fault.extra)
    fit(spec_of(ctx, config=config, failure=fault.failure, **fault.run))
    check_invariants(ctx, experiment(ctx))
    failed = failures(experiment(ctx))
    if fault.cause:
        assert failed and all(fault.cause in json.dumps(f) for f in failed), failed
    if fault.fault in ("fork_child", "daemon"):  # they ran, and were killed
        assert any(p.name.startswith(("child-", "daemon-")) for p in ctx.pids.iterdir())


def test_nan_in_a_batch_with_nan_policy_error(ctx: Ctx) -> None:
    """The trial that reported NaN fails, naming it; its sibling, mid-batch, finishes."""
    config = ctx.config(fault="nan", at=2, who=1, fault_after=str(ctx.pids / "step-2-2"))
    fit(spec_of(ctx, config=config, failure={"nan_policy": "error"}))
    check_invariants(ctx, experiment(ctx), errors={1: "is nan"})


# -- faults in the driver's user code ----------------------------------------------------------
DRIVER_CODE = ["callback", "stopper", "scheduler", "searcher"]


@pytest.mark.parametrize("kind", DRIVER_CODE)
def test_an_exception_in_user_code_in_the_driver(ctx: Ctx, kind: str) -> None:
    """fit() re-raises it; running trials stay resumable; a restore ends them exactly."""
    flag = str(ctx.root / "raised")
    spec = spec_of(ctx, config=ctx.config(), raiser=[kind, 2, flag])
    with pytest.raises(DriverFault, match=f"{kind} raised"):
        fit(spec)
    assert_nothing_unfinished_is_finished(experiment(ctx))
    kwargs: dict[str, Any] = {}
    if kind == "stopper":  # a Stopper is not stored: passed again, as Ray asks too
        kwargs["run_config"] = build(spec)["run_config"]
    if kind in ("searcher", "scheduler"):  # passed again; its saved state is loaded into it
        kwargs["tune_config"] = build(spec)["tune_config"]
    restore(ctx, **kwargs)
    check_invariants(ctx, experiment(ctx))


def test_fail_fast_leaves_running_siblings_resumable(ctx: Ctx) -> None:
    config = ctx.config(
        fault="raise",
        at=2,
        who=1,
        fault_after=str(ctx.pids / "step-2-2"),
        hold=[str(ctx.root / "release"), 2],
    )
    with pytest.raises(TrialError, match="planned failure"):
        fit(spec_of(ctx, config=config, failure={"fail_fast": "raise"}))
    assert_nothing_unfinished_is_finished(experiment(ctx))
    Path(ctx.root / "release").touch()
    restore(ctx)
    check_invariants(ctx, experiment(ctx), errors={1: "planned failure"})


# -- faults of the driver process ---------------------------------------------------------------
def start_driver(ctx: Ctx, spec: dict[str, Any]) -> subprocess.Popen[str]:
    spec_file = ctx.root / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = script_env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env["PYTHONPATH"]])
    return subprocess.Popen(
        [sys.executable, "-m", "tests.faults._driver", str(spec_file)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize(
    ("sig", "exit_code"),
    [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, 143), (signal.SIGINT, 0)],
    ids=["SIGKILL", "SIGTERM", "SIGINT"],
)
def test_the_driver_is_signalled_mid_run(ctx: Ctx, sig: signal.Signals, exit_code: int) -> None:
    """Both trials hold mid-run (a daemon running beside one); the driver gets `sig`."""
    release = ctx.root / "release"
    config = ctx.config(fault="daemon", at=2, who=1, hold=[str(release), 3])
    driver = start_driver(ctx, spec_of(ctx, config=config))
    ctx.wait_for_steps(["step-1-3", "step-2-3"], driver)
    driver.send_signal(sig)  # the driver alone: its workers must notice by themselves
    out, _ = driver.communicate(timeout=300)
    assert driver.returncode == exit_code, out
    assert ("DRIVER DONE" in out) is (sig is signal.SIGINT), out  # Ctrl-C: fit() returns
    assert_nothing_unfinished_is_finished(experiment(ctx))
    with StoreReader(experiment(ctx)) as reader:
        assert all(t.status is not tune.TrialStatus.TERMINATED for t in reader.trials())
    assert_no_process_survives(ctx)  # the daemon too, though the driver was SIGKILLed
    release.touch()
    restore(ctx)
    check_invariants(ctx, experiment(ctx))


# -- the disk fills up (a real small tmpfs: needs root) ------------------------------------------
@pytest.fixture
def small_storage(ctx: Ctx) -> Iterator[Path]:
    target = ctx.root / "small"
    target.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(target)]
    if os.geteuid() != 0 or subprocess.run(cmd, capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    ctx.storage = str(target)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_the_disk_fills_while_checkpointing(ctx: Ctx, small_storage: Path) -> None:
    """Checkpoints and the store fail with ENOSPC, named; once space is back, resume ends it.

    Nothing frees the disk during the run, so its last commit fails: `fit()` says so,
    naming the database, and what the store had recorded before stays intact.
    """
    filler = str(small_storage / "filler")
    config = ctx.config(fault="fill_disk", at=3, who=1, filler=filler)
    with pytest.raises(OSError, match=r"experiment.db could not write .* full"):
        fit(spec_of(ctx, config=config, concurrent=1))
    assert_nothing_unfinished_is_finished(experiment(ctx))
    os.remove(filler)
    restore(ctx, resume_errored=True)
    check_invariants(ctx, experiment(ctx))


def test_the_disk_fills_under_the_store(ctx: Ctx, small_storage: Path) -> None:
    """Results that arrive while the store cannot write are kept and written later."""
    filler = str(small_storage / "filler")
    config = ctx.config(fault="fill_disk", at=2, who=1, filler=filler, free_at=4, checkpoints=False)
    fit(spec_of(ctx, config=config))
    check_invariants(ctx, experiment(ctx))


# -- the driver SIGKILLed at a random moment ---------------------------------------------------
def results_recorded(path: str) -> int:
    if not Path(path, "experiment.db").exists():
        return 0
    with StoreReader(path) as reader:
        return sum(t.num_results for t in reader.trials())


def test_the_driver_is_sigkilled_at_a_random_moment(ctx: Ctx) -> None:
    """A random moment by progress (then up to 0.2 s more): mid-report, -checkpoint or
    -commit. `tests/engine/test_resume_e2e.py` kills the same way until the end."""
    rng = random.Random(int(os.environ.get("TUNEFLEET_CHAOS_SEED", "0")) or None)
    n = 12
    spec = spec_of(ctx, config=ctx.config(n=n, pause=0.05), trials=3)
    driver = start_driver(ctx, spec)
    target = rng.randint(2, 2 * n)
    while driver.poll() is None and results_recorded(experiment(ctx)) < target:
        time.sleep(0.02)
    time.sleep(rng.uniform(0.0, 0.2))
    driver.kill()
    driver.communicate(timeout=300)
    assert_nothing_unfinished_is_finished(experiment(ctx), n)
    assert_no_process_survives(ctx)
    restore(ctx)
    check_invariants(ctx, experiment(ctx), n=n)


# -- damaged files ------------------------------------------------------------------------------
def test_a_corrupt_latest_checkpoint_resumes_from_the_one_before(ctx: Ctx) -> None:
    """Interrupted, then its newest checkpoint is damaged: the resume skips it, saying why,
    goes on from the one before and records the iterations after that once."""
    release = ctx.root / "release"
    config = ctx.config(hold=[str(release), 4])
    driver = start_driver(ctx, spec_of(ctx, config=config, trials=1))
    ctx.wait_for_steps(["step-1-4"], driver)
    driver.send_signal(signal.SIGINT)
    driver.communicate(timeout=300)
    with StoreReader(experiment(ctx)) as reader:
        (trial,) = reader.trials()
        newest = trial.latest_checkpoint
    assert newest is not None and newest.endswith("3")
    weights = Path(newest, "weights")
    weights.write_bytes(b"\xff" + weights.read_bytes()[1:])  # one flipped byte
    release.touch()
    restore(ctx)
    check_invariants(ctx, experiment(ctx))
    with StoreReader(experiment(ctx)) as reader:
        (trial,) = reader.trials()
        kinds = [e["kind"] for e in reader.events(trial.trial_id)]
        assert "rewound" in kinds, kinds


def test_a_corrupt_store_is_named_and_never_written(ctx: Ctx) -> None:
    fit(spec_of(ctx, config=ctx.config()))
    db = Path(experiment(ctx), "experiment.db")
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)
    db.write_bytes(bytes(data))
    before = db.read_bytes()
    with pytest.raises(CorruptStoreError, match=r"experiment.db is damaged.*byte offset"):
        tune.Tuner.restore(experiment(ctx), faulty)
    assert db.read_bytes() == before
    assert_no_process_survives(ctx)


# -- a worker hangs while importing the trainable's module ---------------------------------------
HANGS = """
import os, time
from pathlib import Path
from tests.faults._faulty import faulty

marker = os.environ.get("FAULTS_HANG_MARKER")
if marker and os.path.exists(marker) and os.environ.get("FAULTS_IN_WORKER"):
    os.remove(marker)  # this worker hangs; the next one loads
    Path(os.environ["FAULTS_PIDS"], f"hung-{os.getpid()}").write_text(str(os.getpid()))
    while True:
        time.sleep(3600)


def train(config):
    faulty(config)
"""


def test_a_worker_hung_importing_the_trainable_is_killed_and_its_trial_retried(
    ctx: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first worker to load the trainable hangs in its module's import (for ever):
    the start-up timeout kills it, its trial fails naming the module and is retried on a
    new worker, and the experiment goes on."""
    module = ctx.root / "hangs_at_import.py"
    module.write_text(HANGS)
    monkeypatch.syspath_prepend(str(ctx.root))
    import hangs_at_import  # type: ignore[import-not-found]

    marker = ctx.root / "hang-armed"
    monkeypatch.setenv("FAULTS_HANG_MARKER", str(marker))
    monkeypatch.setenv("FAULTS_PIDS", str(ctx.pids))
    monkeypatch.setenv("FAULTS_IN_WORKER", "1")  # the driver imported the module already
    marker.touch()  # the first worker to start hangs
    kwargs = build(
        spec_of(
            ctx,
            config=ctx.config(),
            failure={"max_failures": 1, "worker_start_timeout_s": 5},
            concurrent=1,
        )
    )
    grid = tune.Tuner(**{**kwargs, "trainable": hangs_at_import.train}).fit()
    check_invariants(ctx, experiment(ctx))
    failed = failures(experiment(ctx))
    assert len(failed) == 1 and "hung while loading the trainable" in failed[0]["message"]
    assert "hangs_at_import" in failed[0]["message"]
    assert len(grid) == 2
