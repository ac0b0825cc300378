"""Snippets of Ray Tune's user guide that an audit found tunefleet running differently
(F18-3 to F18-8), written as the pages show them: tune-output.md ("How do you log
arbitrary files from a Tune Trainable?", "How to redirect Trainable logs to files",
"How to Build Custom Tune Loggers?", the Class API's log_result), faq.rst ("How do I
access relative filepaths in my Tune training function?") and
tune-fault-tolerance.md (restore with a new param_space).

Each fixture runs one small experiment that several tests read.
"""

import json
import os
import warnings

import pytest
from ray import train, tune
from ray.train import RunConfig
from ray.tune import Callback
from ray.tune.logger import LoggerCallback


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("docs_findings"))


def run_config(storage, name, **kwargs):
    return RunConfig(name=name, storage_path=storage, verbose=0, **kwargs)


# --- tune-output.md: the working directory is the trial's folder (F18-3) --------------------


def artifact_trainable(config):
    for step in range(2):
        with open(f"./artifact_{step}.txt", "w") as f:
            f.write(f"Artifact Data for {config['x']}")
        train.report(
            {
                "cwd": os.getcwd(),
                "trial_dir": tune.get_context().get_trial_dir(),
                "orig": os.environ.get("TUNE_ORIG_WORKING_DIR"),
            }
        )


class ArtifactTrainable(tune.Trainable):
    def step(self):
        with open(f"./artifact_{self.iteration}.txt", "w") as f:
            f.write("Artifact Data")
        return {"cwd": os.getcwd()}


@pytest.fixture(scope="module")
def artifacts(storage):
    grid = tune.Tuner(
        artifact_trainable,
        param_space={"x": tune.grid_search([1, 2])},
        run_config=run_config(storage, "artifacts"),
    ).fit()
    klass = tune.Tuner(
        ArtifactTrainable,
        run_config=run_config(storage, "artifacts_class", stop={"training_iteration": 2}),
    ).fit()
    return grid, klass


def test_function_trainable_runs_in_its_trial_folder(artifacts):
    grid, _ = artifacts
    for result in grid:
        # Ray 2.7+: the trial's local working folder, synced to result.path; with a
        # local storage_path tunefleet's is the trial folder itself.
        assert result.metrics["cwd"] == result.metrics["trial_dir"] == result.path
        assert result.metrics["orig"] == os.getcwd()
        for step in range(2):
            with open(os.path.join(result.path, f"artifact_{step}.txt")) as f:
                assert f.read() == f"Artifact Data for {result.config['x']}"
    assert not os.path.exists("artifact_0.txt")  # the driver's folder is left alone


def test_class_trainable_runs_in_its_trial_folder(artifacts):
    _, klass = artifacts
    result = klass[0]
    assert result.metrics["cwd"] == result.path
    assert sorted(f for f in os.listdir(result.path) if f.startswith("artifact_")) == [
        "artifact_0.txt",
        "artifact_1.txt",
    ]


def cwd_trainable(config):
    train.report({"cwd": os.getcwd()})


def test_ray_chdir_to_trial_dir_0_keeps_the_working_directory(storage, monkeypatch):
    monkeypatch.setenv("RAY_CHDIR_TO_TRIAL_DIR", "0")
    result = tune.Tuner(cwd_trainable, run_config=run_config(storage, "no_chdir")).fit()[0]
    assert result.metrics["cwd"] == os.getcwd()


def test_tune_run_chdir_to_trial_dir_false_is_deprecated_and_honoured(storage):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analysis = tune.run(
            cwd_trainable,
            storage_path=storage,
            name="run_no_chdir",
            verbose=0,
            chdir_to_trial_dir=False,
        )
    assert analysis.trials[0].last_result["cwd"] == os.getcwd()
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert os.environ.get("RAY_CHDIR_TO_TRIAL_DIR") is None  # nothing left behind


# --- tune-output.md: redirecting trainable logs to files (F18-4) --------------------------


def printing_trainable(config):
    import sys

    print("to stdout")
    print("to stderr", file=sys.stderr)
    train.report({"x": 1})


@pytest.fixture(scope="module")
def logged(storage):
    runs = {}
    for name, log_to_file in [
        ("combined", "std_combined.log"),
        ("pair", ("my_stdout.log", "my_stderr.log")),
    ]:
        runs[name] = tune.Tuner(
            printing_trainable, run_config=run_config(storage, name, log_to_file=log_to_file)
        ).fit()[0]
    runs["run"] = tune.run(
        printing_trainable,
        storage_path=storage,
        name="run_logs",
        verbose=0,
        log_to_file="std_combined.log",
    ).trials[0]
    return runs


def read(folder, name):
    with open(os.path.join(folder, name)) as f:
        return f.read()


def test_log_to_file_one_name_gets_both_streams(logged):
    text = read(logged["combined"].path, "std_combined.log")
    assert "to stdout" in text and "to stderr" in text
    assert "stdout.log" not in os.listdir(logged["combined"].path)


def test_log_to_file_a_pair_of_names_gets_one_stream_each(logged):
    folder = logged["pair"].path
    assert read(folder, "my_stdout.log").strip() == "to stdout"
    assert read(folder, "my_stderr.log").strip() == "to stderr"


def test_tune_run_log_to_file_name(logged):
    text = read(logged["run"].path, "std_combined.log")
    assert "to stdout" in text and "to stderr" in text


@pytest.mark.parametrize("value", [3, ("only_one.log",), ("a.log", 2), ""])
def test_log_to_file_anything_else_is_refused(value):
    # tunefleet: refused at once, naming the value (Ray fails later or ignores it).
    with pytest.raises(ValueError, match="log_to_file"):
        tune.Tuner(printing_trainable, run_config=RunConfig(log_to_file=value))


# --- tune-output.md: "How to Build Custom Tune Loggers?" (F18-5, F18-6) ----------------------


class CustomLoggerCallback(LoggerCallback):
    """Custom logger interface"""

    def __init__(self, filename: str = "log.txt"):
        self._trial_files = {}
        self._filename = filename

    def log_trial_start(self, trial):
        trial_logfile = os.path.join(trial.logdir, self._filename)
        self._trial_files[trial] = open(trial_logfile, "a")  # noqa: SIM115 (the snippet's)

    def log_trial_result(self, iteration: int, trial, result: dict):
        if trial in self._trial_files:
            self._trial_files[trial].write(json.dumps({"loss": result["loss"]}) + "\n")

    def on_trial_complete(self, iteration: int, trials: list, trial, **info):
        if trial in self._trial_files:
            self._trial_files[trial].close()
            del self._trial_files[trial]


class TrialsByKey(Callback):
    def __init__(self):
        self.started = {}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.started[trial] = os.path.isdir(trial.logdir)


def loss_trainable(config):
    for i in range(3):
        train.report({"loss": config["x"] / (i + 1)})


@pytest.fixture(scope="module")
def custom_logged(storage):
    logger, keyed = CustomLoggerCallback(), TrialsByKey()
    grid = tune.Tuner(
        loss_trainable,
        param_space={"x": tune.grid_search([1.0, 2.0])},
        run_config=run_config(storage, "custom_logger", callbacks=[logger, keyed]),
    ).fit()
    return grid, logger, keyed


def test_custom_logger_writes_into_each_trial_folder(custom_logged):
    grid, logger, _ = custom_logged
    assert grid.num_errors == 0
    for result in grid:
        lines = read(result.path, "log.txt").splitlines()
        x = result.config["x"]
        assert [json.loads(line)["loss"] for line in lines] == [x, x / 2, x / 3]
    assert logger._trial_files == {}  # every trial's file closed and dropped


def test_trials_key_dicts_and_their_folder_exists_at_start(custom_logged):
    _, _, keyed = custom_logged
    assert len(keyed.started) == 2 and all(keyed.started.values())


# --- tune-output.md Class API: Trainable.log_result (F18-7) --------------------------------


class LoggingTrainable(tune.Trainable):
    def setup(self, config):
        self.logged = []

    def step(self):
        return {"n_logged": len(self.logged), "score": self.iteration}

    def log_result(self, result):
        res_dict = {str(k): v for k, v in result.items() if k in ("score", "config")}
        self.logged.append((result["training_iteration"], res_dict))


def test_log_result_is_called_with_each_result(storage):
    result = tune.Tuner(
        LoggingTrainable,
        param_space={"a": 1},
        run_config=run_config(storage, "log_result", stop={"training_iteration": 3}),
    ).fit()[0]
    assert result.metrics["n_logged"] == 2  # the third result is logged after step() made it


def test_log_result_sees_the_automatic_keys_and_config():
    trainable = LoggingTrainable({"a": 1})
    trainable.train()
    trainable.train()
    assert trainable.logged == [
        (1, {"score": 0, "config": {"a": 1}}),
        (2, {"score": 1, "config": {"a": 1}}),
    ]


# --- tune-fault-tolerance.md: restore with a new param_space (F18-8) -----------------------


def tagged(config):
    train.report({"tag": config["m"]["tag"]})


def test_restore_with_a_changed_param_space_needs_force(storage):
    # tunefleet: refused unless force=True (Ray accepts it to refresh object refs).
    space = {"m": tune.grid_search([{"id": 1, "tag": "a"}, {"id": 2, "tag": "a"}])}
    tune.Tuner(tagged, param_space=space, run_config=run_config(storage, "restore_space")).fit()
    path = os.path.join(storage, "restore_space")
    changed = {"m": tune.grid_search([{"id": 1, "tag": "b"}, {"id": 2, "tag": "b"}])}
    with pytest.raises(ValueError, match="force=True"):
        tune.Tuner.restore(path, trainable=tagged, param_space=changed)
    tuner = tune.Tuner.restore(path, trainable=tagged, param_space=changed, force=True)
    assert tuner.fit().num_errors == 0
