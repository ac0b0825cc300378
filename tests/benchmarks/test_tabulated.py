"""The tabulated real learning curves of ``benchmarks/``: the lookup and a tiny benchmark run."""

from __future__ import annotations

import importlib
import random
import sys
from types import ModuleType

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
