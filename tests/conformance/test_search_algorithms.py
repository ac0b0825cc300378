"""Ray Tune's search algorithms (user guide: "Search Algorithms (tune.search)"), called
on their own as the API reference shows them (space, metric and mode in the
constructor, suggest, set_search_properties, convert_search_space, save/restore),
inside ConcurrencyLimiter and Repeater, and in a few tiny Tuner runs, with a Searcher
subclass written in the form Ray's docs give."""

import math
import os

import optuna
import pytest
from hyperopt import hp
from hyperopt.pyll import Apply
from ray import train, tune
from ray.train import RunConfig
from ray.tune import ExperimentAnalysis
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Repeater, Searcher
from ray.tune.search.bayesopt import BayesOptSearch
from ray.tune.search.bohb import TuneBOHB
from ray.tune.search.hyperopt import HyperOptSearch
from ray.tune.search.optuna import OptunaSearch

SPACE = {"x": tune.uniform(0.0, 1.0), "y": tune.uniform(-1.0, 1.0)}


def make_optuna(**kw):
    return OptunaSearch(seed=7, **kw)


def make_hyperopt(**kw):
    return HyperOptSearch(random_state_seed=7, n_initial_points=2, **kw)


def make_bayesopt(**kw):
    return BayesOptSearch(random_state=7, random_search_steps=20, **kw)  # no GP fit: fast


def make_bohb(**kw):
    return TuneBOHB(seed=7, **kw)


FACTORIES = {
    "optuna": make_optuna,
    "hyperopt": make_hyperopt,
    "bayesopt": make_bayesopt,
    "bohb": make_bohb,
}
NAMES = sorted(FACTORIES)


def loss_of(config):
    return (config["x"] - 0.3) ** 2 + config["y"] ** 2


def run_standalone(searcher, n, prefix="t"):
    """Suggest and complete n trials, as Tune's loop would; the configs."""
    configs = []
    for i in range(n):
        trial_id = f"{prefix}{i}"
        config = searcher.suggest(trial_id)
        assert isinstance(config, dict), config
        searcher.on_trial_result(trial_id, {"loss": loss_of(config), "training_iteration": 1})
        searcher.on_trial_complete(trial_id, result={"loss": loss_of(config)}, error=False)
        configs.append(config)
    return configs


def objective(config):
    train.report({"loss": loss_of(config), "x": config["x"]})


class ListSearch(Searcher):
    """Ray's documented custom Searcher form: suggests the given configs in order."""

    def __init__(self, configs, metric="loss", mode="min", **kwargs):
        super().__init__(metric=metric, mode=mode, **kwargs)
        self.configs = [dict(c) for c in configs]
        self.suggested = {}
        self.completed = []

    def suggest(self, trial_id):
        if not self.configs:
            return Searcher.FINISHED
        configuration = self.configs.pop(0)
        self.suggested[trial_id] = configuration
        return dict(configuration)

    def on_trial_complete(self, trial_id, result, **kwargs):
        self.completed.append((trial_id, result, kwargs))


# -- on their own: space, metric and mode in the constructor -----------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_suggest_works_with_space_metric_and_mode_in_the_constructor(name):
    searcher = FACTORIES[name](space=SPACE, metric="loss", mode="min")
    for config in run_standalone(searcher, 3):
        assert 0.0 <= config["x"] <= 1.0 and -1.0 <= config["y"] <= 1.0


@pytest.mark.parametrize("name", NAMES)
def test_metric_and_mode_properties(name):
    searcher = FACTORIES[name](space=SPACE, metric="loss", mode="max")
    assert searcher.metric == "loss"
    assert searcher.mode == "max"


@pytest.mark.parametrize("name", NAMES)
def test_set_search_properties_is_false_when_the_space_is_already_set(name):
    searcher = FACTORIES[name](space=SPACE, metric="loss", mode="min")
    assert searcher.set_search_properties("loss", "min", {"z": tune.uniform(0, 1)}) is False


@pytest.mark.parametrize("name", NAMES)
def test_set_search_properties_is_true_when_it_takes_the_space(name):
    searcher = FACTORIES[name]()
    assert searcher.set_search_properties("loss", "min", dict(SPACE)) is True
    assert searcher.metric == "loss" and searcher.mode == "min"
    assert set(searcher.suggest("a")) == {"x", "y"}
    # the space is set now: a second one is declined
    assert searcher.set_search_properties("loss", "min", dict(SPACE)) is False


@pytest.mark.parametrize("name", NAMES)
def test_on_trial_complete_takes_rays_keywords(name):
    searcher = FACTORIES[name](space=SPACE, metric="loss", mode="min")
    searcher.suggest("ok")
    searcher.suggest("failed")
    searcher.suggest("none")
    searcher.on_trial_complete("ok", result={"loss": 0.5}, error=False)
    searcher.on_trial_complete("failed", result=None, error=True)
    searcher.on_trial_complete(trial_id="none")
    assert isinstance(searcher.suggest("next"), dict)


@pytest.mark.parametrize("name", NAMES)
def test_save_and_restore_a_file(name, tmp_path):
    searcher = FACTORIES[name](space=SPACE, metric="loss", mode="min")
    run_standalone(searcher, 4)
    path = os.path.join(str(tmp_path), "my_favorite_path.pkl")
    searcher.save(path)
    restored = FACTORIES[name](space=SPACE, metric="loss", mode="min")
    restored.restore(path)
    assert run_standalone(restored, 2, "n") == run_standalone(searcher, 2, "n")


@pytest.mark.parametrize("name", NAMES)
def test_save_to_dir_and_restore_from_dir(name, tmp_path):
    searcher = FACTORIES[name](space=SPACE, metric="loss", mode="min")
    run_standalone(searcher, 3)
    searcher.save_to_dir(str(tmp_path))
    restored = FACTORIES[name](space=SPACE, metric="loss", mode="min")
    restored.restore_from_dir(str(tmp_path))
    assert run_standalone(restored, 2, "n") == run_standalone(searcher, 2, "n")


@pytest.mark.parametrize("name", NAMES)
def test_a_searcher_saved_with_a_tune_space_restores_without_it(name, tmp_path):
    searcher = FACTORIES[name]()
    searcher.set_search_properties("loss", "min", dict(SPACE))
    run_standalone(searcher, 3)
    searcher.save(os.path.join(str(tmp_path), "state"))
    restored = FACTORIES[name]()
    restored.restore(os.path.join(str(tmp_path), "state"))
    assert restored.metric == "loss" and restored.mode == "min"
    assert run_standalone(restored, 2, "n") == run_standalone(searcher, 2, "n")


@pytest.mark.parametrize("name", NAMES)
def test_points_to_evaluate_come_first(name):
    points = [{"x": 0.25, "y": 0.5}, {"x": 0.75, "y": -0.5}]
    searcher = FACTORIES[name](space=SPACE, metric="loss", mode="min", points_to_evaluate=points)
    assert run_standalone(searcher, 2) == points


@pytest.mark.parametrize("name", ["bayesopt", "hyperopt", "optuna"])
def test_evaluated_rewards_are_not_run_again(name):
    points = [{"x": 0.25, "y": 0.5}, {"x": 0.75, "y": -0.5}]
    searcher = FACTORIES[name](
        space=SPACE,
        metric="loss",
        mode="min",
        points_to_evaluate=points,
        evaluated_rewards=[loss_of(p) for p in points],
    )
    assert searcher.suggest("a") not in points


def test_finished_constant():
    assert Searcher.FINISHED == "FINISHED"
    assert OptunaSearch.FINISHED == "FINISHED"


# -- convert_search_space -----------------------------------------------------------------------


def test_optuna_convert_search_space_gives_optuna_distributions():
    converted = OptunaSearch.convert_search_space(
        {
            "a": tune.uniform(0, 1),
            "nested": {"b": tune.loguniform(1e-4, 1e-1)},
            "c": tune.choice(["u", "v"]),
        }
    )
    assert set(converted) == {"a", "nested/b", "c"}
    assert all(isinstance(d, optuna.distributions.BaseDistribution) for d in converted.values())
    assert converted["nested/b"].log
    assert converted["c"].choices == ("u", "v")


def test_optuna_search_takes_a_dict_of_optuna_distributions():
    space = {
        "x": optuna.distributions.FloatDistribution(0.0, 1.0),
        "y": optuna.distributions.FloatDistribution(-1.0, 1.0),
    }
    searcher = OptunaSearch(space, metric="loss", mode="min", seed=3)
    for config in run_standalone(searcher, 3):
        assert 0.0 <= config["x"] <= 1.0


def test_optuna_convert_search_space_refuses_a_grid():
    with pytest.raises(ValueError, match="grid"):
        OptunaSearch.convert_search_space({"a": tune.grid_search([1, 2])})


def test_hyperopt_convert_search_space_gives_a_hyperopt_space():
    from hyperopt.pyll.stochastic import sample

    converted = HyperOptSearch.convert_search_space(
        {"a": tune.uniform(0, 1), "n": {"k": tune.randint(1, 4)}, "c": tune.choice(["u", "v"])}
    )
    assert isinstance(converted["a"], Apply) and isinstance(converted["n"]["k"], Apply)
    drawn = sample(converted)
    assert 0 <= drawn["a"] <= 1 and drawn["n"]["k"] in (1, 2, 3) and drawn["c"] in ("u", "v")


def test_hyperopt_search_takes_a_hyperopt_space():
    space = {"x": hp.uniform("x", 0, 1), "y": hp.uniform("y", -1, 1)}
    searcher = HyperOptSearch(space, metric="loss", mode="min", random_state_seed=3)
    for config in run_standalone(searcher, 3):
        assert 0.0 <= config["x"] <= 1.0


def test_bayesopt_convert_search_space_gives_bounds():
    converted = BayesOptSearch.convert_search_space(
        {"a": tune.uniform(0, 1), "n": {"b": tune.uniform(-2, 2)}, "k": 3}
    )
    assert converted == {"a": (0, 1), "n/b": (-2, 2)}
    joined = BayesOptSearch.convert_search_space({"a": tune.uniform(0, 1), "k": 3}, join=True)
    assert joined == {"a": (0, 1), "k": 3}


def test_bayesopt_takes_rays_bounds_space():
    searcher = BayesOptSearch(
        {"x": (0, 1), "y": (-1, 1)}, metric="loss", mode="min", random_state=1
    )
    for config in run_standalone(searcher, 3):
        assert 0.0 <= config["x"] <= 1.0 and -1.0 <= config["y"] <= 1.0


@pytest.mark.parametrize(
    "utility_kwargs",
    [
        {"kind": "ei", "kappa": 2.5, "xi": 0.0},
        {"kind": "ei", "kappa": 2.576, "xi": 0.01},
        {"kind": "poi", "kappa": 2.576, "xi": 0.01},
    ],
)
def test_bayesopt_utility_kwargs_ei_and_poi_are_honoured(utility_kwargs):
    searcher = BayesOptSearch(SPACE, metric="loss", mode="min", utility_kwargs=utility_kwargs)
    assert isinstance(searcher.suggest("a"), dict)


def test_bayesopt_example_ucb_utility_kwargs():
    # bayesopt_example.py's searcher, as Ray's example builds it; the GP (UCB, kappa 2.5)
    # makes the suggestions after random_search_steps finished trials
    algo = BayesOptSearch(
        utility_kwargs={"kind": "ucb", "kappa": 2.5, "xi": 0.0}, random_search_steps=3
    )
    algo = ConcurrencyLimiter(algo, max_concurrent=4)
    algo.set_search_properties("loss", "min", SPACE)
    for config in run_standalone(algo, 4):
        assert 0.0 <= config["x"] <= 1.0 and -1.0 <= config["y"] <= 1.0


# -- ConcurrencyLimiter and Repeater on their own ---------------------------------------------


def test_concurrency_limiter_returns_none_at_the_limit():
    limited = ConcurrencyLimiter(
        make_optuna(space=SPACE, metric="loss", mode="min"), max_concurrent=2
    )
    assert isinstance(limited.suggest("a"), dict) and isinstance(limited.suggest("b"), dict)
    assert limited.suggest("c") is None
    limited.on_trial_complete("a", result={"loss": 1.0})
    assert isinstance(limited.suggest("c"), dict)


def test_concurrency_limiter_takes_the_wrapped_searchers_metric_and_mode():
    limited = ConcurrencyLimiter(
        make_hyperopt(space=SPACE, metric="acc", mode="max"), max_concurrent=1
    )
    assert limited.metric == "acc" and limited.mode == "max"


def test_concurrency_limiter_calls_a_user_searcher_with_rays_keywords():
    inner = ListSearch([{"x": 0.1, "y": 0.0}, {"x": 0.2, "y": 0.0}])
    limited = ConcurrencyLimiter(inner, max_concurrent=1)
    assert limited.suggest("a") == {"x": 0.1, "y": 0.0}
    assert limited.suggest("b") is None
    limited.on_trial_complete("a", result={"loss": 0.04}, error=False)
    assert inner.completed == [("a", {"loss": 0.04}, {"error": False})]
    assert limited.suggest("b") == {"x": 0.2, "y": 0.0}


def test_concurrency_limiter_batch_tells_the_searcher_once_the_batch_ended():
    inner = ListSearch([{"x": i / 10, "y": 0.0} for i in range(4)])
    limited = ConcurrencyLimiter(inner, max_concurrent=2, batch=True)
    limited.suggest("a"), limited.suggest("b")
    limited.on_trial_complete("a", result={"loss": 1.0})
    assert inner.completed == [] and limited.suggest("c") is None
    limited.on_trial_complete("b", result={"loss": 2.0})
    assert [t for t, _, _ in inner.completed] == ["a", "b"]
    assert isinstance(limited.suggest("c"), dict)


def test_concurrency_limiter_passes_finished_through():
    limited = ConcurrencyLimiter(ListSearch([{"x": 0.1, "y": 0.0}]), max_concurrent=3)
    limited.suggest("a")
    assert limited.suggest("b") == Searcher.FINISHED


def test_concurrency_limiter_refuses_a_bad_limit():
    with pytest.raises((ValueError, TypeError, AssertionError)):
        ConcurrencyLimiter(make_optuna(space=SPACE, metric="loss", mode="min"), max_concurrent=0)


def test_concurrency_limiter_save_and_restore_keep_its_live_trials(tmp_path):
    limited = ConcurrencyLimiter(
        make_optuna(space=SPACE, metric="loss", mode="min"), max_concurrent=2
    )
    limited.suggest("a"), limited.suggest("b")
    path = os.path.join(str(tmp_path), "limiter.json")
    limited.save(path)
    again = ConcurrencyLimiter(
        make_optuna(space=SPACE, metric="loss", mode="min"), max_concurrent=2
    )
    again.restore(path)
    assert again.suggest("c") is None  # a and b are still running
    again.on_trial_complete("a", result={"loss": 0.3})
    limited.on_trial_complete("a", result={"loss": 0.3})
    assert again.suggest("c") == limited.suggest("c")


def test_repeater_repeats_each_config_with_its_index():
    repeated = Repeater(make_optuna(space=SPACE, metric="loss", mode="min"), repeat=3)
    configs = [repeated.suggest(f"t{i}") for i in range(3)]
    assert [c["__trial_index__"] for c in configs] == [0, 1, 2]
    assert len({(c["x"], c["y"]) for c in configs}) == 1


def test_repeater_without_index():
    repeated = Repeater(
        make_optuna(space=SPACE, metric="loss", mode="min"), repeat=2, set_index=False
    )
    assert "__trial_index__" not in repeated.suggest("a")


def test_repeater_tells_a_user_searcher_the_mean_with_rays_keywords():
    inner = ListSearch([{"x": 0.5, "y": 0.0}])
    repeated = Repeater(inner, repeat=2)
    repeated.suggest("a"), repeated.suggest("b")
    repeated.on_trial_complete("a", result={"loss": 1.0})
    assert inner.completed == []
    repeated.on_trial_complete("b", result={"loss": 3.0})
    assert inner.completed == [("a", {"loss": 2.0}, {"error": False})]


def test_repeater_save_and_restore_keep_its_groups(tmp_path):
    repeated = Repeater(make_hyperopt(space=SPACE, metric="loss", mode="min"), repeat=2)
    first = repeated.suggest("a")
    path = os.path.join(str(tmp_path), "repeater.json")
    repeated.save(path)
    again = Repeater(make_hyperopt(space=SPACE, metric="loss", mode="min"), repeat=2)
    again.restore(path)
    second = again.suggest("b")  # the group of "a" takes one more trial
    assert (second["x"], second["y"]) == (first["x"], first["y"])
    assert second["__trial_index__"] == 1


# -- a user's Searcher subclass ----------------------------------------------------------------


def test_a_user_searcher_declines_the_space_as_rays_base_does():
    searcher = ListSearch([{"x": 0.1, "y": 0.0}])
    assert searcher.set_search_properties("loss", "min", {}) is False
    assert searcher.metric == "loss" and searcher.mode == "min"


def test_a_user_searcher_suggests_then_finishes():
    searcher = ListSearch([{"x": 0.1, "y": 0.0}])
    assert searcher.suggest("a") == {"x": 0.1, "y": 0.0}
    assert searcher.suggest("b") == Searcher.FINISHED


# -- through a Tuner ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("search_algorithms"))


@pytest.fixture(scope="module")
def optuna_run(storage):
    """OptunaSearch with points_to_evaluate, limited to 2 at once, metric/mode in TuneConfig."""
    search = OptunaSearch(points_to_evaluate=[{"x": 0.3, "y": 0.0}], seed=11)
    limited = ConcurrencyLimiter(search, max_concurrent=2)
    tuner = tune.Tuner(
        objective,
        param_space=dict(SPACE),
        tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=limited, num_samples=4),
        run_config=RunConfig(name="optuna_run", storage_path=storage, verbose=0),
    )
    return search, tuner.fit()


def test_tuner_runs_num_samples_trials(optuna_run):
    _, results = optuna_run
    assert len(results) == 4 and results.num_errors == 0


def test_tuner_runs_points_to_evaluate_first(optuna_run):
    _, results = optuna_run
    configs = [r.config for r in results]
    assert {"x": 0.3, "y": 0.0} in configs


def test_tuner_best_result_is_the_point_at_the_optimum(optuna_run):
    _, results = optuna_run
    best = results.get_best_result()
    assert best.metrics["loss"] == pytest.approx(0.0)


def test_tuner_filled_in_the_searchers_metric_and_mode(optuna_run):
    search, _ = optuna_run
    assert search.metric == "loss" and search.mode == "min"


def test_restore_from_dir_of_an_experiment_continues_in_a_new_tuner(optuna_run, storage):
    search2 = OptunaSearch()
    search2.restore_from_dir(os.path.join(storage, "optuna_run"))
    assert search2.metric == "loss" and search2.mode == "min"
    tuner = tune.Tuner(
        objective,
        tune_config=tune.TuneConfig(search_alg=search2, num_samples=2),
        run_config=RunConfig(name="restored_run", storage_path=storage, verbose=0),
    )
    results = tuner.fit()
    assert len(results) == 2 and results.num_errors == 0
    assert all(set(r.config) == {"x", "y"} for r in results)


@pytest.fixture(scope="module")
def repeater_run(storage):
    inner = ListSearch([{"x": 0.1, "y": 0.0}, {"x": 0.5, "y": 0.0}])
    tuner = tune.Tuner(
        objective,
        param_space={"epochs": 1},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", search_alg=Repeater(inner, repeat=2), num_samples=4
        ),
        run_config=RunConfig(name="repeater_run", storage_path=storage, verbose=0),
    )
    return inner, tuner.fit()


def test_repeater_in_a_tuner_runs_each_config_repeat_times(repeater_run):
    _, results = repeater_run
    configs = sorted((r.config["x"], r.config["__trial_index__"]) for r in results)
    assert configs == [(0.1, 0), (0.1, 1), (0.5, 0), (0.5, 1)]


def test_repeater_in_a_tuner_tells_the_searcher_the_mean(repeater_run):
    inner, _ = repeater_run
    means = sorted(result["loss"] for _, result, _ in inner.completed)
    assert means == pytest.approx([(0.1 - 0.3) ** 2, (0.5 - 0.3) ** 2])


def test_param_space_constants_reach_a_searcher_that_declined_it(repeater_run):
    _, results = repeater_run
    assert all(r.config["epochs"] == 1 for r in results)


def test_a_searcher_with_its_own_space_takes_param_space_constants(storage):
    search = HyperOptSearch(SPACE, metric="loss", mode="min", random_state_seed=1)
    tuner = tune.Tuner(
        objective,
        param_space={"epochs": 2},
        tune_config=tune.TuneConfig(search_alg=search, num_samples=2),
        run_config=RunConfig(name="own_space", storage_path=storage, verbose=0),
    )
    results = tuner.fit()
    assert [r.config["epochs"] for r in results] == [2, 2]
    assert all(math.isfinite(r.metrics["loss"]) for r in results)


def test_a_searcher_with_its_own_space_refuses_a_param_space_with_domains(storage):
    search = OptunaSearch(SPACE, metric="loss", mode="min")
    tuner = tune.Tuner(
        objective,
        param_space={"z": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(search_alg=search, num_samples=1),
        run_config=RunConfig(name="both_spaces", storage_path=storage, verbose=0),
    )
    with pytest.raises(ValueError, match="already instantiated with a search space"):
        tuner.fit()


# --------------------------------------------- Ray's parameter order, positionally


@pytest.mark.parametrize("cls", [OptunaSearch, HyperOptSearch, BayesOptSearch])
def test_space_metric_mode_positionally(cls):
    search = cls(dict(SPACE), "loss", "min")
    assert (search.metric, search.mode) == ("loss", "min")
    assert 0 <= search.suggest("t0")["x"] <= 1


def test_hyperopt_every_parameter_positionally():
    search = HyperOptSearch(dict(SPACE), "loss", "min", [{"x": 0.1, "y": 0.2}], 2, 7, 0.25)
    assert search.suggest("t0") == {"x": 0.1, "y": 0.2}


def test_optuna_every_parameter_positionally():
    sampler = optuna.samplers.RandomSampler(seed=3)
    search = OptunaSearch(dict(SPACE), "loss", "min", [{"x": 0.1, "y": 0.2}], sampler, "s")
    assert search.suggest("t0") == {"x": 0.1, "y": 0.2}


def test_bayesopt_every_parameter_positionally():
    search = BayesOptSearch(dict(SPACE), "loss", "min", None, None, 7, 20, 0, 5, True)
    assert (search.metric, search.mode) == ("loss", "min")
    assert isinstance(search.suggest("t0"), dict)


def test_bohb_space_then_bohb_config_positionally():
    search = TuneBOHB(dict(SPACE), {"min_points_in_model": 3}, "loss", "min", None, 7)
    assert (search.metric, search.mode) == ("loss", "min")
    assert isinstance(search.suggest("t0"), dict)


def test_basic_variant_generator_positionally():
    search = BasicVariantGenerator([{"x": 0.5}], 2, True, 7)
    assert search.max_concurrent == 2


def test_limiter_and_repeater_positionally():
    assert ConcurrencyLimiter(make_optuna(space=dict(SPACE)), 2).max_concurrent == 2
    repeater = Repeater(make_optuna(space=dict(SPACE), metric="loss", mode="min"), 3)
    assert repeater.repeat == 3


# ---------------------------------------------- add_evaluated_point / _trials


@pytest.mark.parametrize("name", ["optuna", "hyperopt", "bayesopt"])
def test_add_evaluated_point_feeds_the_model_and_its_saved_state(name, tmp_path):
    search = FACTORIES[name](space=dict(SPACE), metric="loss", mode="min")
    search.add_evaluated_point({"x": 0.3, "y": 0.0}, 0.0)
    search.add_evaluated_point({"x": 0.9, "y": 0.9}, 1.2, error=True)
    search.add_evaluated_point({"x": 0.1, "y": 0.5}, 0.3, pruned=True, intermediate_values=[1.0])
    path = str(tmp_path / "searcher.pkl")
    search.save(path)
    restored = FACTORIES[name](space=dict(SPACE), metric="loss", mode="min")
    restored.restore(path)
    assert restored.suggest("t0") == search.suggest("t0")


def test_add_evaluated_trials_takes_an_experiment_analysis(optuna_run, storage):
    analysis = ExperimentAnalysis(os.path.join(storage, "optuna_run"))
    search = make_hyperopt(space=dict(SPACE), metric="loss", mode="min")
    search.add_evaluated_trials(analysis, "loss")
    assert len(search.get_state()["done"]) == 4  # finished trials: in the StateLog
    with pytest.warns(UserWarning, match="no finished trial reported the metric"):
        make_optuna(space=dict(SPACE), metric="loss", mode="min").add_evaluated_trials(
            analysis.trials, "no_such_metric"
        )


def test_a_searcher_without_evaluated_points_raises_not_implemented():
    with pytest.raises(NotImplementedError):
        BasicVariantGenerator().add_evaluated_point({"x": 0.5}, 1.0)


# ------------------------------- ConcurrencyLimiter / Repeater state (Ray's attributes)


class CountingSearcher(Searcher):
    """Ray's test_searcher_utils form: each suggestion's score counts up."""

    def __init__(self):
        super().__init__(metric="result", mode="max")
        self.index = 0
        self.returned_result = []

    def suggest(self, trial_id):
        self.index += 1
        return {"score": self.index}

    def on_trial_complete(self, trial_id, result=None, **kwargs):
        self.returned_result.append(result)


def test_limiter_state_brings_back_its_limit_and_live_trials():
    searcher = CountingSearcher()
    limiter = ConcurrencyLimiter(searcher, max_concurrent=2)
    assert limiter.suggest("t1")["score"] == 1 and limiter.suggest("t2")["score"] == 2
    state = limiter.get_state()
    limiter2 = ConcurrencyLimiter(searcher, max_concurrent=3)
    limiter2.set_state(state)
    assert limiter2.max_concurrent == 2
    assert limiter2.suggest("t4") is None and limiter2.suggest("t5") is None
    limiter2.on_trial_complete("t1", {"result": 3})
    limiter2.on_trial_complete("t2", {"result": 3})
    assert limiter2.suggest("t3")["score"] == 3


def test_repeater_state_brings_back_its_repeat_and_open_group():
    searcher = CountingSearcher()
    repeater = Repeater(searcher, repeat=3, set_index=False)
    assert [repeater.suggest(f"test_{i}")["score"] for i in range(3)] == [1, 1, 1]
    assert [repeater.suggest(f"test_2_{i}")["score"] for i in range(2)] == [2, 2]
    state = repeater.get_state()
    repeater2 = Repeater(searcher, repeat=1, set_index=True)
    repeater2.set_state(state)
    assert repeater2.repeat == 3
    assert repeater2.suggest("test_2_2")["score"] == 2  # finishes the open group
    assert repeater2.suggest("test_x")["score"] == 3
    for i in range(3):
        repeater2.on_trial_complete(f"test_{i}", {"result": -i * 10})
    assert searcher.returned_result[-1] == {"result": -10}
