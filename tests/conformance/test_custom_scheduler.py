"""A custom TrialScheduler written in Ray Tune's form (Ray form, ported at collection).

Ray's scheduler hooks take the controller first: ``on_trial_result(self,
tune_controller, trial, result)``, ``choose_trial_to_run(self, tune_controller)``.
A subclass written so runs through `Tuner.fit()`: its decisions take effect, its
``super()`` calls in Ray's form work, and ``tune_controller.get_trials()`` answers.
"""

from ray import train, tune
from ray.train import RunConfig
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler


def climb(config):
    for step in range(1, 6):
        train.report({"score": config["sign"] * step})


class StopBadTrials(FIFOScheduler):
    """Stops a trial whose score is negative after its 2nd result; counts the calls."""

    def __init__(self):
        super().__init__()
        self.added = []
        self.results = 0
        self.completed = []
        self.chosen = 0
        self.trials_seen = 0

    def on_trial_add(self, tune_controller, trial):
        self.added.append(trial.trial_id)
        super().on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result):
        self.results += 1
        self.trials_seen = max(self.trials_seen, len(tune_controller.get_trials()))
        decision = super().on_trial_result(tune_controller, trial, result)
        if result["training_iteration"] >= 2 and result["score"] < 0:
            return TrialScheduler.STOP
        return decision

    def on_trial_complete(self, tune_controller, trial, result):
        self.completed.append(trial.trial_id)
        super().on_trial_complete(tune_controller, trial, result)

    def choose_trial_to_run(self, tune_controller):
        # Ray's FIFO choice, written against the controller's trials
        for trial in tune_controller.get_trials():
            if trial.status == Trial.PENDING:
                self.chosen += 1
                return trial
        return super().choose_trial_to_run(tune_controller)


class OlderRayForm(FIFOScheduler):
    """Ray before 2.5 named the controller ``trial_runner``."""

    def __init__(self):
        super().__init__()
        self.live = []

    def on_trial_result(self, trial_runner, trial, result):
        self.live.append(len(trial_runner.get_live_trials()))
        if result["score"] <= -3:
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE


def test_ray_form_scheduler_decides(tmp_path):
    scheduler = StopBadTrials()
    grid = tune.Tuner(
        climb,
        param_space={"sign": tune.grid_search([-1, 1, -1])},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=scheduler),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert not grid.errors
    iterations = sorted((r.config["sign"], r.metrics["training_iteration"]) for r in grid)
    assert iterations == [(-1, 2), (-1, 2), (1, 5)]  # the bad ones stopped after 2
    assert len(scheduler.added) == 3
    assert scheduler.results == 2 + 2 + 5
    assert scheduler.trials_seen >= 1
    assert set(scheduler.completed) <= set(scheduler.added)
    assert len(scheduler.completed) >= 1


def test_older_trial_runner_form(tmp_path):
    scheduler = OlderRayForm()
    grid = tune.Tuner(
        climb,
        param_space={"sign": tune.grid_search([-1])},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=scheduler),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert grid[0].metrics["training_iteration"] == 3
    assert scheduler.live == [1, 1, 1]
