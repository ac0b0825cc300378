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
