"""The tabulated real learning curves of ``benchmarks/``: the lookup and a tiny benchmark run."""

from __future__ import annotations

import importlib
import random
import sys
from types import ModuleType

import pytest

from tests.helpers.paths import REPO
from tests.helpers.scripts import run_script

BENCHMARKS = REPO / "benchmarks"


def _tabulated() -> ModuleType:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # the benchmarks import their siblings
    return importlib.import_module("tabulated")


def test_every_table_loads_with_a_curve_per_config() -> None:
    tabulated = _tabulated()
    for task in tabulated.TASKS:
        table = tabulated.table(task)
        assert len(table.rows) >= 1000
        assert table.loss.shape == (len(table.rows), table.max_budget)
        assert (table.step_s > 0).all()


def test_a_tabulated_config_finds_its_own_curve() -> None:
    table = _tabulated().table("gbm")
    for row in (0, 17, len(table.rows) - 1):
        config = dict(table.rows[row])
        assert table.index(config) == row
        curve = [table.loss_at(config, b) for b in range(1, table.max_budget + 1)]
        assert curve == table.loss[row].tolist()


def test_the_nearest_lookup_is_deterministic() -> None:
    tabulated = _tabulated()
    rng = random.Random(3)
    configs = [tabulated.rp.sample(tabulated.SPACES["digits-mlp"], rng) for _ in range(20)]
    first = [tabulated.table("digits-mlp").index(c) for c in configs]
    fresh = tabulated.Table("digits-mlp")  # no cache shared with the first
    assert [fresh.index(c) for c in configs] == first
    # a config close to a row (a tiny nudge of its learning rate) finds that row
    row = dict(fresh.rows[5])
    assert fresh.index({**row, "lr": row["lr"] * 1.0001}) == 5


def test_the_blended_lookup_keeps_rows_and_separates_near_configs() -> None:
    tabulated = _tabulated()
    blended, nearest = tabulated.table("gbm-idw"), tabulated.table("gbm")
    assert blended.neighbours == tabulated.IDW_NEIGHBOURS > 1 and nearest.neighbours == 1
    row = dict(blended.rows[17])
    own = pytest.approx(nearest.loss_at(row, 5), rel=1e-9)
    assert blended.loss_at(row, 5) == own, "a tabulated config finds its own curve"
    # two configs between rows: one row for the nearest lookup, two curves when blended
    a = {**row, "subsample": min(1.0, row["subsample"] + 0.004)}
    b = {**row, "subsample": min(1.0, row["subsample"] + 0.008)}
    assert nearest.loss_at(a, 81) == nearest.loss_at(b, 81)
    assert blended.loss_at(a, 81) != blended.loss_at(b, 81)
    rows, weights = blended.blend(a, tabulated.IDW_NEIGHBOURS)
    assert len(rows) == tabulated.IDW_NEIGHBOURS and abs(weights.sum() - 1) < 1e-9
    low, high = blended.loss[rows, 80].min(), blended.loss[rows, 80].max()
    assert low <= blended.loss_at(a, 81) <= high, "a blend lies between its rows' values"


def test_search_efficiency_runs_a_tabulated_problem_with_confidence_intervals() -> None:
    out = run_script(
        [
            "benchmarks/search_efficiency.py",
            *("--problems", "tab-digits-mlp", "--methods", "asha"),
            *("--seeds", "2", "--full-trials", "3", "--target-quantiles", "5"),
        ],
        cwd=REPO,
        timeout=120,
    ).stdout
    assert "## tab-digits-mlp" in out
    assert "speed-up [95% CI]" in out and "miss" in out
    assert "of 2,500 tabulated configs" in out
    asha = next(line for line in out.splitlines() if "| asha | 2 |" in line)
    assert " [" in asha and "]" in asha  # every ratio and regret with its interval


def test_the_told_variant_hears_an_early_stop_as_a_completion() -> None:
    _tabulated()  # the benchmarks' folder on sys.path
    methods = importlib.import_module("methods")
    # OptunaSearch tells an early stop as pruned, never through on_trial_complete
    plain = methods.SEARCHERS["tpe"](0)
    plain.on_trial_complete = lambda *args, **kwargs: pytest.fail("heard as a completion")
    plain.on_trial_stopped_early("t0", {"loss": 0.5, "training_iteration": 3})
    searcher = methods.SEARCHERS["tpe-told"](0)
    heard: list[tuple[str, object]] = []
    searcher.on_trial_complete = lambda trial_id, result=None, error=False: heard.append(
        (trial_id, result)
    )
    searcher.on_trial_stopped_early("t1", {"loss": 0.5, "training_iteration": 3})
    assert heard == [("t1", {"loss": 0.5, "training_iteration": 3})]
    assert methods.parse_method("hyperopt-told+asha") == ("hyperopt-told", "asha")
