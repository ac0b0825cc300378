"""What every searcher must do (issue 5): reused by each searcher's test file.

    from tests.search.searcher_conformance import check_conformance
    def test_conformance() -> None:
        check_conformance(lambda: MySearcher(seed=0))

Checks, on a mixed space (floats with log scale and quantization, ints, a mixed
categorical, a constant, nested dicts and a sample_from):

- every suggestion is inside the space, with exact types (an int is an int, a
  quantized value a multiple of q, a category one of the categories);
- a batch of suggestions asked before any result has no duplicates;
- get_state -> JSON -> set_state on a fresh searcher gives the same next
  suggestions as the original (random generators included);
- results and completions (with errors) are accepted at any time, with Ray's
  keywords (``on_trial_complete(trial_id, result=..., error=...)``);
- Ray's standalone contract: `metric`/`mode` are filled in, a second
  `set_search_properties` is declined (False), and `save(path)`/`restore(path)` and
  `save_to_dir`/`restore_from_dir` give the same next suggestions, restored into a
  searcher given the space again or into a bare one (the file carries the space).

With ``with_space=lambda space: MySearcher(space, metric="loss", mode="min", ...)``
it also checks a searcher built with its own space: `suggest` works with no
`set_search_properties`, which then returns False, and it saves and restores.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet.search import BasicVariantGenerator, Searcher
from tunefleet.space import Categorical, Domain, Float, Integer

MIXED_SPACE: dict[str, Any] = {
    "lr": tune.loguniform(1e-5, 1e-1),
    "dropout": tune.uniform(0.0, 0.5),
    "wd": tune.quniform(0.0, 0.1, 0.01),
    "layers": tune.randint(1, 5),
    "units": tune.qrandint(16, 256, 16),
    "batch": tune.lograndint(8, 512),
    "act": tune.choice(["relu", "tanh", 3, None]),
    "nested": {"momentum": tune.uniform(0.5, 0.99), "fixed": "const"},
    "double_lr": tune.sample_from(lambda spec: 2 * spec.config["lr"]),
}


def objective(config: dict[str, Any]) -> float:
    """A smooth function of the mixed space (lower is better)."""
    act = {"relu": 0.0, "tanh": 0.1, 3: 0.2, None: 0.3}[config["act"]]
    loss: float = (
        (math.log10(config["lr"]) + 3) ** 2
        + (config["dropout"] - 0.2) ** 2
        + abs(config["layers"] - 3) * 0.1
        + act
        + abs(config["units"] - 128) / 256
    )
    return loss


def check_value(domain: Domain, value: Any, where: str) -> None:
    """Assert `value` is one `domain` can produce, with its exact type."""
    if isinstance(domain, Categorical):
        cats = domain.categories
        found = any(value is c or (type(value) is type(c) and value == c) for c in cats)
        assert found, f"{where}={value!r} is not one of {domain.categories!r}"
    elif isinstance(domain, Integer):
        assert type(value) is int, f"{where}={value!r} is not an int"
        assert domain.min_value <= value <= domain.max_value, f"{where}={value} out of range"
        assert (value - domain.min_value) % domain.q == 0 or value % domain.q == 0, where
    elif isinstance(domain, Float):
        assert type(value) is float, f"{where}={value!r} is not a float"
        assert domain.min_value <= value <= domain.max_value, f"{where}={value} out of range"
        if domain.q is not None:
            k = value / domain.q
            assert abs(k - round(k)) < 1e-6, f"{where}={value} is not a multiple of {domain.q}"


def check_config(space: dict[str, Any], config: dict[str, Any], path: str = "") -> None:
    for key, node in space.items():
        assert key in config, f"{path}{key} is missing from {config}"
        value = config[key]
        if isinstance(node, dict):
            check_config(node, value, f"{path}{key}/")
        elif isinstance(node, (Float, Integer, Categorical)):
            check_value(node, value, f"{path}{key}")
        elif not isinstance(node, Domain):
            assert value == node, f"{path}{key}: the constant {node!r} became {value!r}"
    if "double_lr" in space:
        assert math.isclose(config["double_lr"], 2 * config["lr"])


S = TypeVar("S", bound=Searcher)


def make(factory: Callable[[], S], space: dict[str, Any]) -> S:
    searcher = factory()
    took = searcher.set_search_properties("loss", "min", space, num_samples=-1)
    # Ray's rule: True when it took the space; False when it has its own (space=...)
    assert took is (not _has_own_space(searcher))
    return searcher


def _has_own_space(searcher: Searcher) -> bool:
    return getattr(searcher, "_own_space", None) is not None


def drive(searcher: Searcher, n: int, start: int = 0) -> list[dict[str, Any]]:
    """Suggest and complete `n` trials one after the other; the configs."""
    configs = []
    for i in range(start, start + n):
        trial_id = f"t{i:04d}"
        config = searcher.suggest(trial_id)
        assert isinstance(config, dict), f"suggest({trial_id!r}) returned {config!r}"
        loss = objective(config)
        searcher.on_trial_result(trial_id, {"loss": loss, "training_iteration": 1})
        if i % 7 == 6:
            searcher.on_trial_complete(trial_id, result=None, error=True)  # failed trials too
        else:
            result = {"loss": loss, "training_iteration": 1}
            searcher.on_trial_complete(trial_id, result=result, error=False)
        configs.append(config)
    return configs


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=repr)


def check_conformance(
    factory: Callable[[], Searcher],
    *,
    space: dict[str, Any] | None = None,
    warmup: int = 12,
    batch: int = 6,
    with_space: Callable[[dict[str, Any]], Searcher] | None = None,
) -> None:
    space = space or MIXED_SPACE
    # inside the space, exact types
    searcher = make(factory, space)
    for config in drive(searcher, warmup):
        check_config(space, config)
    # a batch asked before any result: no duplicates
    pending = [searcher.suggest(f"b{i}") for i in range(batch)]
    assert all(isinstance(c, dict) for c in pending), pending
    for suggested in pending:
        assert isinstance(suggested, dict)
        check_config(space, suggested)
    keys = [_key(c) for c in pending if isinstance(c, dict)]
    assert len(set(keys)) == len(keys), f"duplicate suggestions in a batch: {keys}"
    for i in range(batch):
        searcher.on_trial_complete(f"b{i}", None, error=True)
    # state round trip: the same next suggestions
    state = json.loads(json.dumps(searcher.get_state()))
    copy = make(factory, space)
    copy.set_state(state)
    with tempfile.TemporaryDirectory() as folder:
        searcher.save(os.path.join(folder, "state.pkl"))
        from_file = make(factory, space)
        from_file.restore(os.path.join(folder, "state.pkl"))
        searcher.save_to_dir(folder)
        from_dir = make(factory, space)
        from_dir.restore_from_dir(folder)
    ahead = drive(searcher, 4, start=100)
    for restored in (copy, from_file, from_dir):
        again = drive(restored, 4, start=100)
        assert [_key(c) for c in ahead] == [_key(c) for c in again], (ahead, again)
    check_standalone(factory, with_space)


PLAIN_SPACE: dict[str, Any] = {k: v for k, v in MIXED_SPACE.items() if k != "double_lr"}


def check_standalone(
    factory: Callable[[], Searcher],
    with_space: Callable[[dict[str, Any]], Searcher] | None = None,
    *,
    space: dict[str, Any] | None = None,
) -> None:
    """Ray's contract for a searcher used on its own (no Tuner); `space` holds no
    sample_from (a saved file carries the space as data)."""
    space = space or PLAIN_SPACE
    searcher = make(factory, space)
    if isinstance(searcher, BasicVariantGenerator):
        return  # Ray's is a search algorithm, not a Searcher: it has none of this
    one = searcher.metric is not None  # None: several objectives, kept by the searcher
    assert not one or (searcher.metric, searcher.mode) == ("loss", "min")
    assert searcher.set_search_properties("loss", "min", space) is False  # already set
    assert Searcher.FINISHED == type(searcher).FINISHED == "FINISHED"
    drive(searcher, 3)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "searcher.json")
        searcher.save(path)
        bare = factory()  # no space given: the file's is taken
        bare.restore(path)
        assert (bare.metric, bare.mode) == (searcher.metric, searcher.mode)
        assert drive(bare, 3, start=50) == drive(searcher, 3, start=50)
    if with_space is None:
        return
    own = with_space(space)
    assert own.metric == "loss" and own.mode == "min"
    first = own.suggest("own0")  # no set_search_properties needed
    assert isinstance(first, dict)
    check_config(space, first)
    own.on_trial_complete("own0", result={"loss": objective(first)}, error=False)
    assert own.set_search_properties("loss", "min", {"z": tune.uniform(0, 1)}) is False
    drive(own, 3, start=1)
    with tempfile.TemporaryDirectory() as folder:
        own.save_to_dir(folder)
        again = with_space(space)
        again.restore_from_dir(folder)
        assert drive(again, 3, start=60) == drive(own, 3, start=60)


# -- end to end: a smooth bowl tuned through a real Tuner ---------------------------------------

BOWL_SPACE: dict[str, Any] = {"x": tune.uniform(-2, 2), "lr": tune.loguniform(1e-5, 1e-1)}


def bowl(config: dict[str, Any]) -> None:
    """Minimum 0 at x=0.7, lr=1e-2."""
    tune.report({"loss": (config["x"] - 0.7) ** 2 + (math.log10(config["lr"]) + 2) ** 2})


def bowl_losses(search: Searcher, num_samples: int, storage: str) -> list[float]:
    """Tune `bowl` with `search` on the local backend; every trial's loss, in trial order.

    One trial at a time: each suggestion then sees every earlier result, whatever the
    machine's load, so a seeded searcher gives the same losses on every run."""
    grid = tune.Tuner(
        bowl,
        param_space=BOWL_SPACE,
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            search_alg=search,
            num_samples=num_samples,
            max_concurrent_trials=1,
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(grid) == num_samples and grid.num_errors == 0
    return [metrics_of(r)["loss"] for r in sorted(grid, key=lambda r: metrics_of(r)["trial_id"])]
