"""Each result's ``resources``: CPU%, peak RSS of the trial's process tree, sampled on the
trial's side by the worker's one sampling thread (backends/_usage.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet import session as session_mod
from tunefleet.backends import _usage
from tunefleet.backends._usage import SAMPLE_ENV, UsageSampler, sample_interval

MiB = 1 << 20
HELD_MB = 200
_THREAD = "tunefleet-usage"
_CHILD = (  # holds HELD_MB MiB (pages touched), says so in a file, waits for its stdin
    "import sys\n"
    f"buf = bytearray({HELD_MB} * 1024 * 1024)\n"
    "for i in range(0, len(buf), 4096):\n"
    "    buf[i] = 1\n"
    "open(sys.argv[1], 'w').close()\n"
    "sys.stdin.read()\n"
)


def _wait(condition: Any, what: str, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _sampler() -> UsageSampler:
    """The running trial's sampler (its session adds `fill` to each result)."""
    session = session_mod._session
    assert session is not None and session._usage is not None
    sampler = session._usage.__self__  # type: ignore[attr-defined]
    assert isinstance(sampler, UsageSampler)
    return sampler


def holds_memory_in_a_child(config: dict[str, Any]) -> None:
    ready = Path(config["dir"]) / f"ready-{os.getpid()}"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(ready)], stdin=subprocess.PIPE)
    try:
        _wait(ready.exists, "the child's allocation")
        _wait(lambda: _sampler()._peak >= HELD_MB * MiB, "a sample of the child")
        tune.report(loss=1.0)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()


def holds_memory_itself(config: dict[str, Any]) -> None:
    buf = bytearray(HELD_MB * MiB)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    samplers = [t for t in threading.enumerate() if t.name == _THREAD]
    tune.report(loss=1.0, samplers=len(samplers))


def busy(config: dict[str, Any]) -> None:
    start = time.process_time()
    while time.process_time() - start < 0.2:  # CPU time, not wall time: waits on work done
        pass
    tune.report(loss=1.0)


def counts_samplers(config: dict[str, Any]) -> None:
    samplers = [t for t in threading.enumerate() if t.name == _THREAD and t.is_alive()]
    tune.report(loss=1.0, samplers=len(samplers), pid=os.getpid())


def _fit(trainable: Any, tmp_path: Path, **tune_config: Any) -> tune.ResultGrid:
    return tune.Tuner(
        trainable,
        param_space={"dir": str(tmp_path)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", **tune_config),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "store"), verbose=0),
    ).fit()


def test_a_childs_memory_counts_in_the_trials_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SAMPLE_ENV, "0.05")
    grid = _fit(holds_memory_in_a_child, tmp_path)
    result = grid[0]
    assert result.error is None, result.error
    usage = result.metrics["resources"]
    assert usage["peak_rss_mb"] >= HELD_MB, usage
    assert "gpu_peak_mb" not in usage and "memory_limit_mb" not in usage
    # flattened like any nested result, and a metric by its path
    frame = grid.get_dataframe()
    assert frame["resources/peak_rss_mb"].iloc[0] >= HELD_MB
    best = grid.get_best_result(metric="resources/peak_rss_mb", mode="max")
    assert best.metrics["resources"]["peak_rss_mb"] >= HELD_MB
    assert "resources" not in repr(result)  # an auto key: repr leaves it out


def test_own_memory_counts_without_sampling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SAMPLE_ENV, "0")  # no thread: the report still knows its own peak
    result = _fit(holds_memory_itself, tmp_path)[0]
    assert result.metrics["samplers"] == 0
    assert result.metrics["resources"]["peak_rss_mb"] >= HELD_MB


def test_a_busy_trial_shows_cpu(tmp_path: Path) -> None:
    result = _fit(busy, tmp_path)[0]
    assert result.metrics["resources"]["cpu_percent"] > 0


def test_the_memory_limit_is_recorded(tmp_path: Path) -> None:
    trainable = tune.with_resources(busy, {"cpu": 1, "memory": 2 * 1024 * MiB})
    result = _fit(trainable, tmp_path)[0]
    assert result.metrics["resources"]["memory_limit_mb"] == 2048


def test_one_sampler_per_trial_in_a_reused_worker(tmp_path: Path) -> None:
    grid = _fit(counts_samplers, tmp_path, num_samples=4, max_concurrent_trials=1)
    assert [r.metrics["samplers"] for r in grid] == [1, 1, 1, 1]
    assert len({r.metrics["pid"] for r in grid}) < 4  # a worker ran several of them


def test_one_thread_samples_each_attempt_in_turn_and_never_raises() -> None:
    first = UsageSampler(memory_limit=None, interval=0.01).start()
    thread = first._thread
    assert thread is not None and thread.is_alive()
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # exits between samples
    child.wait()
    _wait(lambda: first._peak > 0, "a sample of the first attempt")
    usage = first.snapshot()
    assert usage["cpu_percent"] >= 0 and usage["peak_rss_mb"] > 0
    first.stop()
    assert first._thread is None and _usage._SAMPLING._current is None
    # the next attempt in this worker gets the same thread, not a new one
    second = UsageSampler(memory_limit=None, interval=0.01).start()
    assert second._thread is thread
    _wait(lambda: second._peak > 0, "a sample of the second attempt")
    second.stop()
    assert [t for t in threading.enumerate() if t.name == _THREAD] == [thread]
    result: dict[str, Any] = {"resources": {"mine": 1}}
    second.fill(result)  # the trainable's own "resources" is kept
    assert result == {"resources": {"mine": 1}}


def test_a_bad_interval_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SAMPLE_ENV, "fast")
    with pytest.raises(ValueError, match=f"{SAMPLE_ENV}='fast'.*>= 0"):
        sample_interval()
    monkeypatch.setenv(SAMPLE_ENV, "-1")
    with pytest.raises(ValueError, match=SAMPLE_ENV):
        sample_interval()
    monkeypatch.setenv(SAMPLE_ENV, "0.25")
    assert sample_interval() == 0.25


class _Counted(UsageSampler):
    """A sampler that counts its samples and signals each one."""

    def __init__(self, interval: float) -> None:
        super().__init__(memory_limit=None, interval=interval)
        self.samples = 0
        self.sampled = threading.Event()

    def start(self) -> _Counted:
        super().start()
        return self

    def _sample(self, me: Any) -> None:
        super()._sample(me)
        self.samples += 1
        self.sampled.set()


def test_an_attempt_shorter_than_the_interval_is_never_sampled() -> None:
    # Most attempts of a search of trivial trials last a few milliseconds: they must not
    # each pay a walk of the process tree. The first sample comes one interval after
    # the attempt starts; an attempt replaced before that gets none.
    short = _Counted(interval=3600.0).start()
    short.stop()
    longer = _Counted(interval=0.01).start()  # the same thread, woken for the next attempt
    assert longer.sampled.wait(60), "the next attempt was never sampled"
    longer.stop()
    assert short.samples == 0 and short._peak == 0
    assert short.snapshot()["peak_rss_mb"] > 0  # its own peak is still read, once


def test_back_to_back_attempts_do_not_wake_the_thread() -> None:
    # A worker running trivial trials one after another starts an attempt every
    # millisecond or so: the sampling thread, asleep until the first sample of an
    # earlier attempt, is not woken for each (a thread switch apiece); only an attempt
    # whose first sample comes before the thread would wake is worth waking it for.
    sampling = _usage._SAMPLING
    first = _Counted(interval=30.0).start()
    _wait(lambda: sampling._until == first._next_sample, "the thread to sleep towards it")
    first.stop()
    second = _Counted(interval=30.0).start()  # its first sample comes later: no wake-up
    assert not sampling._wake.is_set()
    second.stop()
    sooner = _Counted(interval=0.01).start()  # before the thread would wake: woken
    assert sampling._wake.is_set() or sooner.sampled.is_set()
    assert sooner.sampled.wait(60), "the sooner attempt was never sampled"
    sooner.stop()
    assert first.samples == second.samples == 0


def big_then_small(config: dict[str, Any]) -> None:
    if config["big"]:  # the worker's peak RSS grows by HELD_MB; freed at return
        buf = bytearray(HELD_MB * MiB)
        for i in range(0, len(buf), 4096):
            buf[i] = 1
        del buf
    tune.report(loss=1.0, pid=os.getpid())


def test_a_reused_workers_next_trial_has_its_own_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The peak is reset at each trial's start (/proc/self/clear_refs, written through a
    # descriptor the worker keeps): a small trial after a big one in the same worker
    # must not show the big one's peak.
    monkeypatch.setenv(SAMPLE_ENV, "0")
    grid = tune.Tuner(
        big_then_small,
        param_space={"big": tune.grid_search([True, False, True, False])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "store"), verbose=0),
    ).fit()
    assert grid.num_errors == 0
    runs = sorted(grid, key=lambda r: r.metrics["trial_id"])
    peaks = [r.metrics["resources"]["peak_rss_mb"] for r in runs]
    assert peaks[0] >= HELD_MB and peaks[2] >= HELD_MB, peaks
    after_big = [i for i in (1, 3) if runs[i].metrics["pid"] == runs[i - 1].metrics["pid"]]
    assert after_big, "the worker was reused"
    assert all(peaks[i] < HELD_MB for i in after_big), peaks
