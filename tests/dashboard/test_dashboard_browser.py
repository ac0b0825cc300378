"""The dashboard in a real headless browser (Debian's chromium, driven by Selenium).

Pages load, tables match the store, plots render as SVG, a live update arrives while
an experiment runs in another process, and the static report renders from file://.
A screenshot of each page is saved in pytest's tmp dir and, when set, in
``$TUNEFLEET_TEST_ARTIFACTS``. Without /usr/bin/chromium the tests skip, unless
``TUNEFLEET_REQUIRE_BROWSER=1``, where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.dashboard.test_dashboard import HTML
from tests.helpers.paths import REPO, SRC
from tunefleet.dashboard import DashboardServer, write_report
from tunefleet.schedulers._asha_state import asha_view
from tunefleet.store import StoreReader

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,2200",
]


def _missing() -> str | None:
    if not os.path.exists(CHROMIUM) or not os.path.exists(CHROMEDRIVER):
        return f"no browser: {CHROMIUM} or {CHROMEDRIVER} is missing"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extra)"
    return None


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Any]:
    why = _missing()
    if why is not None:
        if os.environ.get("TUNEFLEET_REQUIRE_BROWSER") == "1":
            pytest.fail(f"TUNEFLEET_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(30)
    service = psutil.Process(browser.service.process.pid)
    spawned = [service, *service.children(recursive=True)]
    try:
        yield browser
    finally:
        browser.quit()
        _, alive = psutil.wait_procs(spawned, timeout=15)
        for proc in alive:  # the browser did not exit by itself: end it
            proc.kill()
        psutil.wait_procs(alive, timeout=5)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.dashboard.test_dashboard import run_experiments

    root = tmp_path_factory.mktemp("browser") / "storage"
    run_experiments(root)
    return root


@pytest.fixture
def server(finished: Path) -> Iterator[DashboardServer]:
    srv = DashboardServer(finished, port=0)
    thread = srv.start_background()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def wait_for(browser: Any, what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Wait until `check()` is truthy. The page re-renders as data arrives, so an element
    found a moment ago may be gone (stale) or not drawn yet (an empty list): both mean
    "not yet", and the check runs again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    not_yet = (StaleElementReferenceException, IndexError, ValueError)
    try:
        return WebDriverWait(
            browser, timeout, poll_frequency=0.1, ignored_exceptions=not_yet
        ).until(lambda _: check())
    except Exception as exc:
        logs = browser.get_log("browser")
        raise AssertionError(f"timed out waiting for {what}; browser log: {logs}") from exc


def css(browser: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(browser.find_elements(By.CSS_SELECTOR, selector))


def screenshot(browser: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    assert browser.save_screenshot(str(path)), "no screenshot"
    assert path.stat().st_size > 10_000
    if os.environ.get("TUNEFLEET_TEST_ARTIFACTS"):
        keep = Path(os.environ["TUNEFLEET_TEST_ARTIFACTS"])
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, keep / path.name)
    return path


def no_errors(browser: Any) -> None:
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe


def table_rows(browser: Any) -> dict[str, list[str]]:
    """trial id -> its cell texts, as the trials table shows them."""
    rows = {}
    for row in css(browser, "#trials-table tbody tr"):
        cells = [c.text for c in row.find_elements("css selector", "td")]
        rows[row.get_attribute("data-trial-id")] = cells
    return rows


# -- finished experiments ------------------------------------------------------------------------
def test_pages_render_and_match_the_store(
    driver: Any, server: DashboardServer, finished: Path, tmp_path: Path
) -> None:
    driver.get(server.url)
    wait_for(driver, "the experiments list", lambda: len(css(driver, "#experiments-table tr")) == 3)
    names = [r.get_attribute("data-name") for r in css(driver, "#experiments-table tbody tr")]
    assert names == ["asha", "pbt"]
    screenshot(driver, tmp_path, "dashboard_list")

    css(driver, "#experiments-table a")[0].click()
    with StoreReader(finished / "asha") as reader:
        trials = reader.trials()
        state = reader.state("scheduler")
    assert state is not None
    wait_for(driver, "the trials table", lambda: len(table_rows(driver)) == len(trials))
    rows = table_rows(driver)
    for trial in trials:
        cells = rows[trial.trial_id]
        assert cells[3] == trial.status.value and cells[4] == str(trial.iteration)
    assert all("***" in cells for cells in rows.values())  # the redacted api_key column
    assert all(HTML in cells for cells in rows.values())  # markup in a config is text
    assert not css(driver, "#trials-table img")
    wait_for(driver, "the learning curves", lambda: css(driver, "#curves-plot path.series"))
    checked = [b for b in css(driver, "#trials-table tbody input") if b.is_selected()]
    assert len(css(driver, "#curves-plot path.series")) == len(checked) > 0
    assert len(css(driver, "#parcoords-plot path.pc-line")) == sum(
        bool(t.last_result) for t in trials
    )
    entries = sum(len(rung) for rung in asha_view(state)["rungs"][0])
    assert len(css(driver, "#scheduler-body circle.rung-dot")) == entries
    assert len(css(driver, "#failures-body .failure")) == 2
    assert "is too large" in css(driver, "#failures-body .cause")[0].text

    # sorting by a column, then filtering by state and by a metric threshold
    header = next(h for h in css(driver, "#trials-table th") if h.text == "best loss")
    header.click()  # the server sorts: the rows are redrawn when its page arrives

    def sorted_by_best_loss() -> bool:
        shown = [float(r[6]) for r in table_rows(driver).values() if r[6] != "-"]
        return bool(shown) and shown == sorted(shown)

    wait_for(driver, "the rows sorted by best loss", sorted_by_best_loss)
    from selenium.webdriver.support.ui import Select

    Select(css(driver, "#state-filter")[0]).select_by_value("ERROR")
    wait_for(driver, "the state filter", lambda: len(table_rows(driver)) == 2)
    Select(css(driver, "#state-filter")[0]).select_by_value("")
    css(driver, "#threshold-value")[0].send_keys("0.2")
    below = [t for t in trials if t.last_result and t.last_result["loss"] <= 0.2]
    wait_for(driver, "the threshold filter", lambda: len(table_rows(driver)) == len(below))
    assert set(table_rows(driver)) == {t.trial_id for t in below}
    no_errors(driver)
    screenshot(driver, tmp_path, "dashboard_asha")

    driver.get(server.url + "#/exp/pbt")
    wait_for(driver, "the PBT lineage", lambda: css(driver, "#lineage-plot line.segment"))
    with StoreReader(finished / "pbt") as reader:
        exploits = reader.events(kinds="exploit")
    assert len(css(driver, "#exploits-table tbody tr")) == len(exploits)
    assert len(css(driver, "#lineage-plot path.exploit")) == len(exploits)
    assert css(driver, "#schedule-plot path.series")
    no_errors(driver)
    screenshot(driver, tmp_path, "dashboard_pbt")


def test_report_renders_offline_from_a_file(driver: Any, finished: Path, tmp_path: Path) -> None:
    out = write_report(finished / "pbt", tmp_path / "report.html")
    with StoreReader(finished / "pbt") as reader:
        trials = reader.trials()
    driver.get(out.as_uri())
    wait_for(driver, "the report's table", lambda: len(table_rows(driver)) == len(trials))
    wait_for(driver, "the report's curves", lambda: css(driver, "#curves-plot path.series"))
    assert css(driver, "#parcoords-plot path.pc-line")
    assert css(driver, "#lineage-plot line.segment")
    # nothing was fetched: the page and its data are one file
    fetched = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert fetched == []
    no_errors(driver)
    screenshot(driver, tmp_path, "report_pbt")


# -- a running experiment -----------------------------------------------------------------------
LIVE_SCRIPT = """
import sys
import tunefleet as tune
from tests.dashboard.test_dashboard import until_released

tune.Tuner(
    until_released,
    param_space={"x": tune.grid_search([1.0, 2.0]), "release": sys.argv[2]},
    tune_config=tune.TuneConfig(metric="score", mode="max"),
    run_config=tune.RunConfig(storage_path=sys.argv[1], name="live", verbose=0),
).fit()
"""


def test_live_updates_arrive_while_the_experiment_runs(driver: Any, tmp_path: Path) -> None:
    root, release = tmp_path / "storage", tmp_path / "release"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(REPO)])}
    proc = subprocess.Popen([sys.executable, "-c", LIVE_SCRIPT, str(root), str(release)], env=env)
    srv = DashboardServer(root, port=0)
    thread = srv.start_background()
    try:
        deadline = time.monotonic() + 60
        while not _has_results(root / "live"):
            assert proc.poll() is None, "the experiment ended before it reported"
            assert time.monotonic() < deadline, "the experiment never reported"
            time.sleep(0.05)
        driver.get(srv.url + "#/exp/live")
        wait_for(
            driver, "the live indicator", lambda: "live" in css(driver, "#live-status")[0].text
        )
        (first,) = wait_for(  # a tuple: truthy even if the largest iteration were 0
            driver,
            "the table's rows",
            lambda: (max(int(r[4]) for r in table_rows(driver).values()),),
        )
        wait_for(
            driver,
            "a live update",
            lambda: (
                int(driver.execute_script("return document.body.dataset.refreshes")) >= 1
                and max(int(r[4]) for r in table_rows(driver).values()) > first
            ),
        )
        wait_for(driver, "the running state", lambda: "running" in css(driver, "h1")[0].text)
        screenshot(driver, tmp_path, "dashboard_live")
        release.touch()  # the experiment ends now
        assert proc.wait(timeout=60) == 0
        wait_for(driver, "the finished state", lambda: "finished" in css(driver, "h1")[0].text)
        with StoreReader(root / "live") as reader:
            trials = reader.trials()
        wait_for(
            driver,
            "the final rows",
            lambda: (
                {k: r[4] for k, r in table_rows(driver).items()}
                == {t.trial_id: str(t.iteration) for t in trials}
            ),
        )
        wait_for(
            driver,
            "the live indicator off",
            lambda: "live" not in css(driver, "#live-status")[0].text,
        )
        no_errors(driver)
    finally:
        release.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def _has_results(path: Path) -> bool:
    if not (path / "experiment.db").exists():
        return False
    try:
        with StoreReader(path) as reader:
            return any(t.iteration > 0 for t in reader.trials())
    except Exception:  # the writer is still creating the database
        return False
