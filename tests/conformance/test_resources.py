"""Ray Tune's resources guide: PlacementGroupFactory, with_resources, get_trial_resources,
and ResourceChangingScheduler's allocation functions (Ray form, ported at collection)."""

import tempfile
from pathlib import Path

import pytest
from ray import train, tune
from ray.train import Checkpoint, RunConfig
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, ResourceChangingScheduler
from ray.tune.schedulers.resource_changing_scheduler import (
    DistributeResources,
    DistributeResourcesToTopJob,
)

# -- PlacementGroupFactory ----------------------------------------------------------------


def test_pgf_bundles_in_ray_names():
    pgf = PlacementGroupFactory([{"CPU": 1, "GPU": 0.5}], strategy="PACK")
    assert pgf.bundles == [{"CPU": 1.0, "GPU": 0.5}]


def test_pgf_strategy_defaults_to_pack():
    assert PlacementGroupFactory([{"CPU": 1}]).strategy == "PACK"
    assert PlacementGroupFactory([{"CPU": 1}], strategy="SPREAD").strategy == "SPREAD"


def test_pgf_required_resources_sum_the_bundles():
    pgf = PlacementGroupFactory(
        [{"CPU": 1, "GPU": 0.5, "custom_resource": 2}, {"CPU": 2}, {"CPU": 2}]
    )
    assert pgf.required_resources == {"CPU": 5.0, "GPU": 0.5, "custom_resource": 2.0}


def test_pgf_head_cpus():
    assert PlacementGroupFactory([{"CPU": 3}, {"CPU": 2}]).head_cpus == 3.0


def test_pgf_head_bundle_not_empty():
    assert PlacementGroupFactory([{"CPU": 1}]).head_bundle_is_empty is False


def test_pgf_empty_head_bundle():
    pgf = PlacementGroupFactory([{}, {"CPU": 2}])
    assert pgf.head_bundle_is_empty is True
    assert pgf.head_cpus == 0.0
    assert pgf.bundles == [{"CPU": 2.0}]
    assert pgf.required_resources == {"CPU": 2.0}


def test_pgf_zero_amounts_are_dropped():
    assert PlacementGroupFactory([{"CPU": 1, "GPU": 0}]).bundles == [{"CPU": 1.0}]


def test_pgf_equality_and_hash():
    a = PlacementGroupFactory([{"CPU": 1, "GPU": 0.5}], strategy="PACK")
    b = PlacementGroupFactory([{"CPU": 1, "GPU": 0.5}], strategy="PACK")
    assert a == b and hash(a) == hash(b)
    assert a != PlacementGroupFactory([{"CPU": 1, "GPU": 0.5}], strategy="SPREAD")
    assert a != PlacementGroupFactory([{"CPU": 2, "GPU": 0.5}])


def test_pgf_bundles_are_a_copy():
    pgf = PlacementGroupFactory([{"CPU": 1}])
    pgf.bundles[0]["CPU"] = 8
    assert pgf.bundles == [{"CPU": 1.0}]


def test_pgf_without_bundles_is_refused():
    with pytest.raises(ValueError):
        PlacementGroupFactory([])


def test_pgf_is_tune_placement_group_factory():
    assert tune.PlacementGroupFactory is PlacementGroupFactory


# -- get_trial_resources inside a trial ----------------------------------------------------


def report_resources(config):
    resources = tune.get_context().get_trial_resources()
    train.report(
        {
            "is_pgf": isinstance(resources, tune.PlacementGroupFactory),
            "cpu": resources.required_resources.get("CPU", 0.0),
            "head_cpus": resources.head_cpus,
            "bundles": len(resources.bundles),
        }
    )


def _one_trial(trainable, tmp_path):
    grid = tune.Tuner(trainable, run_config=RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
    assert grid.num_errors == 0
    return grid[0].metrics


@pytest.fixture(scope="module")
def from_dict(tmp_path_factory):
    trainable = tune.with_resources(report_resources, {"cpu": 1})
    return _one_trial(trainable, tmp_path_factory.mktemp("dict"))


@pytest.fixture(scope="module")
def from_pgf(tmp_path_factory):
    pgf = tune.PlacementGroupFactory([{"CPU": 0.5}, {"CPU": 0.5}])
    trainable = tune.with_resources(report_resources, pgf)
    return _one_trial(trainable, tmp_path_factory.mktemp("pgf"))


def test_trial_resources_are_a_pgf(from_dict):
    assert from_dict["is_pgf"] is True


def test_trial_resources_from_a_dict(from_dict):
    assert from_dict["cpu"] == 1.0 and from_dict["head_cpus"] == 1.0
    assert from_dict["bundles"] == 1


def test_trial_resources_from_a_pgf(from_pgf):
    assert from_pgf["is_pgf"] is True
    assert from_pgf["bundles"] == 2 and from_pgf["head_cpus"] == 0.5
    assert from_pgf["cpu"] == 1.0


# -- ResourceChangingScheduler -------------------------------------------------------------


def test_rcs_defaults_to_fifo_and_distribute_resources():
    scheduler = ResourceChangingScheduler()
    assert scheduler.base_trial_resources is None  # before the run
    ResourceChangingScheduler(FIFOScheduler(), DistributeResources())


def test_rcs_metric_is_the_base_schedulers():
    assert ResourceChangingScheduler(ASHAScheduler(metric="loss", mode="min")).metric == "loss"


def test_distribute_resources_arguments():
    DistributeResources(add_bundles=False, increase_by={"CPU": 1}, increase_by_times=2)
    DistributeResources(reserve_resources={"CPU": 1})


def test_distribute_to_top_job_arguments():
    fn = DistributeResourcesToTopJob(mode="max", metric="score", increase_by={"GPU": 1})
    assert fn.metric == "score" and fn.mode == "max"


CALLS = []


def grow_once(tune_controller, trial, result, scheduler):
    """Ray's allocation signature: 2 CPUs after the first result, as a dict."""
    CALLS.append((type(scheduler).__name__, result["training_iteration"]))
    base = scheduler.base_trial_resources
    assert isinstance(base, PlacementGroupFactory)
    if trial.placement_group_factory.required_resources.get("CPU", 0) < 2:
        return {"CPU": 2, "GPU": 0}
    return None


def resizable(config):
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = int(Path(d, "step").read_text())
    for step in range(start, 3):
        cpus = tune.get_context().get_trial_resources().required_resources["CPU"]
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step + 1))
            train.report({"cpus": cpus, "score": step}, checkpoint=Checkpoint.from_directory(d))


@pytest.fixture(scope="module")
def resized(tmp_path_factory):
    CALLS.clear()
    grid = tune.Tuner(
        tune.with_resources(resizable, {"cpu": 1}),
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=ResourceChangingScheduler(resources_allocation_function=grow_once),
        ),
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("rcs")), verbose=0),
    ).fit()
    return grid


def test_allocation_function_gets_the_scheduler_itself(resized):
    assert CALLS and all(name == "ResourceChangingScheduler" for name, _ in CALLS)


def test_allocation_dict_resizes_the_trial(resized):
    assert resized.num_errors == 0
    cpus = list(resized[0].metrics_dataframe["cpus"])
    assert cpus[0] == 1.0 and cpus[-1] == 2.0


def test_resized_trial_resumes_from_its_checkpoint(resized):
    assert list(resized[0].metrics_dataframe["training_iteration"]) == [1, 2, 3]


# -- resources as a function of the trial's config -----------------------------------------


def report_cpu_and_gpu(config):
    resources = tune.get_context().get_trial_resources()
    required = resources.required_resources
    train.report(
        {
            "cpu": required.get("CPU", 0.0),
            "gpu": required.get("GPU", 0.0),
            "n": len(resources.bundles),
        }
    )


@pytest.fixture(scope="module")
def per_config(tmp_path_factory):
    tuner = tune.Tuner(
        tune.with_resources(
            report_cpu_and_gpu,
            resources=lambda config: {"GPU": 1} if config["use_gpu"] else {"GPU": 0},
        ),
        param_space={"use_gpu": False},  # the guide's example, on a machine without GPUs
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("fn")), verbose=0),
    )
    return tuner.fit()


def test_resources_from_a_function_of_the_config(per_config):
    assert per_config.num_errors == 0
    assert per_config[0].metrics["gpu"] == 0.0


def cpus_or_bundles(config):
    if config["cpus"] == 2:
        return tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}])
    return {"CPU": config["cpus"]}


@pytest.fixture(scope="module")
def varying(tmp_path_factory):
    tuner = tune.Tuner(
        tune.with_resources(report_cpu_and_gpu, resources=cpus_or_bundles),
        param_space={"cpus": tune.grid_search([0.5, 1, 2])},
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("vary")), verbose=0),
    )
    return tuner.fit()


def test_each_trial_gets_what_its_config_asks(varying):
    assert varying.num_errors == 0
    got = sorted((r.config["cpus"], r.metrics["cpu"], r.metrics["n"]) for r in varying)
    assert got == [(0.5, 0.5, 1), (1, 1.0, 1), (2, 2.0, 2)]


class PerTrialRequest(tune.Trainable):
    @classmethod
    def default_resource_request(cls, config):
        return PlacementGroupFactory([{"CPU": config["cpus"]}])

    def step(self):
        return {"cpus": self.trial_resources.required_resources["CPU"], "done": True}


def test_default_resource_request_gets_each_trials_config(tmp_path):
    grid = tune.Tuner(
        PerTrialRequest,
        param_space={"cpus": tune.grid_search([0.5, 1])},
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert sorted((r.config["cpus"], r.metrics["cpus"]) for r in grid) == [(0.5, 0.5), (1, 1.0)]
