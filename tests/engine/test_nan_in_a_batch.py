"""A NaN among several results of one trial in one batch of events (issue 16, defect 1).

With ``nan_policy="error"`` the NaN fails the trial; the results, checkpoints and the
end of that attempt that arrive after it in the same batch are late and ignored: they
never fail it a second time (that raised KeyError from `Tuner.fit()`), and the sibling
trials run all their iterations.

Deterministic: the simulated backend on a virtual clock, its results of one trial in a
poll merged into one `Results` event, as a real worker's batch of reports arrives.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.backends._base import Event, Results
from tunefleet.backends.simulated import SimulatedBackend, SimulatedTrainable
from tunefleet.trial import FailureKind

_STEPS = 6
_NAN_AT = 2
_BAD = 0.2  # the trial that reports a NaN


def curve(config: dict[str, Any], budget: int) -> dict[str, float]:
    diverged = budget >= _NAN_AT if config["stays_nan"] else budget == _NAN_AT
    if config["x"] == _BAD and diverged:
        return {"loss": math.nan}
    return {"loss": config["x"] + 1.0 / budget}


def cost(config: dict[str, Any], budget: int) -> float:
    return 0.0 if config["x"] == _BAD else 1.0  # the bad trial's steps all land in one poll


@pytest.fixture
def batched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Merge each trial's results of one poll into one event; records the batch sizes."""
    sizes: list[int] = []
    poll = SimulatedBackend.poll

    def merged(self: SimulatedBackend, timeout: float) -> list[Event]:
        events: list[Event] = []
        first: dict[tuple[str, int], Results] = {}
        for event in poll(self, timeout):
            if isinstance(event, Results):
                key = (event.trial_id, event.epoch)
                if key in first:
                    first[key].items.extend(event.items)
                    continue
                first[key] = event = Results(event.trial_id, event.epoch, list(event.items))
            events.append(event)
        sizes.extend(len(e.items) for e in first.values())
        return events

    monkeypatch.setattr(SimulatedBackend, "poll", merged)
    return sizes


def fit(tmp_path: Path, max_failures: int, stays_nan: bool) -> tune.ResultGrid:
    sim = SimulatedTrainable(curve, cost=cost, max_budget=_STEPS, workers=3, overhead_scale=0)
    space = {"x": tune.grid_search([0.1, _BAD, 0.3]), "stays_nan": stays_nan}
    failures = tune.FailureConfig(nan_policy="error", max_failures=max_failures)
    run_config = tune.RunConfig(
        storage_path=str(tmp_path),
        verbose=0,
        failure_config=failures,
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
    )
    tune_config = tune.TuneConfig(metric="loss", mode="min")
    return tune.Tuner(sim, param_space=space, tune_config=tune_config, run_config=run_config).fit()


@pytest.mark.parametrize("stays_nan", [True, False], ids=["diverged", "one_nan"])
@pytest.mark.parametrize("max_failures", [0, 1])
def test_a_nan_in_a_batch_fails_its_trial_once(
    tmp_path: Path, batched: list[int], max_failures: int, stays_nan: bool
) -> None:
    # diverged: raised KeyError before the fix; one_nan: the failed trial recorded the
    # rest of its batch (and ran on in the store) after it had failed
    grid = fit(tmp_path, max_failures, stays_nan)
    assert max(batched) == _STEPS  # the bad trial's whole attempt came in one event
    bad = [r for r in grid if r.config["x"] == _BAD]
    good = [r for r in grid if r.config["x"] != _BAD]
    assert len(bad) == 1 and len(good) == 2
    result = bad[0]
    if max_failures and not stays_nan:  # retried from its checkpoint, past the NaN
        assert result.status == "TERMINATED" and result.error is None
        assert result.metrics["training_iteration"] == _STEPS
    else:
        assert result.status == "ERROR" and result.error is not None
        assert result.error.kind is FailureKind.NAN_METRIC
        # nothing of an attempt after its NaN was recorded
        assert result.metrics["training_iteration"] == _NAN_AT + max_failures
        iterations = list(result.metrics_dataframe["training_iteration"])
        assert iterations == list(range(1, _NAN_AT + max_failures + 1))
    for sibling in good:
        assert sibling.status == "TERMINATED" and sibling.error is None
        assert sibling.metrics["training_iteration"] == _STEPS
        assert len(sibling.metrics_dataframe) == _STEPS
