"""The fault suite on the Ray backend, for the faults that apply there.

The same trainable, faults and invariants as `test_fault_matrix.py`; trials run as Ray
actors on a local Ray. Ray keeps its worker processes for reuse, so the processes
checked are those a trial started (forked children, daemons), not the actors'.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.faults._faulty import DriverFault
from tests.faults.test_fault_matrix import (
    Ctx,
    assert_nothing_unfinished_is_finished,
    check_invariants,
    experiment,
    fit,
    restore,
    spec_of,
)
from tunefleet.results import TrialError

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow
STARTED = ("child", "daemon")  # the processes of a trial's own, on Ray


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    from tests.helpers.ray_trainables import shutdown_and_check

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    shutdown_and_check(before)


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    """Overrides conftest's: Ray keeps idle workers; `local_ray` checks them at the end."""
    yield


@pytest.fixture
def ctx(tmp_path: Path, storage: str, local_ray: None) -> Ctx:
    return Ctx(tmp_path, storage)


@pytest.mark.parametrize(
    ("fault", "cause"),
    [("raise", "planned failure"), ("sigkill_mid_checkpoint", ""), ("fork_child", "")],
)
def test_a_fault_in_a_trial_on_ray(ctx: Ctx, fault: str, cause: str) -> None:
    config = ctx.config(fault=fault, at=3, who=1, ckpt_bytes=4 << 20)
    fit(spec_of(ctx, config=config, failure={"max_failures": 1}, backend="ray"))
    check_invariants(ctx, experiment(ctx), roles=STARTED)


def test_an_exception_in_a_callback_on_ray(ctx: Ctx) -> None:
    flag = str(ctx.root / "raised")
    spec = spec_of(ctx, config=ctx.config(), raiser=["callback", 2, flag], backend="ray")
    with pytest.raises(DriverFault, match="callback raised"):
        fit(spec)
    assert_nothing_unfinished_is_finished(experiment(ctx))
    restore(ctx)
    check_invariants(ctx, experiment(ctx), roles=STARTED)


def test_fail_fast_on_ray_leaves_running_siblings_resumable(ctx: Ctx) -> None:
    config = ctx.config(
        fault="raise",
        at=2,
        who=1,
        fault_after=str(ctx.pids / "step-2-2"),
        hold=[str(ctx.root / "release"), 2],
    )
    with pytest.raises(TrialError, match="planned failure"):
        fit(spec_of(ctx, config=config, failure={"fail_fast": "raise"}, backend="ray"))
    assert_nothing_unfinished_is_finished(experiment(ctx))
    Path(ctx.root / "release").touch()
    restore(ctx)
    check_invariants(ctx, experiment(ctx), errors={1: "planned failure"}, roles=STARTED)
