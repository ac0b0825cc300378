"""Behaviours that Ray Tune's own unit tests (python/ray/tune/tests: test_sample.py,
test_stopper.py, test_callbacks.py, test_logger.py, test_trainable.py) assert through
the public API, each as a small Ray-form program of our own (ported at collection)."""

import csv
import glob
import json
import os
import pickle
from dataclasses import dataclass
from functools import partial
from unittest.mock import patch

import numpy as np
import pytest
import ray.tune.search.sample
from ray import tune
from ray.tune.callback import Callback, CallbackList
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback
from ray.tune.result import (
    EXPR_PARAM_FILE,
    EXPR_PARAM_PICKLE_FILE,
    EXPR_PROGRESS_FILE,
    EXPR_RESULT_FILE,
)
from ray.tune.search.variant_generator import RecursiveDependencyError, generate_variants
from ray.tune.stopper import TimeoutStopper
from ray.tune.utils import flatten_dict

SPACE = {
    "func": tune.sample_from(lambda spec: spec.config.uniform * 0.01),
    "uniform": tune.uniform(-5, -1),
    "quniform": tune.quniform(3.2, 5.4, 0.2),
    "loguniform": tune.loguniform(1e-4, 1e-2),
    "qloguniform": tune.qloguniform(1e-4, 1e-1, 5e-5),
    "choice": tune.choice([2, 3, 4]),
    "randint": tune.randint(-9, 15),
    "lograndint": tune.lograndint(1, 10),
    "qrandint": tune.qrandint(-21, 12, 3),
    "qrandint_q3": tune.qrandint(1, 10, 3),
    "qlograndint": tune.qlograndint(2, 20, 2),
    "randn": tune.randn(10, 2),
    "qrandn": tune.qrandn(10, 2, 0.2),
}


# -- sampling through generate_variants (test_sample.py) ---------------------------------
@pytest.fixture(scope="module")
def samples():
    configs = []
    for _ in range(600):
        for _, generated in generate_variants({"config": SPACE}):
            configs.append(generated["config"])
    return configs


def values(samples, key):
    return [c[key] for c in samples]


def test_sample_from_reads_the_sampled_config(samples):
    assert all(np.isclose(c["func"], c["uniform"] * 0.01) for c in samples)


def test_uniform_stays_in_its_half_open_range(samples):
    assert all(-5 <= v < -1 for v in values(samples, "uniform"))


def test_quniform_gives_multiples_inside_the_bounds(samples):
    for v in values(samples, "quniform"):
        assert 3.2 <= v <= 5.4
        assert np.isclose(v / 0.2, round(v / 0.2))


def test_loguniform_and_qloguniform_bounds(samples):
    assert all(1e-4 <= v < 1e-2 for v in values(samples, "loguniform"))
    for v in values(samples, "qloguniform"):
        assert 1e-4 <= v <= 1e-1
        assert np.isclose(v / 5e-5, round(v / 5e-5))


def test_randint_is_an_int_with_an_exclusive_upper_bound(samples):
    got = values(samples, "randint")
    assert all(isinstance(v, int) for v in got)
    assert set(got) == set(range(-9, 15))


def test_lograndint_covers_its_range(samples):
    got = values(samples, "lograndint")
    assert all(isinstance(v, int) for v in got)
    assert set(got) == set(range(1, 10))


def test_qrandint_includes_its_upper_bound(samples):
    got = values(samples, "qrandint")
    assert all(isinstance(v, int) and v % 3 == 0 for v in got)
    assert set(got) == set(range(-21, 13, 3))
    assert set(values(samples, "qrandint_q3")) == {3, 6, 9}


def test_qlograndint_gives_multiples(samples):
    assert set(values(samples, "qlograndint")) == set(range(2, 21, 2))


def test_randn_and_qrandn(samples):
    assert all(0 < v < 20 for v in values(samples, "randn"))
    for v in values(samples, "qrandn"):
        assert 0 < v < 20
        assert np.isclose(v / 0.2, round(v / 0.2))


def test_choice_draws_every_category(samples):
    assert set(values(samples, "choice")) == {2, 3, 4}


def test_generate_variants_is_reproducible_with_a_seed():
    space = {k: v for k, v in SPACE.items() if k != "func"}
    first = [s["config"] for _, s in generate_variants({"config": space}, random_state=1000)]
    again = [s["config"] for _, s in generate_variants({"config": space}, random_state=1000)]
    assert first == again


def test_numpy_global_seed_steers_sampling():
    space = {"integer": tune.randint(0, 100_000), "choice": tune.choice(list(range(1000)))}
    np.random.seed(1000)
    first = [s for _ in range(8) for _, s in generate_variants({"config": space})]
    np.random.seed(1000)
    again = [s for _ in range(8) for _, s in generate_variants({"config": space})]
    assert first == again


def test_generate_variants_expands_grids_and_names_resolved_vars():
    spec = {"config": {"a": tune.grid_search([1, 2]), "b": tune.grid_search(["x", "y"])}}
    variants = list(generate_variants(spec))
    assert len(variants) == 4
    resolved, generated = variants[0]
    assert resolved[("config", "a")] == generated["config"]["a"]


def test_constant_grid_search_keeps_random_values():
    space = {
        "grid": tune.grid_search([1, 2, 3]),
        "rand": tune.uniform(0, 1000),
        "dependent_grid": tune.sample_from(lambda spec: spec.config.grid / 10),
    }
    kept = [s["config"] for _, s in generate_variants({"config": space}, True)]
    assert len({c["rand"] for c in kept}) == 1
    assert [c["dependent_grid"] for c in kept] == [0.1, 0.2, 0.3]
    fresh = [s["config"] for _, s in generate_variants({"config": space}, False)]
    assert len({c["rand"] for c in fresh}) == 3


def test_recursive_dependency_is_named():
    spec = {"config": {"foo": tune.sample_from(lambda spec: spec.config.foo)}}
    with pytest.raises(RecursiveDependencyError, match="`foo` recursively depends on"):
        list(generate_variants(spec))


# -- domain classes and their samplers (test_sample.py) ----------------------------------
def test_a_domain_has_one_sampler():
    bounded = ray.tune.search.sample.Float(-4.2, 8.3)
    with pytest.raises(ValueError):
        bounded.normal().uniform()
    with pytest.raises(ValueError):
        tune.uniform(0, 1).loguniform()


def test_bounded_float_uniform_samples():
    drawn = ray.tune.search.sample.Float(-4.2, 8.3).uniform().sample(size=1000)
    assert len(drawn) == 1000
    assert all(-4.2 <= s < 8.3 for s in drawn)
    assert np.mean(drawn) > -2


def test_loguniform_needs_a_positive_lower_bound():
    with pytest.raises(ValueError):
        ray.tune.search.sample.Float(-4.2, 8.3).loguniform().sample(size=10)
    drawn = ray.tune.search.sample.Float(1e-4, 1e-1).loguniform().sample(size=1000)
    assert all(1e-4 <= s < 1e-1 for s in drawn)


def test_unbounded_float_is_for_normal_only():
    with pytest.raises(ValueError):
        ray.tune.search.sample.Float(None, None).loguniform()
    drawn = ray.tune.search.sample.Float(None, None).normal().sample(size=1000)
    assert -1 < np.mean(drawn) < 1


def test_integer_and_categorical_domains():
    ints = ray.tune.search.sample.Integer(-3, 12).uniform().sample(size=1000)
    assert all(isinstance(s, int) and -3 <= s < 12 for s in ints)
    categories = [-2, -1, 0, 1, 2]
    cats = ray.tune.search.sample.Categorical(categories).uniform().sample(size=1000)
    assert set(cats) == set(categories)
    evens = ray.tune.search.sample.Integer(0, 5).quantized(2).sample(size=300)
    assert set(evens) == {0, 2, 4}


def test_function_domain_samples():
    fnc = ray.tune.search.sample.Function(lambda spec: np.random.uniform(-4, 4))
    drawn = fnc.sample(size=1000)
    assert all(-4 < s < 4 for s in drawn)
    assert -2 < np.mean(drawn) < 2


def test_sample_from_function_signatures():
    def sample_a():
        return 0

    def sample_b(spec):
        return 1

    def sample_c(spec, b="ok"):
        return 2

    def sample_d_invalid(spec, b):
        return 3

    for fn, want in [(sample_a, 0), (sample_b, 1), (sample_c, 2)]:
        assert tune.sample_from(fn).sample(None) == want
    assert tune.sample_from(partial(sample_d_invalid, b="ok")).sample(None) == 3
    with pytest.raises(ValueError):
        tune.sample_from(sample_d_invalid).sample(None)


def test_quantized_float_bounds_must_be_multiples():
    with pytest.raises(ValueError):
        ray.tune.search.sample.Float(1e-4, 1e-1).quantized(5e-4)
    with pytest.raises(ValueError):
        ray.tune.search.sample.Float(-1e-1, -1e-4).quantized(5e-4)
    with pytest.raises(ValueError):
        ray.tune.search.sample.Float(0, 32).quantized(3)
    drawn = ray.tune.search.sample.Float(0, 33).quantized(3).sample(size=300)
    assert all(0 <= s <= 33 and np.isclose(s / 3, round(s / 3)) for s in drawn)
    logq = ray.tune.search.sample.Float(1e-4, 1e-1).loguniform().quantized(5e-5)
    for s in logq.sample(size=300):
        assert 1e-4 <= s <= 1e-1
        assert np.isclose(s / 5e-5, round(s / 5e-5))


def test_choice_keeps_each_category_type():
    drawn = tune.choice([1.0, "str"]).sample(size=100)
    assert all((x, type(x)) in [(1.0, float), ("str", str)] for x in drawn)


# -- TimeoutStopper (test_stopper.py) -----------------------------------------------------
class FakeClock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now

    def tick(self, seconds):
        self.now += seconds


@pytest.fixture
def clock():
    fake = FakeClock()
    with patch("time.time", fake), patch("time.monotonic", fake):
        yield fake


def test_timeout_stopper_times_out(clock):
    stopper = TimeoutStopper(timeout=60)
    assert not stopper.stop_all()
    clock.tick(40)
    assert not stopper.stop_all()
    clock.tick(22)
    assert stopper.stop_all()


def test_timeout_stopper_restored_before_the_timeout_continues(clock):
    stopper = TimeoutStopper(timeout=60)
    assert not stopper.stop_all()
    clock.tick(40)
    assert not stopper.stop_all()
    saved = pickle.dumps(stopper)
    clock.tick(200)
    stopper = pickle.loads(saved)
    assert not stopper.stop_all()
    clock.tick(10)
    assert not stopper.stop_all()
    clock.tick(12)
    assert stopper.stop_all()


def test_timeout_stopper_restored_after_the_timeout_stops(clock):
    stopper = TimeoutStopper(timeout=60)
    assert not stopper.stop_all()
    clock.tick(62)
    assert stopper.stop_all()
    saved = pickle.dumps(stopper)
    clock.tick(200)
    stopper = pickle.loads(saved)
    assert stopper.stop_all()


# -- CallbackList (test_callbacks.py) -----------------------------------------------------
class StatefulCallback(Callback):
    def __init__(self):
        self.counter = 0

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.counter += 1

    def get_state(self):
        return {"counter": self.counter}

    def set_state(self, state):
        self.counter = state["counter"]


def test_callback_list_saves_and_restores_stateful_callbacks(tmp_path):
    callbacks = CallbackList([Callback(), StatefulCallback()])
    for i in range(3):
        callbacks.on_trial_result(iteration=i, trials=None, trial=None, result=None)
    callbacks.save_to_dir(str(tmp_path))
    assert list(tmp_path.glob(CallbackList.CKPT_FILE_TMPL.format("*")))
    assert callbacks.can_restore(str(tmp_path))
    restored = CallbackList([Callback(), StatefulCallback()])
    restored.restore_from_dir(str(tmp_path))
    assert restored._callbacks[1].counter == 3


def test_callback_list_without_state_saves_nothing(tmp_path):
    callbacks = CallbackList([Callback(), Callback()])
    callbacks.save_to_dir(str(tmp_path))
    assert not list(tmp_path.glob(CallbackList.CKPT_FILE_TMPL.format("*")))
    assert not callbacks.can_restore(str(tmp_path))
    with pytest.raises(RuntimeError):
        callbacks.restore_from_dir(str(tmp_path))


# -- logger callbacks driven by hand (test_logger.py) -------------------------------------
@dataclass
class FakeTrial:
    evaluated_params: dict
    trial_id: str
    logdir: str

    @property
    def config(self):
        return self.evaluated_params

    def __hash__(self):
        return hash(self.trial_id)


CONFIG = {"a": 2, "b": 5, "c": {"c": {"D": 123}, "e": None}}


def result(t, rew, **kwargs):
    return dict(
        time_total_s=t,
        episode_reward_mean=rew,
        mean_accuracy=rew * 2,
        training_iteration=int(t),
        **kwargs,
    )


def log_three(logger, trial):
    logger.on_trial_result(0, [], trial, result(0, 4))
    logger.on_trial_result(1, [], trial, result(1, 5))
    logger.on_trial_result(2, [], trial, result(2, 6, score=[1, 2, 3], hello={"world": 1}))
    logger.on_trial_complete(3, [], trial)


def test_csv_logger_callback_writes_progress_csv(tmp_path):
    trial = FakeTrial(CONFIG, "csv", str(tmp_path))
    log_three(CSVLoggerCallback(), trial)
    with open(tmp_path / EXPR_PROGRESS_FILE) as f:
        rows = list(csv.DictReader(f))
    assert [int(row["episode_reward_mean"]) for row in rows] == [4, 5, 6]


def test_csv_header_survives_a_second_start(tmp_path):
    trial = FakeTrial(CONFIG, "csv", str(tmp_path))
    logger = CSVLoggerCallback()
    logger.on_trial_start(0, [], trial)
    logger.on_trial_start(0, [], trial)
    logger.on_trial_result(1, [], trial, result(1, 5))
    logger.on_trial_complete(2, [], trial)
    first_line = (tmp_path / "progress.csv").read_text().split("\n")[0]
    assert "training_iteration" in first_line


def test_json_logger_callback_writes_results_and_params(tmp_path):
    trial = FakeTrial(CONFIG, "json", str(tmp_path))
    log_three(JsonLoggerCallback(), trial)
    with open(tmp_path / EXPR_RESULT_FILE) as f:
        rows = [json.loads(line) for line in f]
    assert [int(row["episode_reward_mean"]) for row in rows] == [4, 5, 6]
    with open(tmp_path / EXPR_PARAM_FILE) as f:
        assert json.load(f) == CONFIG
    with open(tmp_path / EXPR_PARAM_PICKLE_FILE, "rb") as f:
        assert pickle.load(f) == CONFIG


def test_tbx_logger_callback_writes_an_event_file(tmp_path):
    pytest.importorskip("tensorboardX")
    config = {"a": 2, "b": [1, 2], "int64": np.int64(2), "float32": np.float32(3)}
    trial = FakeTrial(config, "tbx", str(tmp_path))
    log_three(TBXLoggerCallback(), trial)
    assert glob.glob(os.path.join(str(tmp_path), "events*"))


def test_flatten_dict_joins_nested_keys():
    assert flatten_dict({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a/b": 1, "a/c/d": 2, "e": 3}


# -- Trainable used by hand (test_trainable.py) -------------------------------------------
class SavingTrainable(tune.Trainable):
    def __init__(self, return_type, *args, **kwargs):
        self.return_type = return_type
        super().__init__(*args, **kwargs)

    def setup(self, config):
        self.value = config.get("start", 0)

    def step(self):
        self.value += 1
        return {"value": self.value}

    def save_checkpoint(self, checkpoint_dir):
        if self.return_type == "object":
            return {"value": self.value}
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump({"value": self.value}, f)
        return checkpoint_dir if self.return_type == "root" else None

    def load_checkpoint(self, checkpoint):
        if self.return_type == "object":
            assert isinstance(checkpoint, dict)
            self.value = checkpoint["value"]
        else:
            with open(os.path.join(checkpoint, "state.json")) as f:
                self.value = json.load(f)["value"]


@pytest.mark.parametrize("return_type", ["object", "root", "none"])
def test_trainable_save_and_restore_by_hand(return_type):
    trainable = SavingTrainable(return_type, config={"start": 5})
    first = trainable.train()
    assert first["value"] == 6
    assert first["training_iteration"] == 1
    assert first["done"] is False
    path = trainable.save()
    trainable.train()
    trainable.train()
    assert trainable.iteration == 3
    trainable.restore(path)
    assert trainable.value == 6
    assert trainable.iteration == 1
    assert trainable.train()["training_iteration"] == 2
    trainable.stop()


def test_trainable_result_carries_the_auto_filled_keys():
    trainable = SavingTrainable("object", config={})
    got = trainable.train()
    for key in ("time_this_iter_s", "time_total_s", "timestamp", "pid", "hostname", "date"):
        assert key in got
    assert trainable.get_config() == {}
    trainable.stop()
