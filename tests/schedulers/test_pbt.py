"""Population Based Training: explore rules, exploit decisions, state, and a real run.

The end-to-end run uses real worker processes: trials pause, take a copy of a
better trial's checkpoint and a perturbed config, and resume; the lineage is then
read back from the store as the best trial's learning-rate schedule.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.processes import meet, meeting
from tests.helpers.results import metrics_of
from tunefleet.schedulers import Decision, Exploit, PopulationBasedTraining, pbt_schedule
from tunefleet.schedulers._pbt import _from_list, _mutate
from tunefleet.store import StoreReader
from tunefleet.trial import Trial


def trial(tid: str, lr: float) -> Trial:
    return Trial(trial_id=tid, index=0, name=tid, config={"lr": lr}, resources={}, path="")


def pbt(**kwargs: Any) -> PopulationBasedTraining:
    args: dict[str, Any] = {
        "time_attr": "training_iteration",
        "perturbation_interval": 2,
        "hyperparam_mutations": {"lr": tune.loguniform(1e-4, 1.0)},
        "seed": 0,
    }
    scheduler = PopulationBasedTraining(**{**args, **kwargs})
    scheduler.set_search_properties("score", "max")
    return scheduler


def feed(s: PopulationBasedTraining, steps: int) -> list[tuple[str, Any]]:
    trials = [trial(f"t{i}", 10**-i) for i in range(4)]
    for t in trials:
        s.on_trial_add(t)
    out = []
    for it in range(1, steps + 1):
        for i, t in enumerate(trials):
            out.append((t.trial_id, s.on_trial_result(t, {"training_iteration": it, "score": i})))
    return out


def test_bottom_quantile_exploits_the_top_at_each_interval() -> None:
    decisions = feed(pbt(), 4)
    exploits = [(tid, d) for tid, d in decisions if isinstance(d, Exploit)]
    assert exploits, "the worst trial should have exploited"
    for tid, d in exploits:
        assert tid == "t0" and d.source_trial_id == "t3"  # bottom 25 % of 4 -> top 25 %
        assert 1e-4 <= d.new_config["lr"] <= 1.0
    odd = [d for tid, d in decisions[:4]]  # iteration 1: before the first interval
    assert all(d is Decision.CONTINUE for d in odd)


def test_state_round_trip_gives_the_same_future_decisions() -> None:
    first = pbt()
    feed(first, 3)
    state = json.loads(json.dumps(first.get_state()))
    second = pbt(seed=99)
    second.set_state(state)
    more = [trial(f"t{i}", 10**-i) for i in range(4)]
    a = [
        first.on_trial_result(t, {"training_iteration": 6, "score": i}) for i, t in enumerate(more)
    ]
    b = [
        second.on_trial_result(t, {"training_iteration": 6, "score": i}) for i, t in enumerate(more)
    ]
    assert a == b


def test_explore_rules() -> None:
    rng = random.Random(0)
    values = [1, 2, 3, 4]
    moves = {_from_list(values, 2, rng, 0.0) for _ in range(50)}
    assert moves == {1, 3}  # a neighbour when not resampling
    nested = _mutate(
        {"opt": {"lr": 0.1, "mom": 0.9}, "bs": 32},
        {"opt": {"lr": tune.uniform(0.0, 1.0)}, "bs": [16, 32, 64], "seed": lambda: 7},
        rng,
        0.0,
        (2.0, 0.5),
    )
    assert nested["opt"]["lr"] in (0.2, 0.05) and nested["opt"]["mom"] == 0.9
    assert nested["bs"] in (16, 64) and nested["seed"] == 7
    clipped = _mutate({"n": 9}, {"n": tune.randint(1, 10)}, random.Random(1), 0.0, (2.0,))
    assert clipped["n"] == 9  # 18 clipped below the exclusive upper bound


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"quantile_fraction=0.7 must be in \(0, 0.5\]"):
        pbt(quantile_fraction=0.7)
    with pytest.raises(ValueError, match=r"needs hyperparam_mutations or custom_explore_fn"):
        PopulationBasedTraining(hyperparam_mutations=None)
    with pytest.raises(ValueError, match=r"perturbation_interval=0 must be > 0"):
        pbt(perturbation_interval=0, synch=True)
    with pytest.raises(ValueError, match=r"hyperparam_mutations\['lr'\]=3"):
        _mutate({"lr": 1}, {"lr": 3}, random.Random(0), 0.0, (1.2,))
    s = PopulationBasedTraining(hyperparam_mutations={"lr": [1, 2]})
    with pytest.raises(ValueError, match=r"needs metric and mode"):
        s.set_search_properties(None, None)


def shifting_target(config: dict[str, Any]) -> None:
    """Good lr is ~0.1 for the first 6 iterations, ~0.001 afterwards."""
    score, start = 0.0, 0
    if (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            score, start = json.loads(Path(d, "s.json").read_text())
    for it in range(start + 1, 19):
        target = -1.0 if it <= 6 else -3.0
        score += 1.0 - abs(math.log10(config["lr"]) - target)
        with tempfile.TemporaryDirectory() as d:
            Path(d, "s.json").write_text(json.dumps([score, it]))
            tune.report({"score": score}, checkpoint=tune.Checkpoint.from_directory(d))
        if it == 1 and start == 0:
            meet(config, config["lr"])  # the whole population known at the first exploit


def assert_every_resume_used_its_copy(reader: StoreReader, iterations: int = 18) -> None:
    """Each run segment goes from the copied checkpoint's iteration to the next exploit
    (or the end): the count of each exploited trial's results proves it."""
    exploits = reader.events(kinds="exploit")
    assert exploits, "no trial exploited another"
    for tid in {e["trial_id"] for e in exploits}:
        mine = [e["data"] for e in exploits if e["trial_id"] == tid]
        expected = mine[0]["at_iteration"] + (iterations - mine[-1]["iteration"])
        expected += sum(b["at_iteration"] - a["iteration"] for a, b in itertools.pairwise(mine))
        assert len(reader.results(tid)) == expected, (tid, mine)


def test_pbt_end_to_end_with_real_pauses_and_lineage(storage: str, tmp_path: Path) -> None:
    grid = tune.Tuner(
        tune.with_resources(shifting_target, {"cpu": 0.5}),  # all four at once
        param_space={"lr": tune.grid_search([1.0, 0.1, 0.01, 0.0001]), **meeting(tmp_path, 4)},
        tune_config=tune.TuneConfig(
            metric="score", mode="max", scheduler=pbt(perturbation_interval=3)
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 4
    with StoreReader(grid.experiment_path) as reader:
        assert_every_resume_used_its_copy(reader)
    best = grid.get_best_result()
    schedule = pbt_schedule(grid.experiment_path, metrics_of(best)["trial_id"], "lr")
    assert schedule[0]["from_iteration"] == 0 and schedule[-1]["to_iteration"] == 18
    for a, b in itertools.pairwise(schedule):
        assert a["to_iteration"] == b["from_iteration"]  # contiguous
    assert all(1e-4 <= seg["value"] <= 1.0 for seg in schedule)
