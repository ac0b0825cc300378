"""Ray Tune's searchers on Nevergrad, HEBO, ZOOpt and Ax (API reference:
ray.tune.search.nevergrad.NevergradSearch, hebo.HEBOSearch, zoopt.ZOOptSearch,
ax.AxSearch), used as the docs show: through a Tuner with metric/mode, on their own
with the space in the constructor, with points_to_evaluate, and saved and restored."""

import nevergrad as ng
import pytest
from ax.service.ax_client import AxClient, ObjectiveProperties
from hebo.design_space.design_space import DesignSpace
from ray import tune
from ray.train import RunConfig
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.ax import AxSearch
from ray.tune.search.hebo import HEBOSearch
from ray.tune.search.nevergrad import NevergradSearch
from ray.tune.search.zoopt import ZOOptSearch
from zoopt import ValueType

SPACE = {"width": tune.uniform(0, 20), "height": tune.uniform(-100, 100), "steps": 2}


def easy_objective(config):
    for step in range(config["steps"]):
        score = (0.1 + config["width"] * step / 100) ** (-1) + config["height"] * 0.1
        tune.report({"iterations": step, "mean_loss": score})


def loss_of(config):
    return (0.1 + config.get("width", 1.0) / 100) ** (-1) + config.get("height", 0.0) * 0.1


def drive(search, n, start=0):
    configs = []
    for i in range(start, start + n):
        config = search.suggest(f"t{i}")
        assert isinstance(config, dict)
        search.on_trial_complete(f"t{i}", {"mean_loss": loss_of(config)})
        configs.append(config)
    return configs


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("library_searchers"))


def run(search, storage, name, num_samples=4, space=SPACE, **config):
    tuner = tune.Tuner(
        easy_objective,
        param_space=dict(space),
        tune_config=tune.TuneConfig(
            search_alg=search,
            num_samples=num_samples,
            **({"metric": "mean_loss", "mode": "min"} | config),
        ),
        run_config=RunConfig(name=name, storage_path=storage, verbose=0),
    )
    return tuner.fit()


# ---------------------------------------------------------------------- Nevergrad


@pytest.fixture(scope="module")
def nevergrad_run(storage):
    search = NevergradSearch(
        optimizer=ng.optimizers.OnePlusOne,
        points_to_evaluate=[{"width": 10.0, "height": 0.0}],
    )
    return run(ConcurrencyLimiter(search, max_concurrent=2), storage, "nevergrad")


def test_nevergrad_in_a_tuner_runs_every_trial(nevergrad_run):
    assert len(nevergrad_run) == 4 and nevergrad_run.num_errors == 0


def test_nevergrad_runs_points_to_evaluate_first(nevergrad_run):
    first = min(nevergrad_run, key=lambda r: r.metrics["trial_id"])
    assert (first.config["width"], first.config["height"]) == (10.0, 0.0)


def test_nevergrad_best_result_is_in_the_space(nevergrad_run):
    best = nevergrad_run.get_best_result()
    assert 0 <= best.config["width"] <= 20 and best.config["steps"] == 2


def test_nevergrad_with_its_own_parametrization():
    space = ng.p.Dict(
        width=ng.p.Scalar(lower=0, upper=20),
        height=ng.p.Scalar(lower=-100, upper=100),
        activation=ng.p.Choice(choices=["relu", "tanh"]),
    )
    search = NevergradSearch(
        optimizer=ng.optimizers.OnePlusOne, space=space, metric="mean_loss", mode="min"
    )
    for config in drive(search, 3):
        assert config["activation"] in ("relu", "tanh") and -100 <= config["height"] <= 100


def test_nevergrad_with_an_optimizer_instance_and_parameter_names():
    parametrization = ng.p.Instrumentation(
        ng.p.Scalar(lower=0, upper=20), ng.p.Scalar(lower=-100, upper=100)
    )
    optimizer = ng.optimizers.OnePlusOne(parametrization=parametrization)
    search = NevergradSearch(
        optimizer=optimizer, space=["width", "height"], metric="mean_loss", mode="min"
    )
    config = drive(search, 1)[0]
    assert set(config) == {"width", "height"} and 0 <= config["width"] <= 20


def test_nevergrad_with_tune_domains_in_the_constructor():
    search = NevergradSearch(
        optimizer=ng.optimizers.CMA,
        optimizer_kwargs={"budget": 10},
        space={"width": tune.uniform(0, 20), "layers": tune.randint(1, 4)},
        metric="mean_loss",
        mode="min",
    )
    for config in drive(search, 3):
        assert isinstance(config["layers"], int) and 1 <= config["layers"] < 4


def test_nevergrad_save_and_restore_continue_the_same_search(tmp_path):
    def make():
        return NevergradSearch(
            optimizer=ng.optimizers.OnePlusOne, space=dict(SPACE), metric="mean_loss", mode="min"
        )

    search = make()
    drive(search, 3)
    search.save(str(tmp_path / "nevergrad.json"))
    again = make()
    again.restore(str(tmp_path / "nevergrad.json"))
    assert drive(again, 3, start=10) == drive(search, 3, start=10)


def test_nevergrad_refuses_a_domain_it_cannot_bound():
    search = NevergradSearch(optimizer=ng.optimizers.OnePlusOne, metric="mean_loss", mode="min")
    with pytest.raises(ValueError, match=r'param_space\["w"\] is randn'):
        search.set_search_properties(None, None, {"w": tune.randn(0, 1)})


# ---------------------------------------------------------------------- HEBO


def test_hebo_in_a_tuner_runs_every_trial(storage):
    search = HEBOSearch(random_state_seed=3, max_concurrent=2)
    results = run(search, storage, "hebo", num_samples=3)
    assert len(results) == 3 and results.num_errors == 0


def test_hebo_with_its_space_in_the_constructor():
    search = HEBOSearch(
        space={"width": tune.uniform(0, 20), "act": tune.choice(["relu", "tanh"])},
        metric="mean_loss",
        mode="min",
        random_state_seed=1,
    )
    config = search.suggest("t0")
    assert 0 <= config["width"] <= 20 and config["act"] in ("relu", "tanh")


def test_hebo_evaluated_rewards_are_observed_not_run():
    points = [{"width": 1.0, "height": 1.0}, {"width": 2.0, "height": 2.0}]
    search = HEBOSearch(
        space={k: v for k, v in SPACE.items() if k != "steps"},
        metric="mean_loss",
        mode="min",
        points_to_evaluate=points,
        evaluated_rewards=[3.0, 4.0],
        random_state_seed=0,
    )
    config = search.suggest("t0")
    assert {"width": config["width"], "height": config["height"]} not in points


def test_hebo_points_to_evaluate_run_first():
    point = {"width": 5.0, "height": -3.0}
    search = HEBOSearch(metric="mean_loss", mode="min", points_to_evaluate=[point])
    search.set_search_properties(None, None, dict(SPACE))
    assert search.suggest("t0") == {**point, "steps": 2}


def test_hebo_waits_while_max_concurrent_trials_run():
    search = HEBOSearch(metric="mean_loss", mode="min", max_concurrent=2)
    search.set_search_properties(None, None, dict(SPACE))
    assert search.suggest("a") is not None and search.suggest("b") is not None
    assert search.suggest("c") is None


def test_hebo_with_a_hebo_design_space():
    space = DesignSpace().parse(
        [
            {"name": "width", "type": "num", "lb": 0, "ub": 20},
            {"name": "k", "type": "int", "lb": 1, "ub": 3},
        ]
    )
    search = HEBOSearch(space=space, metric="mean_loss", mode="min", random_state_seed=2)
    config = search.suggest("t0")
    assert 0 <= config["width"] <= 20 and config["k"] in (1, 2, 3)


# ---------------------------------------------------------------------- ZOOpt


def test_zoopt_with_dim_dict_as_in_rays_docs(storage):
    dim_dict = {
        "height": (ValueType.CONTINUOUS, [-10, 10], 1e-2),
        "width": (ValueType.DISCRETE, [0, 10], True),
    }
    search = ZOOptSearch(
        algo="Asracos", budget=4, dim_dict=dim_dict, metric="mean_loss", mode="min", parallel_num=2
    )
    results = run(
        search, storage, "zoopt", num_samples=4, space={"steps": 2}, metric=None, mode=None
    )
    assert len(results) == 4 and results.num_errors == 0
    for result in results:
        assert -10 <= result.config["height"] <= 10 and result.config["width"] in range(11)


def test_zoopt_converts_tune_domains():
    search = ZOOptSearch(budget=10, metric="mean_loss", mode="min")
    search.set_search_properties(
        None, None, {"lr": tune.loguniform(1e-4, 1e-1), "k": tune.randint(1, 4)}
    )
    for config in drive(search, 4):
        assert 1e-4 <= config["lr"] <= 1e-1 and config["k"] in (1, 2, 3)


def test_zoopt_points_to_evaluate_run_first():
    point = {"width": 3.0, "height": 4.0}
    search = ZOOptSearch(budget=10, metric="mean_loss", mode="min", points_to_evaluate=[point])
    search.set_search_properties(None, None, dict(SPACE))
    assert search.suggest("t0") == {**point, "steps": 2}


def test_zoopt_refuses_a_budget_below_three():
    with pytest.raises(ValueError, match="budget=2 must be >= 3"):
        ZOOptSearch(budget=2)


# ---------------------------------------------------------------------- Ax


def test_ax_in_a_tuner_with_metric_and_mode_in_tune_config(storage):
    results = run(AxSearch(), storage, "ax", num_samples=3)
    assert len(results) == 3 and results.num_errors == 0


def test_ax_with_its_parameter_dicts():
    parameters = [
        {"name": "x1", "type": "range", "bounds": [0.0, 1.0]},
        {"name": "x2", "type": "range", "bounds": [0.0, 1.0]},
    ]
    search = AxSearch(
        space=parameters,
        metric="score",
        mode="max",
        parameter_constraints=["x1 + x2 <= 1.0"],
        outcome_constraints=["l2norm <= 1.25"],
    )
    config = search.suggest("t0")
    assert config["x1"] + config["x2"] <= 1.0 + 1e-9
    search.on_trial_complete("t0", {"score": 1.0, "l2norm": 0.5})


def test_ax_points_to_evaluate_run_first():
    point = {"width": 2.5, "height": -1.0}
    search = AxSearch(metric="mean_loss", mode="min", points_to_evaluate=[point])
    search.set_search_properties(None, None, dict(SPACE))
    assert search.suggest("t0") == {**point, "steps": 2}


def test_ax_with_a_client_of_ones_own():
    client = AxClient(verbose_logging=False)
    client.create_experiment(
        parameters=[{"name": "width", "type": "range", "bounds": [0.0, 20.0]}],
        objectives={"mean_loss": ObjectiveProperties(minimize=True)},
    )
    search = AxSearch(ax_client=client, metric="mean_loss", mode="min")
    config = drive(search, 2)[1]
    assert 0 <= config["width"] <= 20
    assert len(client.experiment.trials) == 2


def test_ax_save_and_restore_continue_the_same_search(tmp_path):
    def make():
        return AxSearch(space=dict(SPACE), metric="mean_loss", mode="min", random_seed=5)

    search = make()
    drive(search, 2)
    search.save_to_dir(str(tmp_path))
    again = make()
    again.restore_from_dir(str(tmp_path))
    assert drive(again, 2, start=10) == drive(search, 2, start=10)


# --------------------------------------------- Ray's parameter order, positionally

OWN = {"width": tune.uniform(0, 20), "height": tune.uniform(-100, 100)}


def test_nevergrad_optimizer_then_kwargs_space_metric_mode_positionally():
    search = NevergradSearch(ng.optimizers.OnePlusOne, None, dict(OWN), "mean_loss", "min")
    assert (search.metric, search.mode) == ("mean_loss", "min")
    assert 0 <= drive(search, 1)[0]["width"] <= 20


def test_hebo_space_metric_mode_positionally():
    search = HEBOSearch(dict(OWN), "mean_loss", "min", None, None, 1, 2)
    assert (search.metric, search.mode) == ("mean_loss", "min")
    assert len(drive(search, 2)) == 2


def test_zoopt_algo_budget_dim_dict_metric_mode_positionally():
    dims = {"width": (ValueType.CONTINUOUS, [0, 20], 1e-2)}
    search = ZOOptSearch("asracos", 10, dims, "mean_loss", "min")
    assert (search.metric, search.mode) == ("mean_loss", "min")
    assert 0 <= drive(search, 1)[0]["width"] <= 20


def test_ax_space_metric_mode_positionally():
    params = [{"name": "width", "type": "range", "bounds": [0.0, 20.0]}]
    search = AxSearch(params, "mean_loss", "min")
    assert (search.metric, search.mode) == ("mean_loss", "min")
    assert 0 <= drive(search, 1)[0]["width"] <= 20
