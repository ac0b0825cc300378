"""The trial record: stop causes are members for code and text for people and the store."""

from __future__ import annotations

import json

import pytest

from tunefleet.trial import StopCause, Trial, TrialStatus


def test_a_cause_is_its_text_when_shown_and_stored() -> None:
    assert str(StopCause.INTERRUPTED) == "interrupted" == StopCause.INTERRUPTED.message
    assert json.dumps({"r": StopCause.PAUSED_BY_SCHEDULER}) == '{"r": "paused by scheduler"}'


@pytest.mark.parametrize("cause", list(StopCause))
def test_a_stored_cause_reads_back_as_its_member(cause: StopCause) -> None:
    trial = Trial("t1", 0, "t1", {"x": 1}, {"cpu": 1.0}, "/tmp/t1")
    trial.status, trial.stop_reason = TrialStatus.PAUSED, cause
    back = Trial.from_json(json.loads(json.dumps(trial.to_json())))
    assert back.stop_reason is cause


def test_free_text_stays_text() -> None:
    assert StopCause.of("my stopper said so") == "my stopper said so"
    assert StopCause.of(None) is None
    assert StopCause.cause_of("my stopper said so") is None
    assert StopCause.cause_of("time budget of 5s reached") is None


def test_a_cause_with_a_detail_is_still_its_cause() -> None:
    text = StopCause.SCHEDULER.with_detail("ASHAScheduler")
    assert text == "scheduler (ASHAScheduler)"
    assert StopCause.cause_of(text) is StopCause.SCHEDULER
    assert StopCause.of(text) == text  # the detail is kept for people
    assert StopCause.cause_of(StopCause.DONE) is StopCause.DONE
    assert StopCause.cause_of("done") is StopCause.DONE
    assert StopCause.cause_of("nonsense (x)") is None


def test_rays_view_of_a_trial(tmp_path: object) -> None:
    trial = Trial("ab_00001", 3, "train_ab_00001", {"lr": 0.01, "m": {"w": 64}}, {"cpu": 1.0}, "/x")
    trial.trainable_name = "train"
    assert str(trial) == "train_ab_00001" and trial.custom_trial_name is None
    assert trial.status == Trial.PENDING == "PENDING" and f"{trial.status}" == "PENDING"
    assert str(TrialStatus.ERROR) == "ERROR"
    assert trial.local_path == trial.logdir == trial.path == "/x"
    assert trial.evaluated_params == {"lr": 0.01, "m/w": 64}
    assert trial.experiment_tag == "3_lr=0.01,m/w=64"
    assert trial.checkpoint is None and trial.num_failures == 0 and trial.error_file is None
    assert trial.placement_group_factory.required_resources == {"CPU": 1.0}
    trial.latest_checkpoint, trial.status, trial.attempt = "/x/c1", TrialStatus.ERROR, 2
    assert trial.checkpoint is not None and trial.checkpoint.path == "/x/c1"
    assert trial.num_failures == 3  # two retried, and the last
    trial.name = "my name"
    assert trial.custom_trial_name == "my name" == str(trial)


def test_an_old_record_gets_its_trainable_name_from_its_name() -> None:
    trial = Trial("ab_00001", 0, "train_ab_00001", {}, {"cpu": 1.0}, "/x")
    data = trial.to_json()
    del data["trainable_name"]
    assert Trial.from_json(data).trainable_name == "train"
    data["name"] = "custom"
    assert Trial.from_json(data).trainable_name == ""


def test_last_result_is_empty_until_the_first_report() -> None:
    trial = Trial("t1", 0, "t1", {"x": 1}, {"cpu": 1.0}, "/tmp/t1")
    assert trial.last_result == {} and trial.iteration == 0  # Ray: {} too
    assert Trial("t2", 1, "t2", {}, {}, "/tmp/t2").last_result is not trial.last_result
    back = Trial.from_json(json.loads(json.dumps(trial.to_json())))
    assert back.last_result == {}
    older = {**trial.to_json(), "last_result": None}  # a record written before this change
    assert Trial.from_json(older).last_result == {}
