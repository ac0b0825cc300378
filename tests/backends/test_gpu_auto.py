"""``gpu="auto"``: the first trial runs alone on a whole GPU, its recorded GPU memory
decides how many trials share one, and a GPU_OOM is retried with a larger share.

No GPU is needed: the decision is tested on recorded peaks, the local backend's pool
with made-up device ids, and a real run on a declared GPU (``RunConfig(resources=
{"gpu": 1})``) whose trials report their own ``resources`` as torch's usage would.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.gpu_trainables import run_four_then_one
from tests.helpers.processes import meet
from tunefleet.backends._gpu_auto import (
    CONTEXT_MB,
    MARGIN,
    MAX_PER_GPU,
    SAFETY,
    GpuAuto,
    trials_per_gpu,
)
from tunefleet.backends._protocol import TrialFailed, TrialResults
from tunefleet.backends.local._resources import ResourcePool
from tunefleet.resources import GPU_AUTO, normalize_resources
from tunefleet.trainable import resources_of
from tunefleet.trial import FailureKind, FailureRecord

H100_MB = 81559.0
# A peak for which exactly 4 trials fit on an H100: 4 * (peak * 1.25 + 512) <= 0.9 * total.
PEAK_4 = 12000.0
AUTO = {"cpu": 1.0, "gpu": 1.0, GPU_AUTO: 1.0}


def usage(peak: float, total: float = H100_MB) -> dict[str, float]:
    return {"gpu_peak_mb": peak, "gpu_total_mb": total}


# -- the decision, on recorded peaks ---------------------------------------------------------
def test_k_follows_the_rule_with_its_margin_safety_and_context() -> None:
    assert trials_per_gpu(PEAK_4, H100_MB) == 4
    expected = int(H100_MB * (1 - MARGIN) // (PEAK_4 * (1 + SAFETY) + CONTEXT_MB))
    assert expected == 4
    assert trials_per_gpu(PEAK_4, H100_MB, margin=0.0, safety=0.0, context_mb=0.0) == 6
    assert trials_per_gpu(100_000.0, H100_MB) == 1, "a trial larger than the GPU: alone"
    assert trials_per_gpu(10.0, H100_MB) == MAX_PER_GPU == 16, "capped"
    assert trials_per_gpu(0.0, H100_MB, context_mb=0.0) == 1, "nothing measured: alone"


def test_the_first_trial_gets_a_whole_gpu_then_each_gets_one_kth() -> None:
    auto = GpuAuto()
    assert auto.resolve(AUTO) == {"cpu": 1.0, "gpu": 1.0}, "no peak yet: a whole GPU"
    assert auto.resolve({"cpu": 2.0, "gpu": 0.5}) == {"cpu": 2.0, "gpu": 0.5}
    assert not auto.observe({"cpu_percent": 90.0}), "no GPU usage: nothing decided"
    assert not auto.observe({"gpu_peak_mb": PEAK_4}), "no total: nothing decided"
    assert auto.observe({"gpu_total_mb": H100_MB})
    assert auto.per_gpu == 4 and auto.resolve(AUTO) == {"cpu": 1.0, "gpu": 0.25}


def test_the_largest_peak_of_several_trials_decides() -> None:
    auto = GpuAuto()
    auto.observe(usage(1000.0))
    assert auto.per_gpu == MAX_PER_GPU
    assert auto.observe(usage(PEAK_4)), "a larger peak: fewer trials per GPU"
    assert not auto.observe(usage(500.0)), "a smaller one later changes nothing"
    assert auto.peak_mb == PEAK_4 and auto.per_gpu == 4
    auto.observe(usage(1000.0, total=40960.0))  # a smaller GPU among them
    assert auto.total_mb == 40960.0 and auto.per_gpu == 2


def test_a_gpu_oom_halves_k_down_to_a_whole_gpu_then_counts() -> None:
    auto = GpuAuto()
    auto.observe(usage(10.0))
    assert auto.per_gpu == 16
    grown: list[object] = []
    for _ in range(5):
        grown += [auto.on_gpu_oom(auto.share()), auto.per_gpu]
    assert grown == [True, 8, True, 4, True, 2, True, 1, False, 1]
    assert auto.observe(usage(5.0)) is False and auto.per_gpu == 1, "an OOM's cap stays"


def test_an_oom_at_an_older_smaller_share_halves_that_share_not_the_current() -> None:
    auto = GpuAuto()
    auto.observe(usage(10.0))
    assert auto.on_gpu_oom(1 / 16) and auto.per_gpu == 8
    assert auto.on_gpu_oom(1 / 16) and auto.per_gpu == 8, "two at once halve it once"


# -- parsing -----------------------------------------------------------------------------------
def test_auto_is_for_gpu_only_with_an_error_naming_the_key() -> None:
    assert resources_of(tune.with_resources(lambda c: None, {"gpu": "auto"})) == AUTO
    assert normalize_resources({"GPU": "Auto"}, gpu_auto=True)["gpu"] == 1.0
    with pytest.raises(ValueError, match=r"\['cpu'\]='auto': only 'gpu' may be 'auto'"):
        tune.with_resources(lambda c: None, {"cpu": "auto"})
    with pytest.raises(ValueError, match=r"\['memory'\]='auto' is not a memory size"):
        tune.with_resources(lambda c: None, {"memory": "auto"})
    with pytest.raises(ValueError, match=r"\['gpu'\]='some' must be a number"):
        tune.with_resources(lambda c: None, {"gpu": "some"})
    with pytest.raises(ValueError, match=r"'gpu_auto' is tunefleet's own"):
        tune.with_resources(lambda c: None, {"gpu_auto": 1})
    with pytest.raises(ValueError, match=r"bundles\)\[0\]\['GPU'\]='auto': 'auto' is for what"):
        tune.PlacementGroupFactory([{"CPU": 1, "GPU": "auto"}])


def test_the_machine_s_resources_cannot_be_auto(storage: str) -> None:
    tuner = tune.Tuner(
        lambda c: None, run_config=tune.RunConfig(storage_path=storage, resources={"gpu": "auto"})
    )
    with pytest.raises(ValueError, match=r"RunConfig.resources\['gpu'\]='auto': 'auto' is for"):
        tuner.fit()


def no_gpu_error(storage: str, gpu: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    tuner = tune.Tuner(
        tune.with_resources(lambda c: None, {"gpu": gpu}),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    )
    with pytest.raises(ValueError) as caught:
        tuner.fit()
    return str(caught.value)


def test_without_a_gpu_auto_says_so_as_gpu_1_does(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = no_gpu_error(storage, "auto", monkeypatch)
    assert "needs gpu=1 but the machine has 0" in message
    assert message == no_gpu_error(storage, 1, monkeypatch)


# -- the local backend's pool, with made-up GPU ids --------------------------------------------
def results(trial_id: str, peak: float) -> TrialResults:
    return TrialResults(trial_id, 0, [({"loss": 1.0, "resources": usage(peak)}, None)])


def gpu_oom(trial_id: str) -> TrialFailed:
    failure = FailureRecord(kind=FailureKind.GPU_OOM, message="the trial ran out of GPU memory.")
    return TrialFailed(trial_id, 0, failure)


def fill(pool: ResourcePool, first: int) -> dict[str, list[str]]:
    """Start trials t<first>, t<first+1>, ... while they fit; their GPUs."""
    given: dict[str, list[str]] = {}
    while pool.can_allocate(AUTO):
        trial_id = f"t{first + len(given)}"
        given[trial_id] = pool.allocate(AUTO, trial_id)
    return given


def per_gpu(given: dict[str, list[str]]) -> dict[str, int]:
    count: dict[str, int] = {}
    for gpus in given.values():
        for gpu in gpus:
            count[gpu] = count.get(gpu, 0) + 1
    return count


def test_the_pool_packs_k_trials_per_gpu_after_the_first_peak() -> None:
    pool = ResourcePool({"cpu": 64.0, "gpu": 2.0}, ["0", "1"])
    assert pool.fits_ever(AUTO) is None
    first = fill(pool, 0)
    assert per_gpu(first) == {"0": 1, "1": 1}, "before a peak: one trial per GPU, alone"
    pool.on_message(results("t0", PEAK_4))
    assert pool.free["gpu"] == pytest.approx(1.5), "both running trials now hold 1/4"
    more = fill(pool, 2)
    assert per_gpu({**first, **more}) == {"0": 4, "1": 4}
    for trial_id, gpus in more.items():
        pool.release(AUTO, gpus, trial_id)
    assert pool.gpu_free == {"0": pytest.approx(0.75), "1": pytest.approx(0.75)}


def test_the_pool_retries_a_gpu_oom_with_a_larger_share_not_as_a_failure() -> None:
    pool = ResourcePool({"cpu": 64.0, "gpu": 1.0}, ["0"])
    pool.allocate(AUTO, "t0")
    pool.on_message(results("t0", PEAK_4))
    given = {"t0": ["0"], **fill(pool, 1)}
    assert len(given) == 4
    oom = gpu_oom("t2")
    pool.on_message(oom)
    assert "it had 1/4 of a GPU; it is retried with 1/2" in oom.failure.message
    assert pool.free_retry("t2") and not pool.free_retry("t2"), "asked once"
    assert not pool.free_retry("t1")
    for trial_id, gpus in given.items():
        pool.release(AUTO, gpus, trial_id)
    assert pool.gpu_free == {"0": pytest.approx(1.0)}
    again = fill(pool, 10)
    assert len(again) == 2, "after the OOM: two trials per GPU"
    pool.on_message(gpu_oom("t10"))
    assert pool.free_retry("t10") and pool.auto.per_gpu == 1
    for trial_id, gpus in again.items():
        pool.release(AUTO, gpus, trial_id)
    assert len(fill(pool, 20)) == 1
    whole = gpu_oom("t20")
    pool.on_message(whole)
    assert not pool.free_retry("t20"), "out of memory on a whole GPU: a failure"
    assert "retried" not in whole.failure.message


# -- a real run on a declared GPU ----------------------------------------------------------------
def packed(config: dict[str, Any]) -> None:
    """The first trial to start reports its GPU memory; every trial then waits until
    `population` of them run at once; one trial is out of GPU memory once."""
    marks = Path(config["marks"])
    try:
        (marks / "first").touch(exist_ok=False)
        first = True
    except FileExistsError:
        first = False
    peak_known = (marks / "reported").exists()
    if first:
        (marks / "reported").touch()
    ctx = tune.get_context()
    share = ctx.get_trial_resources().required_resources["GPU"]
    tune.report({"first": first, "resources": usage(PEAK_4)})
    if config["oom"] and not (marks / "oom").exists():
        (marks / "oom").touch()
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    met = meet(config, ctx.get_trial_id()) if not config["oom"] else True
    tune.report(
        {
            "first": first,
            "peak_known": peak_known,
            "met": met,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "share": share,
            "resources": usage(PEAK_4),
        }
    )


def test_a_run_packs_four_trials_on_a_declared_gpu_and_retries_an_oom(
    storage: str, tmp_path: Path
) -> None:
    grid = run_four_then_one(packed, "oom", storage, tmp_path)
    assert not grid.errors, grid.errors
    by_first = sorted(grid, key=lambda r: not r.metrics["first"])
    assert [r.metrics["first"] for r in by_first] == [True, False, False, False, False]
    assert all(r.metrics["peak_known"] for r in by_first[1:]), "the first ran alone"
    assert all(r.metrics["met"] for r in grid), "four trials shared the one GPU"
    assert {r.metrics["visible"] for r in grid} == {"0"}
    shares = sorted(r.metrics["share"] for r in grid)
    assert shares == [0.25, 0.25, 0.25, 0.5, 1.0], "the retry after the OOM had 1/2"
    assert tune.PlacementGroupFactory.of(AUTO).bundles == [{"CPU": 1.0, "GPU": 1.0}]
