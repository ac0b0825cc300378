"""Reading big experiments: downsampled curves, a paged trials table, a capped report.

The experiment (300 trials x 300 results) is written straight through `ExperimentStore`,
as a run would leave it; a real `DashboardServer` answers real HTTP requests.
"""

from __future__ import annotations

import json
import math
import random
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunefleet.dashboard import DashboardServer, write_report
from tunefleet.dashboard._curves import downsample
from tunefleet.dashboard._report import REPORT_POINTS
from tunefleet.store import ExperimentStore, StoreReader
from tunefleet.trial import Trial, TrialStatus

TRIALS, RESULTS = 300, 300


def write_experiment(path: Path, trials: int, results: int) -> dict[str, list[float]]:
    """A finished experiment; returns each trial's losses."""
    rng = random.Random(7)
    store = ExperimentStore(path)
    store.write_meta({"name": path.name, "metric": "loss", "mode": "min", "status": "finished"})
    losses: dict[str, list[float]] = {}
    for i in range(trials):
        trial = Trial(
            trial_id=f"t{i:04d}",
            index=i,
            name=f"t{i:04d}",
            config={"lr": rng.uniform(0, 1), "opt": {"name": "sgd"}},
            resources={"cpu": 1.0},
            path=str(path / "trials" / f"t{i:04d}"),
        )
        store.add_trial(trial)
        result: dict[str, Any] = {}
        for it in range(1, results + 1):
            loss = rng.uniform(0.1, 2.0)
            losses.setdefault(trial.trial_id, []).append(loss)
            result = {"loss": loss, "val": {"acc": 1 - loss / 2}, "training_iteration": it}
            store.add_result(trial.trial_id, result)
        trial.status = TrialStatus.TERMINATED
        trial.num_results, trial.last_result = results, result
        store.update_trial(trial)
    store.close()
    return losses


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[float]]]:
    root = tmp_path_factory.mktemp("storage")
    return root, write_experiment(root / "big", TRIALS, RESULTS)


@pytest.fixture(scope="module")
def server(big: tuple[Path, dict[str, list[float]]]) -> Iterator[DashboardServer]:
    srv = DashboardServer(big[0])
    srv.start_background()
    yield srv
    srv.shutdown()
    srv.server_close()


def get(srv: DashboardServer, path: str) -> Any:
    with urllib.request.urlopen(srv.url.rstrip("/") + path) as answer:
        return json.loads(answer.read())


curves = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=0, max_size=3000
)


@settings(max_examples=60, deadline=None)
@given(ys=curves, cap=st.integers(min_value=4, max_value=600))
def test_downsample_keeps_the_ends_and_the_extremes_within_the_cap(
    ys: list[float], cap: int
) -> None:
    points = [[float(i + 1), y] for i, y in enumerate(ys)]
    kept = downsample(points, cap)
    assert len(kept) <= cap
    assert len(kept) == min(len(points), cap) or len(points) > cap
    if not points:
        assert kept == []
        return
    assert kept[0] == points[0] and kept[-1] == points[-1]
    assert min(y for _, y in kept) == min(ys) and max(y for _, y in kept) == max(ys)
    xs = [x for x, _ in kept]
    assert xs == sorted(set(xs))  # a subsequence, in order
    assert all(p in points for p in kept[:50])


@pytest.mark.parametrize("cap", [3, 0, -1, 2.5, True])
def test_downsample_refuses_a_cap_below_four(cap: Any) -> None:
    with pytest.raises(ValueError, match=re.escape(f"points={cap!r}") + ".*>= 4"):
        downsample([[1.0, 1.0]] * 10, cap)


def test_pages_cover_every_trial_once_sorted_by_the_metric(
    server: DashboardServer, big: tuple[Path, dict[str, list[float]]]
) -> None:
    first = get(server, "/api/experiments/big")  # default: 200 rows, best (lowest) last loss first
    assert len(first["trials"]) == 200 and first["page"]["total"] == TRIALS
    assert first["page"]["sort"] == "last:loss" and first["page"]["descending"] is False
    seen: list[dict[str, Any]] = []
    offset = 0
    while offset < TRIALS:
        page = get(server, f"/api/experiments/big?offset={offset}&limit=37")
        assert page["page"]["matching"] == TRIALS
        seen += page["trials"]
        offset += 37
    assert sorted(t["trial_id"] for t in seen) == sorted(big[1])  # each trial exactly once
    last = [t["metrics"]["loss"] for t in seen]
    assert last == sorted(last)
    assert [t["trial_id"] for t in first["trials"]] == [t["trial_id"] for t in seen[:200]]
    # each row's best is the minimum over all its results, read from the store
    for row in seen:
        assert row["best"]["loss"] == min(big[1][row["trial_id"]])
    down = get(server, "/api/experiments/big?sort=best:loss&descending=1&limit=500")
    bests = [t["best"]["loss"] for t in down["trials"]]
    assert len(bests) == TRIALS and bests == sorted(bests, reverse=True)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("offset=-1", "offset=-1"),
        ("limit=0", "limit=0"),
        ("offset=x", "?offset='x'"),
        ("sort=colour", "sort='colour'"),
        ("state=DONE", "state='DONE'"),
    ],
)
def test_a_bad_page_request_is_answered_400_naming_it(
    server: DashboardServer, query: str, named: str
) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        get(server, "/api/experiments/big?" + query)
    assert caught.value.code == 400
    assert named in json.loads(caught.value.read())["error"]


def test_curves_are_capped_and_keep_each_trials_best(
    server: DashboardServer, big: tuple[Path, dict[str, list[float]]]
) -> None:
    ids = ["t0000", "t0150", "t0299"]
    data = get(server, f"/api/experiments/big/curves?metric=loss&trials={','.join(ids)}&points=50")
    for tid in ids:
        points = data["curves"][tid]
        assert 4 <= len(points) <= 50
        assert min(y for _, y in points) == min(big[1][tid])
        assert points[0] == [1, big[1][tid][0]] and points[-1] == [RESULTS, big[1][tid][-1]]
    nested = get(server, "/api/experiments/big/curves?metric=val/acc&trials=t0001")
    assert len(nested["curves"]["t0001"]) == RESULTS  # under the default cap: all of them


def test_the_report_holds_every_trial_and_capped_curves(
    big: tuple[Path, dict[str, list[float]]], tmp_path: Path
) -> None:
    out = write_report(big[0] / "big", tmp_path / "report.html")
    html = out.read_text(encoding="utf-8")
    embedded = re.search(
        r'<script id="tunefleet-data" type="application/json">(.*?)</script>', html
    )
    assert embedded is not None
    data = json.loads(embedded.group(1))
    rows = data["experiment"]["trials"]
    assert sorted(t["trial_id"] for t in rows) == sorted(big[1])
    assert [t["index"] for t in rows] == list(range(TRIALS))
    loss = data["curves"]["loss"]
    assert sorted(loss) == sorted(big[1])
    for tid, points in loss.items():
        assert len(points) <= REPORT_POINTS < RESULTS
        assert min(y for _, y in points) == min(big[1][tid])
        assert max(y for _, y in points) == max(big[1][tid])
        assert math.isfinite(points[-1][1])


def test_result_values_reads_nested_keys_and_results_holding_nan(tmp_path: Path) -> None:
    store = ExperimentStore(tmp_path / "exp")
    trial = Trial(trial_id="a", index=0, name="a", config={}, resources={}, path=str(tmp_path))
    store.add_trial(trial)
    store.add_result("a", {"loss": 1, "v": {"x": 2.5}, "ok": True, "training_iteration": 1})
    store.add_result("a", {"loss": math.nan, "v": {"x": 3}, "ok": False, "training_iteration": 2})
    store.add_result("a", {"loss": 0.5, "v/x": 4, "ok": "yes", "training_iteration": 3})
    store.add_result("a", {"loss": None, "v": [1], 'q"k': 7, "training_iteration": 4})
    store.close()
    with StoreReader(tmp_path / "exp") as reader:
        rows = list(reader.result_values(["loss", "v/x", "ok", "training_iteration"]))
        quoted = [v for _, v in reader.result_values(["loss", 'q"k'], ["a", "b"])]
        ranges = reader.result_ranges(["loss", "v/x", "ok"])
        assert reader.result_ranges(['q"k']) is None  # not for SQL: read with result_values
    assert [r[0] for r in rows] == ["a"] * 4
    assert rows[0][1] == [1, 2.5, "true", 1]
    assert rows[1][1][1:] == [3, "false", 2] and math.isnan(rows[1][1][0])
    assert rows[2][1] == [0.5, 4, '"yes"', 3]
    assert rows[3][1] == [None, None, None, 4]
    assert quoted[0] == [1, None] and quoted[2] == [0.5, None] and quoted[3] == [None, 7]
    # the result holding NaN is left to Python; over the others: 0.5-1, 2.5-4, no number
    assert ranges == {"a": (1, [(0.5, 1), (2.5, 4), (None, None)])}
