"""LoggerCallback routes Ray's trial hooks to its log_* methods; tunefleet.utils helpers;
MyTrainableClass's curve and checkpoints; pretty_print."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tunefleet.logger import LoggerCallback, pretty_print
from tunefleet.trial import Trial
from tunefleet.utils import flatten_dict, unflatten_dict
from tunefleet.utils.mock_trainable import MyTrainableClass


class Recorder(LoggerCallback):
    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def log_trial_start(self, trial: Trial) -> None:
        self.seen.append(("start",))

    def log_trial_restore(self, trial: Trial) -> None:
        self.seen.append(("restore",))

    def log_trial_save(self, trial: Trial) -> None:
        self.seen.append(("save",))

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        self.seen.append(("result", iteration, result["x"]))

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        self.seen.append(("end", failed))


def test_hooks_reach_the_log_methods() -> None:
    trial = Trial(trial_id="t1", index=0, name="t1", config={}, resources={}, path="/tmp")
    rec = Recorder()
    rec.on_trial_start(1, [trial], trial)
    rec.on_trial_result(2, [trial], trial, {"x": 5})
    rec.on_trial_save(2, [trial], trial)
    rec.on_trial_restore(3, [trial], trial)
    rec.on_trial_complete(4, [trial], trial)
    rec.on_trial_error(5, [trial], trial)
    assert rec.seen == [
        ("start",),
        ("result", 2, 5),
        ("save",),
        ("restore",),
        ("end", False),
        ("end", True),
    ]


def test_flatten_and_unflatten_round_trip() -> None:
    nested = {"a": {"b": 1, "c": {"d": 2}}, "e": 3}
    assert flatten_dict(nested) == {"a/b": 1, "a/c/d": 2, "e": 3}
    assert unflatten_dict(flatten_dict(nested)) == nested
    with pytest.raises(ValueError, match="delimiter"):
        flatten_dict({"a/b": 1}, prevent_delimiter=True)
    with pytest.raises(ValueError, match="a value and a parent"):
        unflatten_dict({"a": 1, "a/b": 2})


def test_my_trainable_class_checkpoints_its_step(tmp_path: Path) -> None:
    first = MyTrainableClass({"width": 2, "height": 3})
    for _ in range(3):
        result = first.step()
    assert result["timesteps_total"] == 3
    first.save_checkpoint(str(tmp_path))
    second = MyTrainableClass({"width": 2, "height": 3})
    second.load_checkpoint(str(tmp_path))
    assert second.step()["timesteps_total"] == 4  # the curve goes on from the checkpoint
    with pytest.raises(TypeError, match=r"config\['width'\]"):
        MyTrainableClass({"width": "wide"})


def test_pretty_print_is_yaml_without_config() -> None:
    assert pretty_print({"b": 1, "a": {"c": 2}, "config": {"x": 1}}) == "a:\n  c: 2\nb: 1\n"
