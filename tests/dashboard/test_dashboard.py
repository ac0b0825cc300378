"""The web dashboard and the static report, on experiments made by really running Tuners.

A real server (threads on loopback, or the `tunefleet dashboard` process) answers real
HTTP requests; what it says is checked against `StoreReader`.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import tunefleet as tune
from tests.helpers.processes import default_sigint, meet, meeting
from tunefleet.cli import main
from tunefleet.dashboard import DashboardServer, write_report
from tunefleet.dashboard._json import to_json
from tunefleet.dashboard._report import report_data
from tunefleet.schedulers import ASHAScheduler, PopulationBasedTraining, pbt_schedule
from tunefleet.schedulers._asha_state import asha_view
from tunefleet.store import ExperimentStore, StoreReader
from tunefleet.trial import Trial, TrialStatus

PACKAGE_ROOT = str(Path(tune.__file__).resolve().parent.parent)
SECRET = "sk-DASHBOARD-CANARY-42"
HTML = "<img src=x onerror=alert(1)>"


# -- trainables (imported by the worker processes from this module) ------------------------------
def quadratic(config: dict[str, Any]) -> None:
    """Loss falls with the iteration; large x fails at once (a failure with a traceback)."""
    if config["x"] > 0.8:
        raise ValueError(f"x={config['x']:.3f} is too large")
    for i in range(1, 10):
        tune.report({"loss": (config["x"] - 0.3) ** 2 + 1.0 / i, "acc": 1.0 - config["x"]})


def learning_rate_target(config: dict[str, Any]) -> None:
    """PBT: the score grows fastest with lr near 0.01; resumes from its checkpoint."""
    score, start = 0.0, 0
    if (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            score, start = json.loads(Path(d, "s.json").read_text())
    for it in range(start + 1, 13):
        score += 1.0 - abs(math.log10(config["lr"]) + 2.0)
        with tempfile.TemporaryDirectory() as d:
            Path(d, "s.json").write_text(json.dumps([score, it]))
            tune.report({"score": score}, checkpoint=tune.Checkpoint.from_directory(d))
        if it == 1 and start == 0:
            meet(config, config["lr"])  # the whole population known at the first exploit


def until_released(config: dict[str, Any]) -> None:
    """Reports every 50 ms until the file `release` exists (at most 30 s): a live experiment."""
    for i in range(1, 600):
        tune.report({"score": config["x"] * i})
        if os.path.exists(config["release"]):
            return
        time.sleep(0.05)


def run_experiments(root: Path) -> None:
    meet_in = root.parent / "pbt-population"
    meet_in.mkdir(parents=True)
    """An ASHA run with failures and a secret in its config, and a PBT run with exploits."""
    tune.Tuner(
        quadratic,
        param_space={
            "x": tune.grid_search([0.05, 0.2, 0.3, 0.45, 0.6, 0.7, 0.9, 0.95]),
            "opt": tune.choice(["sgd", "adam"]),
            "api_key": SECRET,
            "note": HTML,  # shown as text, never as markup
        },
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            scheduler=ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3),
        ),
        run_config=tune.RunConfig(storage_path=str(root), name="asha", verbose=0),
    ).fit()
    tune.Tuner(
        tune.with_resources(learning_rate_target, {"cpu": 0.5}),  # all four at once
        param_space={"lr": tune.grid_search([1.0, 0.1, 0.01, 0.0001]), **meeting(meet_in, 4)},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=PopulationBasedTraining(
                time_attr="training_iteration",
                perturbation_interval=3,
                hyperparam_mutations={"lr": tune.loguniform(1e-4, 1.0)},
                seed=0,
            ),
        ),
        run_config=tune.RunConfig(storage_path=str(root), name="pbt", verbose=0),
    ).fit()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dashboard") / "storage"
    run_experiments(path)
    return path


@pytest.fixture
def server(root: Path) -> Iterator[DashboardServer]:
    srv = DashboardServer(root, port=0)
    thread = srv.start_background()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def request(
    srv: DashboardServer | str,
    path: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    url = srv.url if isinstance(srv, DashboardServer) else srv
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def get_json(srv: DashboardServer, path: str) -> Any:
    status, headers, body = request(srv, path)
    assert status == 200, (path, body)
    assert headers["content-type"] == "application/json"
    return json.loads(body, parse_constant=_no_constants)  # strict: no NaN or Infinity


def _no_constants(name: str) -> Any:
    raise AssertionError(f"the JSON holds {name}, which browsers cannot parse")


# -- the JSON API against the store ---------------------------------------------------------------
def test_experiments_list_matches_the_store(server: DashboardServer, root: Path) -> None:
    rows = {e["name"]: e for e in get_json(server, "/api/experiments")["experiments"]}
    assert sorted(rows) == ["asha", "pbt"]
    for name, row in rows.items():
        with StoreReader(root / name) as reader:
            meta, trials, updated = reader.meta(), reader.trials(), reader.last_update()
        assert row["status"] == meta["status"] == "finished"
        assert row["trials"] == len(trials)
        for state in TrialStatus:
            assert row["counts"][state.value] == sum(t.status is state for t in trials)
        assert row["last_update"] == updated
        assert row["best"]["trial_id"] == tune.ResultGrid(root / name).get_best_result().trial_id
    assert rows["asha"]["counts"]["ERROR"] == 2


def test_experiment_view_matches_the_store_and_hides_secrets(
    server: DashboardServer, root: Path
) -> None:
    status, _, raw = request(server, "/api/experiments/asha?sort=index")
    assert status == 200 and SECRET.encode() not in raw
    view = json.loads(raw)
    with StoreReader(root / "asha") as reader:
        trials = reader.trials()
        history = reader.all_results()
    assert [t["trial_id"] for t in view["trials"]] == [t.trial_id for t in trials]
    for row, trial in zip(view["trials"], trials, strict=True):
        assert (row["status"], row["iteration"]) == (trial.status.value, trial.iteration)
        assert row["config"]["x"] == trial.config["x"]
        assert row["config"]["api_key"] == "***"
        losses = [r["loss"] for r in history[trial.trial_id]]
        assert row["best"]["loss"] == (min(losses) if losses else None)
    failed = [t for t in trials if t.status is TrialStatus.ERROR]
    assert {f["trial_id"] for f in view["failures"]} == {t.trial_id for t in failed}
    for failure in view["failures"]:
        assert failure["final"] and failure["kind"] == "EXCEPTION"
        assert "is too large" in failure["cause"]
        assert "Traceback" in failure["traceback"] and "quadratic" in failure["traceback"]
    assert set(view["params"]) == {"x", "opt", "api_key", "note"}
    assert "acc" in view["metric_keys"] and "time_total_s" not in view["metric_keys"]


def test_curves_are_the_results_of_the_selected_trials(server: DashboardServer, root: Path) -> None:
    with StoreReader(root / "asha") as reader:
        ids = reader.trial_ids()[:3]
        expected = {
            tid: [[r["training_iteration"], r["loss"]] for r in reader.results(tid)] for tid in ids
        }
    data = get_json(server, f"/api/experiments/asha/curves?metric=loss&trials={','.join(ids)}")
    assert data["curves"] == expected and data["unknown"] == []
    unknown = get_json(server, "/api/experiments/asha/curves?metric=loss&trials=nope")
    assert unknown["curves"] == {} and unknown["unknown"] == ["nope"]


def test_asha_view_shows_rungs_promotions_and_stops(server: DashboardServer, root: Path) -> None:
    view = get_json(server, "/api/experiments/asha")
    sched = view["scheduler"]
    assert sched["kind"] == "asha" and not sched["promotion"]
    with StoreReader(root / "asha") as reader:
        state = reader.state("scheduler")
        trials = {t.trial_id: t for t in reader.trials()}
    assert state is not None
    rungs = sched["brackets"][0]["rungs"]
    assert [sorted(e["trial_id"] for e in r["entries"]) for r in rungs] == [
        sorted(r) for r in asha_view(state)["rungs"][0]
    ]
    assert [r["at"] for r in rungs] == [1, 3, 9]  # grace 1, eta 3, max_t 9
    assert all(r["exact"] for r in rungs) and sched["time_attr"] == "training_iteration"
    for k, rung in enumerate(rungs):
        values = [e["value"] for e in rung["entries"]]
        assert values == sorted(values)  # best (lowest loss) first
        for entry in rung["entries"]:
            trial = trials[entry["trial_id"]]
            if entry["outcome"] == "promoted":
                assert entry["trial_id"] in {e["trial_id"] for e in rungs[k + 1]["entries"]}
            elif entry["outcome"] == "stopped":
                rung = f"rung {k + 1} of {len(rungs)}"
                assert trial.stop_reason == f"scheduler (AsyncHyperBandScheduler: {rung})"
                assert trial.iteration < 9
            else:
                assert entry["outcome"] == "done" and trial.iteration == 9
    assert sum(r["stopped"] for r in rungs) >= 1 and rungs[0]["promoted"] >= 1


def test_an_older_asha_state_without_milestones_gets_estimates() -> None:
    from tunefleet.dashboard._scheduler import scheduler_view

    history = {"a": [{"training_iteration": i, "loss": 1.0 / i} for i in (1, 2, 3, 4)]}
    state = {
        "metric": "loss",
        "mode": "min",
        "rungs": [[{"a": -1.0}, {"a": -0.25}]],
        "promoted": [[[], []]],
        "bracket": {},
    }
    view = scheduler_view({"scheduler": "AsyncHyperBandScheduler"}, state, [], history, [])
    rungs = view["brackets"][0]["rungs"]
    assert [(r["at"], r["exact"]) for r in rungs] == [(1, False), (4, False)]


def test_pbt_view_shows_the_lineage(server: DashboardServer, root: Path) -> None:
    view = get_json(server, "/api/experiments/pbt")
    sched = view["scheduler"]
    with StoreReader(root / "pbt") as reader:
        events = reader.events(kinds="exploit")
    assert sched["kind"] == "pbt" and events
    assert [(e["trial_id"], e["source"]) for e in sched["exploits"]] == [
        (e["trial_id"], e["data"]["source"]) for e in events
    ]
    for shown, event in zip(sched["exploits"], events, strict=True):
        old, new = event["data"]["old_config"]["lr"], event["data"]["new_config"]["lr"]
        assert shown["changes"] == ({"lr": [old, new]} if old != new else {})
    assert sched["mutated"] == ["lr"]
    for lane in sched["lanes"]:
        mine = [e for e in events if e["trial_id"] == lane["trial_id"]]
        assert len(lane["segments"]) == len(mine) + 1
    best = view["best"]["trial_id"]
    lineage = pbt_schedule(root / "pbt", best)
    assert [(s["trial_id"], s["from_iteration"], s["to_iteration"]) for s in lineage] == [
        (s["trial_id"], s["from_iteration"], s["to_iteration"]) for s in sched["best_lineage"]
    ]


def test_poll_is_cheap_and_current(server: DashboardServer, root: Path) -> None:
    data = get_json(server, "/api/experiments/pbt/poll")
    with StoreReader(root / "pbt") as reader:
        assert data == {"last_update": reader.last_update(), "status": "finished"}


def test_non_finite_metrics_become_strings(tmp_path: Path) -> None:
    exp = tmp_path / "storage" / "nan"
    with ExperimentStore(exp) as store:
        store.write_meta({"name": "nan", "metric": "loss", "mode": "min", "status": "finished"})
        trial = Trial("t0", 0, "t0", {"lr": 0.1}, {"cpu": 1.0}, str(exp / "trials" / "t0"))
        store.add_trial(trial)
        for it, loss in enumerate([1.0, float("nan"), float("inf")], start=1):
            trial.last_result = {"training_iteration": it, "loss": loss}
            store.add_result("t0", trial.last_result)
        trial.status = TrialStatus.TERMINATED
        store.update_trial(trial)
    srv = DashboardServer(exp.parent, port=0)
    thread = srv.start_background()
    try:
        view = get_json(srv, "/api/experiments/nan")
        assert view["trials"][0]["metrics"]["loss"] == "Infinity"
        assert view["trials"][0]["best"]["loss"] == 1.0 and view["best"] is None
        curve = get_json(srv, "/api/experiments/nan/curves?metric=loss&trials=t0")
        assert curve["curves"]["t0"] == [[1, 1.0]]  # non-finite points are left out
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)
    assert to_json({"a": "</script><!--"}) == '{"a":"\\u003c/script\\u003e\\u003c!--"}'


# -- the security rules ----------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"])
def test_only_get_and_head_exist(server: DashboardServer, root: Path, method: str) -> None:
    before = (root / "asha" / "experiment.db").stat().st_mtime_ns
    status, headers, body = request(server, "/api/experiments/asha", method=method)
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert b"read-only" in body
    assert (root / "asha" / "experiment.db").stat().st_mtime_ns == before
    status, headers, body = request(server, "/api/experiments", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0


@pytest.mark.parametrize(
    "path",
    [
        "/api/experiments/..",
        "/api/experiments/%2e%2e",
        "/api/experiments/..%2f..%2fetc",
        "/api/experiments/asha%2f..%2f..",
        "/api/experiments/%2fetc%2fpasswd",
        "/api/experiments/asha/../../x",
        "/static/..%2f_server.py",
        "/static/../../_data.py",
        "/static/%2e%2e/__init__.py",
        "/etc/passwd",
    ],
)
def test_paths_outside_the_storage_root_are_refused(server: DashboardServer, path: str) -> None:
    status, _, body = request(server, path)
    assert status == 404, body
    assert b"import" not in body and b"root:" not in body


def test_dns_rebinding_host_is_refused(server: DashboardServer) -> None:
    status, _, body = request(server, "/api/experiments", headers={"Host": "evil.example:80"})
    assert status == 403 and b"evil.example" in body
    for host in ("localhost", f"127.0.0.1:{server.server_address[1]}", "[::1]:80"):
        assert request(server, "/api/experiments", headers={"Host": host})[0] == 200


def test_a_token_guards_every_request(root: Path) -> None:
    token = "s3cret-token-for-tests"
    srv = DashboardServer(root, port=0, token=token)
    thread = srv.start_background()
    try:
        assert srv.url.endswith(f"?token={token}")
        for path in ("/", "/static/app.js", "/api/experiments", "/api/experiments/asha"):
            assert request(srv, path)[0] == 401
        assert request(srv, "/api/experiments?token=wrong-token")[0] == 401
        assert request(srv, f"/api/experiments?token={token}")[0] == 200
        bearer = {"Authorization": f"Bearer {token}"}
        assert request(srv, "/api/experiments", headers=bearer)[0] == 200
        assert request(srv, "/api/experiments", headers={"X-Tunefleet-Token": token})[0] == 200
        status, headers, _ = request(srv, f"/?token={token}")
        assert status == 303 and headers["location"] == "/"
        cookie = headers["set-cookie"].split(";")[0]
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
        assert request(srv, "/api/experiments", headers={"Cookie": cookie})[0] == 200
        assert request(srv, "/api/experiments", headers={"Cookie": "x=1"})[0] == 401
        # the token, not the Host header, is the guard when one is set
        host = {"Host": "dashboard.example", **bearer}
        assert request(srv, "/api/experiments", headers=host)[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def test_a_non_loopback_address_needs_a_token(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match=r"--host '0.0.0.0' is not a loopback address.*token"):
        DashboardServer(root, host="0.0.0.0", port=0)
    assert main(["dashboard", str(root), "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--host '0.0.0.0' is not a loopback address" in err and "--token" in err
    with pytest.raises(ValueError, match=r"--token is 3 characters long; a token must have"):
        DashboardServer(root, host="0.0.0.0", port=0, token="abc")
    assert main(["dashboard", str(root), "--port", "70000"]) == 2
    assert "--port 70000: must be between 0 and 65535" in capsys.readouterr().err
    assert main(["dashboard", str(root / "missing"), "--port", "0"]) == 2
    assert "no such directory" in capsys.readouterr().err
    srv = DashboardServer(root, host="0.0.0.0", port=0, token="a-long-enough-token")
    thread = srv.start_background()
    try:
        auth = {"Authorization": "Bearer a-long-enough-token"}
        assert request(srv, "/api/experiments", headers=auth)[0] == 200
        assert request(srv, "/api/experiments")[0] == 401
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


# -- the command -------------------------------------------------------------------------------
def test_dashboard_command_serves_until_interrupted(root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}
    for target, names in ((root, ["asha", "pbt"]), (root / "pbt", ["pbt"])):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tunefleet", "dashboard", str(target), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=default_sigint,  # it is stopped with SIGINT below
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
            assert found, (line, proc.stderr.read() if proc.stderr else "")
            status, _, body = request(found.group(1), "/api/experiments")
            assert status == 200
            assert [e["name"] for e in json.loads(body)["experiments"]] == names
            assert request(found.group(1), "/")[0] == 200
            if target != root:  # serving one experiment: the others do not exist for it
                assert request(found.group(1), "/api/experiments/asha")[0] == 404
            proc.send_signal(signal.SIGINT)
            # communicate: drains both pipes, so a chatty server cannot block on a full one
            _, err = proc.communicate(timeout=120)  # a safety net; the exit is the event
            assert proc.returncode == 0, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# -- the static report ----------------------------------------------------------------------------
def test_report_is_one_self_contained_file(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    assert main(["report", "asha", "--storage", str(root), "--out", str(out)]) == 0
    assert f"Wrote {out}" in capsys.readouterr().out
    html = out.read_text()
    assert SECRET not in html and HTML not in html  # the data's "<" is escaped in the page
    assert not re.search(r"""(src|href)=["']?(https?:|//|/static)""", html)  # nothing fetched
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "window.TFPlots" in html and "function renderScheduler" in html  # JS inlined
    assert "--accent" in html  # CSS inlined
    data_text = re.search(
        r'<script id="tunefleet-data" type="application/json">(.*?)</script>', html, re.S
    )
    assert data_text is not None
    data = json.loads(data_text.group(1))
    expected = json.loads(to_json(report_data(root / "asha")))
    expected["generated_at"] = data["generated_at"]
    assert data == expected
    with StoreReader(root / "asha") as reader:
        results = reader.all_results()
    assert data["curves"]["loss"] == {
        tid: [[r["training_iteration"], r["loss"]] for r in rs] for tid, rs in results.items()
    }
    assert set(data["curves"]) == {"loss", "acc"}
    with pytest.raises(FileNotFoundError, match=r"No experiment 'nope'"):
        write_report("nope", tmp_path / "x.html", storage=str(root))
    assert main(["report", "asha", "--storage", str(root), "--out", "/no/dir/r.html"]) == 2
    assert "/no/dir does not exist" in capsys.readouterr().err
