"""Does the driver's bookkeeping stay flat per trial with every search method, to 100,000?

Run it with ``make bench-scale``, ``.venv/bin/python benchmarks/scale_methods.py`` or
``.venv/bin/python benchmarks/scale.py methods ...`` (the same options)::

    scale_methods.py --backend simulated --sizes 1000,10000,100000 \\
        --methods random,tpe,asha,pbt,bohb [--json OUT]
    scale_methods.py --backend local --sizes 1000,10000

Each (backend, method, size) runs in a fresh process (the *driver*: the process that
calls ``fit()``), then the finished experiment is resumed in another fresh process.

Backends: ``simulated`` runs trials on the virtual clock of
`tunefleet.backends.simulated.SimulatedTrainable` (no worker process, so all the time
is the driver's; docs/simulated.md), ``--concurrency`` trials at a time (default 4);
``local`` runs trivial function trials (they only call ``report``) in worker
processes, ``--concurrency`` at a time (default 2). Methods, on one uniform parameter:

``random``  the default searcher (random search), FIFO; ``--reports`` results a trial.
``tpe``     `OptunaSearch` with Optuna's ``TPESampler(seed=0)``, FIFO.
``asha``    random search + `ASHAScheduler` (max_t 9, grace 1, reduction factor 3).
``pbt``     `PopulationBasedTraining`: 64 trials that run ``size / 64`` iterations each,
            perturbation_interval 2 (an exploit or explore every 2 results), a
            checkpoint every 2 results; here a *unit* is a result, not a trial.
``bohb``    `TuneBOHB` + `HyperBandForBOHB` (max_t 9, reduction factor 3).
``tpe-random``, ``bohb-random``: the same searchers with a model that costs nothing
            (`OptunaSearch` with Optuna's ``RandomSampler(seed=0)``; `TuneBOHB` with
            ``random_fraction=1``): their bookkeeping (the searcher's state, its
            observations, Optuna's study) at sizes the model itself cannot reach.

Sampler-bound methods are capped: Optuna's TPE (and BOHB's kernel density fit) cost
O(n) per ``suggest``, so 100,000 trials is hours of the sampler alone, not of
tunefleet. By default ``tpe`` and ``bohb`` skip sizes above 10,000
(``--max-trials-per-method tpe=10000,bohb=10000``; ``none`` lifts every cap).
``--suggest-delay-ms D`` makes each ``suggest`` sleep ``D`` ms more (counted as the
sampler's time, so excluded from ``driver ms/unit``): with a slow model the bookkeeping
per trial should stay what it is with a fast one.

Figures, per (backend, method, size), a *unit* being a trial (a result for pbt):

``driver ms/unit``   wall time of ``fit()`` minus the time the controller spent
                     asking the searcher (``suggest``), per unit. The searcher's own
                     time is measured from outside: the controller's ``ask_searcher``
                     is wrapped (no change to tunefleet).
``cpu ms/unit``      the same with the driver process's CPU time (all its threads),
                     steadier than wall time on a loaded machine.
``suggest ms``       the searcher's time per call of ``suggest`` (wall; the calls
                     include the last one, answered FINISHED).
``tell ms``          tpe, bohb: the searcher's ``on_trial_result`` and
                     ``on_trial_complete`` per trial (wall; wrapped on the instance).
                     Unlike suggest, it stays in ``driver ms/unit``: it holds the
                     searcher's own bookkeeping (its saved history) as well as the
                     model's.
``optuna ms/trial``  tpe only, the reference: Optuna's own in-memory
                     ``study.optimize`` with the same sampler, the same number of
                     trials and a trivial objective, in a fresh process.
``growth``           growth within one run: driver time per result (suggest excluded)
                     over the last ``W`` results divided by the same over the first
                     ``W`` (``W`` = 1,000, or half the size when that is less; results,
                     not trial ends, because HyperBand ends many trials at once). The
                     first window includes starting up (and, local, the first workers).
``peak RSS MB``      the driver's peak resident memory (``ru_maxrss``; workers excluded).
``wbytes/event``     ``write_bytes`` of the driver's ``/proc/self/io`` per event (a
                     trial start, a result or a trial end).
``db bytes/event``   the experiment database (``experiment.db*``) at the end, per event.
``state B/event``    ``ExperimentStore.state_bytes_written`` (state of the searcher,
                     scheduler and stopper committed) per event.
``resume s``         a fresh process: ``Tuner.restore(path, trainable, tune_config=...)
                     .fit()`` on the finished experiment, the same searcher and scheduler
                     passed again (their saved state is loaded into them); nothing runs
                     again (``rerun`` counts the trial steps that did: 0).

*Flat* means: the bookkeeping per unit (``driver ms/unit``, the sampler's suggest time
excluded) at the largest size is within 1.2x of the smallest size's (1,000 to
100,000), for every method. Targets at 100,000 trials: flat, driver peak RSS under
300 MB, resume under 10 s. The summary after the table gives the ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from overhead import RESULT_TAG, emit
from scale import RERUN_ENV, count_results, peak_rss_mb, proc_io, rerun_count, rss_bytes, window_for

METHODS = ("random", "tpe", "asha", "pbt", "bohb", "tpe-random", "bohb-random")
BACKENDS = ("simulated", "local")
DEFAULT_SIZES = {"simulated": "1000,10000,100000", "local": "1000,10000"}
DEFAULT_CAPS = "tpe=10000,bohb=10000"
PBT_POPULATION = 64
PBT_INTERVAL = 2
MAX_T = 9  # asha and bohb: 9 results at most, rungs at 1, 3, 9
FLAT = 1.2
TARGET_RSS_MB = 300.0
TARGET_RESUME_S = 10.0

# --------------------------------------------------------------------------------------
# The trials (module level: the resume, in another process, builds the same ones)
# --------------------------------------------------------------------------------------


def _mark_rerun() -> None:
    rerun = os.environ.get(RERUN_ENV)
    if rerun:
        with open(rerun, "a") as f:
            f.write(f"{os.getpid()}\n")


def blackbox(config: dict[str, Any], budget: int) -> dict[str, float]:
    """The simulated trial: its loss after `budget` steps."""
    _mark_rerun()
    return {"loss": (config["x"] - 0.3) ** 2 + 1.0 / budget}


def trivial(config: dict[str, Any]) -> None:
    """A local trial that does no work: ``config["reports"]`` results."""
    from tunefleet import report

    _mark_rerun()
    x = config["x"]
    for i in range(1, config["reports"] + 1):
        report({"loss": (x - 0.3) ** 2 + 1.0 / i})


def trivial_pbt(config: dict[str, Any]) -> None:
    """A local PBT trial: continues from its checkpoint, one every PBT_INTERVAL results."""
    import tunefleet as tune

    _mark_rerun()
    start = 0
    if (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            start = int(Path(d, "it").read_text())
    for it in range(start + 1, config["reports"] + 1):
        metrics = {"loss": (config["x"] - 0.3) ** 2 + 1.0 / it}
        if it % PBT_INTERVAL == 0:
            with tempfile.TemporaryDirectory() as d:
                Path(d, "it").write_text(str(it))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report(metrics)


def _reports(method: str, trials: int, reports: int) -> int:
    if method == "pbt":
        return max(1, trials // PBT_POPULATION)
    return MAX_T if method in ("asha", "bohb", "bohb-random") else reports


def build(args: argparse.Namespace) -> dict[str, Any]:
    """The trainable, param space, tune config and checkpoint config of a case."""
    import tunefleet as tune

    method, backend = args.method, args.backend
    reports = _reports(method, args.trials, args.reports)
    samples = PBT_POPULATION if method == "pbt" else args.trials
    conc = PBT_POPULATION if method == "pbt" and backend == "simulated" else args.concurrency
    space: dict[str, Any] = {"x": tune.uniform(0.0, 1.0)}
    if backend == "simulated":
        from tunefleet.backends.simulated import SimulatedTrainable

        trainable: Any = SimulatedTrainable(blackbox, cost=1.0, max_budget=reports, workers=conc)
    else:
        space["reports"] = reports
        fn = trivial_pbt if method == "pbt" else trivial
        cpus = os.cpu_count() or 1
        trainable = tune.with_resources(fn, {"cpu": min(1.0, cpus / conc)})
    search_alg: Any = None
    scheduler: Any = None
    if method in ("tpe", "tpe-random"):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        samplers = optuna.samplers
        sampler = samplers.TPESampler(seed=0) if method == "tpe" else samplers.RandomSampler(0)
        search_alg = tune.search.OptunaSearch(sampler=sampler)
    elif method == "asha":
        scheduler = tune.schedulers.ASHAScheduler(max_t=MAX_T, grace_period=1, reduction_factor=3)
    elif method in ("bohb", "bohb-random"):
        bohb = {"random_fraction": 1.0} if method == "bohb-random" else None
        search_alg = tune.search.TuneBOHB(bohb_config=bohb, seed=0)
        scheduler = tune.schedulers.HyperBandForBOHB(max_t=MAX_T, reduction_factor=3)
    elif method == "pbt":
        scheduler = tune.schedulers.PopulationBasedTraining(
            time_attr="training_iteration",
            perturbation_interval=PBT_INTERVAL,
            hyperparam_mutations={"x": tune.uniform(0.0, 1.0)},
            seed=0,
        )
    tune_config = tune.TuneConfig(
        metric="loss",
        mode="min",
        num_samples=samples,
        max_concurrent_trials=conc,
        search_alg=search_alg,
        scheduler=scheduler,
    )
    # the simulated trial checkpoints by the config; the local one reports its own
    every = PBT_INTERVAL if method == "pbt" and backend == "simulated" else 0
    checkpoint = tune.CheckpointConfig(num_to_keep=2, checkpoint_frequency=every)
    return {"trainable": trainable, "space": space, "tune_config": tune_config,
            "checkpoint": checkpoint}  # fmt: skip


# --------------------------------------------------------------------------------------
# The driver's probes: suggest time (from outside), the store, readings per unit
# --------------------------------------------------------------------------------------


class Meter:
    """Cumulative time of the controller's ``ask_searcher`` calls, and the stores made."""

    def __init__(self, suggest_delay_s: float = 0.0) -> None:
        self.suggest_delay_s = suggest_delay_s  # a slower sampler, stood in for by a sleep
        self.suggest_wall = 0.0
        self.suggest_cpu = 0.0
        self.suggests = 0
        self.tell_wall = 0.0
        self.stores: list[Any] = []
        self.by_key: dict[str, int] = {}

    def wrap_tell(self, searcher: Any) -> None:
        """Time `searcher`'s on_trial_result and on_trial_complete (included in driver ms)."""
        meter = self
        for name in ("on_trial_result", "on_trial_complete"):
            method = getattr(searcher, name)

            def timed(*a: Any, _method: Any = method, **kw: Any) -> Any:
                started = time.perf_counter()
                try:
                    return _method(*a, **kw)
                finally:
                    meter.tell_wall += time.perf_counter() - started

            setattr(searcher, name, timed)

    def install(self) -> None:
        """Wrap ``ask_searcher`` where the controller calls it; record each store made."""
        import tunefleet.engine.controller as controller
        import tunefleet.engine.experiment as experiment
        from tunefleet.engine.controller_util import ask_searcher as ask
        from tunefleet.store import ExperimentStore as base

        meter = self

        def timed_ask(searcher: Any, trial_id: str) -> Any:
            w, c = time.perf_counter(), time.process_time()
            try:
                if meter.suggest_delay_s:
                    time.sleep(meter.suggest_delay_s)
                return ask(searcher, trial_id)
            finally:
                meter.suggest_wall += time.perf_counter() - w
                meter.suggest_cpu += time.process_time() - c
                meter.suggests += 1

        # the names the controller and the experiment look up when they run
        controller.__dict__["ask_searcher"] = timed_ask

        class SpyStore(base):
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, **kw)
                meter.stores.append(self)

            def flush(self) -> None:
                meter.count_state(self)
                super().flush()

        experiment.__dict__["ExperimentStore"] = SpyStore

    def count_state(self, store: Any) -> None:
        """Diagnostic, from the store's private buffers (skipped if they change): the
        state bytes about to be written, by key (searcher, scheduler, stopper) and kind
        (the head, rewritten when it changes, or rows appended to its logs)."""
        heads = getattr(store, "_state", None)
        rows = getattr(getattr(store, "_logs", None), "_rows", None)
        if isinstance(heads, dict):
            for key, value in heads.items():
                self.by_key[f"{key} head"] = self.by_key.get(f"{key} head", 0) + len(value[0])
        if isinstance(rows, list):
            for row in rows:
                self.by_key[f"{row[0]} log"] = self.by_key.get(f"{row[0]} log", 0) + len(row[3])

    def state_bytes(self) -> int | None:
        written = [getattr(s, "state_bytes_written", None) for s in self.stores]
        known = [w for w in written if isinstance(w, int)]
        return sum(known) if known else None


class Readings:
    """Readings (time, CPU, suggest time, IO, RSS, events) every `every` results.

    Results flow steadily where trial ends may not (HyperBand ends many at once), so the
    windows of the growth figure count results; `units` counts trials (results for PBT).
    """

    def __init__(self, meter: Meter, every: int, unit_is_result: bool) -> None:
        self.meter, self.every, self.unit_is_result = meter, every, unit_is_result
        self.events = self.units = self.results = 0
        self.rows: list[dict[str, Any]] = []

    def read(self) -> None:
        m = self.meter
        row: dict[str, Any] = {"units": self.units, "results": self.results,
                               "events": self.events, "time": time.perf_counter(),
                               "cpu": time.process_time(), "suggest_wall": m.suggest_wall,
                               "suggest_cpu": m.suggest_cpu, "rss": rss_bytes(),
                               "state_bytes": m.state_bytes()}  # fmt: skip
        row.update(proc_io())
        self.rows.append(row)

    def event(self, *, result: bool = False, end: bool = False) -> None:
        self.events += 1
        if result:
            self.results += 1
            if self.results % self.every == 0:
                self.read()
        if (result and self.unit_is_result) or (end and not self.unit_is_result):
            self.units += 1

    def callback(self, base: type) -> Any:
        readings = self

        class ReadingsCallback(base):  # type: ignore[misc]
            def setup(self, stop: Any = None, num_samples: Any = None, **info: Any) -> None:
                readings.read()

            def on_trial_start(self, iteration: int, trials: Any, trial: Any, **i: Any) -> None:
                readings.event()

            def on_trial_result(
                self, iteration: int, trials: Any, trial: Any, result: Any, **i: Any
            ) -> None:
                readings.event(result=True)

            def on_trial_complete(self, iteration: int, trials: Any, trial: Any, **i: Any) -> None:
                readings.event(end=True)

            def on_trial_error(self, iteration: int, trials: Any, trial: Any, **i: Any) -> None:
                readings.event(end=True)

        return ReadingsCallback()


def window_figures(rows: list[dict[str, Any]], window: int) -> dict[str, Any]:
    """Driver ms per result (suggest excluded) over the first and the last `window` results."""
    marks = [r for r in rows if r["results"] % window == 0]  # the readings, in order
    out: dict[str, Any] = {}
    if len(marks) < 3:  # setup, then at least two windows
        return out
    for name, (ra, rb) in {"first": marks[:2], "last": marks[-2:]}.items():
        results = rb["results"] - ra["results"]
        wall = (rb["time"] - ra["time"]) - (rb["suggest_wall"] - ra["suggest_wall"])
        cpu = (rb["cpu"] - ra["cpu"]) - (rb["suggest_cpu"] - ra["suggest_cpu"])
        out[f"result_ms_{name}"] = wall / results * 1000.0
        out[f"result_cpu_ms_{name}"] = cpu / results * 1000.0
    if out.get("result_ms_first") and "result_ms_last" in out:
        out["growth"] = out["result_ms_last"] / out["result_ms_first"]
    return out


# --------------------------------------------------------------------------------------
# The cases, each in a fresh process (``--child run|resume|optuna``)
# --------------------------------------------------------------------------------------


def _db_bytes(experiment: Path) -> int:
    return sum(p.stat().st_size for p in experiment.glob("experiment.db*") if p.is_file())


def child_run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import tunefleet as tune

    meter = Meter(args.suggest_delay_ms / 1000.0)
    meter.install()
    case = build(args)
    if case["tune_config"].search_alg is not None:
        meter.wrap_tell(case["tune_config"].search_alg)
    window = window_for(args.trials)
    readings = Readings(meter, window, args.method == "pbt")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    results = tune.Tuner(
        case["trainable"],
        param_space=case["space"],
        tune_config=case["tune_config"],
        run_config=tune.RunConfig(
            name="scale",
            storage_path=str(workdir / "storage"),
            verbose=0,
            callbacks=[readings.callback(tune.Callback)],
            checkpoint_config=case["checkpoint"],
        ),
    ).fit()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    experiment = Path(results.experiment_path)
    events = max(readings.events, 1)
    state = meter.state_bytes()
    record: dict[str, Any] = {
        "units": readings.units,
        "unit": "result" if args.method == "pbt" else "trial",
        "events": readings.events,
        "window": window,
        "wall_s": wall,
        "suggest_s": meter.suggest_wall,
        "suggests": meter.suggests,
        "driver_ms": (wall - meter.suggest_wall) / max(readings.units, 1) * 1000.0,
        "cpu_ms": (cpu - meter.suggest_cpu) / max(readings.units, 1) * 1000.0,
        "suggest_ms": meter.suggest_wall / max(meter.suggests, 1) * 1000.0,
        "peak_rss_mb": peak_rss_mb(),
        "rss_mb_end": rss_bytes() / 2**20,
        "db_bytes": _db_bytes(experiment),
        "db_bytes_per_event": _db_bytes(experiment) / events,
        "state_bytes_written": state,
        "state_bytes_per_event": None if state is None else state / events,
        "state_bytes_per_event_by_key": {k: v / events for k, v in meter.by_key.items()},
        "experiment_path": str(experiment),
        "readings": readings.rows,
    }
    readings.read()  # after fit(): the end
    rows = readings.rows
    if rows and "write_bytes" in rows[0] and "write_bytes" in rows[-1]:
        record["write_bytes_per_event"] = (
            rows[-1]["write_bytes"] - rows[0]["write_bytes"]
        ) / events
    record.update(window_figures(rows[:-1], window))
    record.update(count_results(results))
    if case["tune_config"].search_alg is not None:
        trials = record["trials_ok"] + record["trials_error"]
        record["tell_ms"] = meter.tell_wall / max(trials, 1) * 1000.0
    return record


def child_resume(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rerun_file = workdir / "rerun.txt"
    os.environ[RERUN_ENV] = str(rerun_file)
    import tunefleet as tune

    case = build(args)
    t0 = time.perf_counter()
    # a searcher or scheduler object is passed again (the store holds its state only)
    tuner = tune.Tuner.restore(args.experiment, case["trainable"], tune_config=case["tune_config"])
    t1 = time.perf_counter()
    results = tuner.fit()
    t2 = time.perf_counter()
    counts = count_results(results)
    return {"restore_s": t1 - t0, "fit_s": t2 - t1, "resume_s": t2 - t0,
            "resume_peak_rss_mb": peak_rss_mb(), "resume_rerun": rerun_count(rerun_file),
            "resume_trials": counts["trials_ok"] + counts["trials_error"]}  # fmt: skip


def child_optuna(args: argparse.Namespace) -> dict[str, Any]:
    """The reference for tpe (and tpe-random): Optuna's own in-memory study, same sampler,
    same trials."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    samplers = optuna.samplers
    random_ = args.method == "tpe-random"
    study = optuna.create_study(
        sampler=samplers.RandomSampler(0) if random_ else samplers.TPESampler(seed=0)
    )
    t0 = time.perf_counter()
    study.optimize(lambda t: (t.suggest_float("x", 0.0, 1.0) - 0.3) ** 2, n_trials=args.trials)
    wall = time.perf_counter() - t0
    return {"optuna_s": wall, "optuna_ms": wall / args.trials * 1000.0,
            "optuna_peak_rss_mb": peak_rss_mb(), "optuna_version": optuna.__version__}  # fmt: skip


# --------------------------------------------------------------------------------------
# The parent
# --------------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_child(case: str, args: argparse.Namespace, backend: str, method: str, size: int,
              workdir: Path, experiment: str | None = None) -> dict[str, Any]:  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case, "--backend", backend,
           "--methods", method, "--sizes", str(size), "--reports", str(args.reports),
           "--concurrency", str(args.concurrency), "--workdir", str(workdir),
           "--suggest-delay-ms", str(args.suggest_delay_ms)]  # fmt: skip
    if experiment:
        cmd += ["--experiment", experiment]
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=args.timeout, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG) and proc.returncode == 0:
            record: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
            return record
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
    return {"error": f"exit code {proc.returncode}\n{tail}"}


COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("driver ms/unit", "driver_ms", "{:.3f}"),
    ("cpu ms/unit", "cpu_ms", "{:.3f}"),
    ("growth", "growth", "{:.2f}x"),
    ("suggest ms", "suggest_ms", "{:.3f}"),
    ("tell ms", "tell_ms", "{:.3f}"),
    ("optuna ms", "optuna_ms", "{:.3f}"),
    ("peak RSS MB", "peak_rss_mb", "{:.0f}"),
    ("wbytes/event", "write_bytes_per_event", "{:.0f}"),
    ("db B/event", "db_bytes_per_event", "{:.0f}"),
    ("state B/event", "state_bytes_per_event", "{:.1f}"),
    ("resume s", "resume_s", "{:.2f}"),
    ("rerun", "resume_rerun", "{:d}"),
)


def format_table(report: dict[str, Any]) -> str:
    header = ["backend", "method", "units", *(c[0] for c in COLUMNS)]
    body: list[list[str]] = []
    notes: list[str] = []
    for row in report["rows"]:
        units = f"{row['size']:,}" + (" res" if row["method"] == "pbt" else "")
        cells = [row["backend"], row["method"], units]
        for _label, key, fmt in COLUMNS:
            value = row.get(key)
            cells.append("-" if value is None else fmt.format(value))
        body.append(cells)
        for what in ("run_error", "resume_error", "optuna_error", "skipped"):
            if row.get(what):
                notes.append(f"{row['backend']} {row['method']} {row['size']:,}: {what}: "
                             f"{row[what]}")  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        left = [c.ljust(n) for c, n in zip(cells[:2], widths[:2], strict=True)]
        right = [c.rjust(n) for c, n in zip(cells[2:], widths[2:], strict=True)]
        return "  ".join([*left, *right]).rstrip()

    m = report["machine"]
    out = [f"Machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, load average "
           f"{m['loadavg']} ({report['date']})", "",
           line(header), line(["-" * n for n in widths]), *(line(r) for r in body)]  # fmt: skip
    out += ["", *summary(report["rows"]), *notes]
    return "\n".join(out)


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Flatness (largest size / smallest, driver ms/unit) and the 100,000-trial targets."""
    lines = [f"Flat = driver ms/unit (suggest excluded) at the largest size within {FLAT}x of "
             f"the smallest; targets at 100,000: peak RSS < {TARGET_RSS_MB:.0f} MB, resume < "
             f"{TARGET_RESUME_S:.0f} s."]  # fmt: skip
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("driver_ms") is not None:
            groups.setdefault((row["backend"], row["method"]), []).append(row)
    for (backend, method), group in groups.items():
        group.sort(key=lambda r: r["size"])
        small, big = group[0], group[-1]
        text = f"  {backend} {method}: "
        if len(group) > 1:
            ratio = big["driver_ms"] / small["driver_ms"]
            cpu = big["cpu_ms"] / small["cpu_ms"] if small.get("cpu_ms") else float("nan")
            verdict = "flat" if ratio <= FLAT else "NOT flat"
            text += (f"{small['size']:,} -> {big['size']:,}: {ratio:.2f}x wall, {cpu:.2f}x "
                     f"cpu ({verdict})")  # fmt: skip
        else:
            text += f"one size ({small['size']:,}): no ratio"
        if big["size"] >= 100_000:
            rss, resume = big.get("peak_rss_mb"), big.get("resume_s")
            text += f"; at {big['size']:,}: RSS {rss:.0f} MB" if rss is not None else ""
            text += f", resume {resume:.2f} s" if resume is not None else ""
        lines.append(text)
    return lines


def parse_caps(text: str) -> dict[str, int]:
    if text.strip().lower() == "none":
        return {}
    caps: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        method, _, value = part.partition("=")
        if method not in METHODS or not value.isdigit() or int(value) < 2:
            raise ValueError(
                f"--max-trials-per-method: {part!r} must be METHOD=N with METHOD one of "
                f"{', '.join(METHODS)} and N an integer >= 2 (or 'none')"
            )
        caps[method] = int(value)
    return caps


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="tunefleet bookkeeping per trial, by method")
    p.add_argument("--backend", choices=BACKENDS, default="simulated")
    p.add_argument("--sizes", default=None, help="comma-separated trials (pbt: results); "
                   "default 1000,10000,100000 (simulated), 1000,10000 (local)")  # fmt: skip
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated: " +
                   ", ".join(METHODS))  # fmt: skip
    p.add_argument("--max-trials-per-method", default=DEFAULT_CAPS, metavar="M=N,...")
    p.add_argument("--reports", type=int, default=3, help="results per trial (random, tpe)")
    p.add_argument("--concurrency", type=int, default=None, help="default 4 simulated, 2 local")
    p.add_argument("--json", metavar="OUT", default=None, help="write all figures here")
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per case")
    p.add_argument("--no-resume", action="store_true", help="skip the resume cases")
    p.add_argument(
        "--suggest-delay-ms",
        type=float,
        default=0.0,
        help="sleep this long in each suggest (counted as the sampler's time): "
        "does the bookkeeping per trial depend on the sampler's speed?",
    )
    p.add_argument("--child", choices=("run", "resume", "optuna"), help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    p.add_argument("--experiment", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = args.sizes or DEFAULT_SIZES[args.backend]
    try:
        args.size_list = [int(n) for n in sizes.split(",")]
    except ValueError:
        p.error(f"--sizes {sizes!r} must be comma-separated integers (e.g. 1000,10000)")
    try:
        args.caps = parse_caps(args.max_trials_per_method)
    except ValueError as exc:
        p.error(str(exc))
    if any(n < 2 for n in args.size_list):
        p.error(f"--sizes: every size must be at least 2, not {args.size_list}")
    args.method_list = [m.strip() for m in args.methods.split(",") if m.strip()]
    if unknown := [m for m in args.method_list if m not in METHODS]:
        p.error(f"--methods: {unknown} not among {', '.join(METHODS)}")
    if args.reports < 1:
        p.error(f"--reports must be at least 1, not {args.reports}")
    if args.concurrency is None:
        args.concurrency = 4 if args.backend == "simulated" else 2
    if args.concurrency < 1:
        p.error(f"--concurrency must be at least 1, not {args.concurrency}")
    if args.child:
        args.method, args.trials = args.method_list[0], args.size_list[0]
    return args


def measure(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for method in args.method_list:
        for size in args.size_list:
            row: dict[str, Any] = {"backend": args.backend, "method": method, "size": size}
            rows.append(row)
            cap = args.caps.get(method)
            if cap is not None and size > cap:
                row["skipped"] = (f"above the cap of {cap:,} for {method} (sampler-bound: "
                                  "O(n) per suggest); --max-trials-per-method")  # fmt: skip
                continue
            where = tmp / f"{args.backend}-{method}-{size}"
            _log(f"[scale-methods] {args.backend} {method} {size:,}: run...")
            started = time.time()
            run = run_child("run", args, args.backend, method, size, where / "run")
            _log(f"[scale-methods]   {'FAILED' if 'error' in run else 'done'} in "
                 f"{time.time() - started:.1f} s")  # fmt: skip
            if "error" in run:
                row["run_error"] = run["error"]
                continue
            row.update(run)
            if method in ("tpe", "tpe-random"):
                ref = run_child("optuna", args, args.backend, method, size, where / "optuna")
                row.update(ref) if "error" not in ref else row.update(optuna_error=ref["error"])
            if not args.no_resume:
                res = run_child("resume", args, args.backend, method, size, where / "resume",
                                experiment=run["experiment_path"])  # fmt: skip
                row.update(res) if "error" not in res else row.update(resume_error=res["error"])
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tf-scale-methods-"))
        workdir.mkdir(parents=True, exist_ok=True)
        if args.child == "run":
            emit(child_run(args, workdir))
        elif args.child == "resume":
            emit(child_resume(args, workdir))
        else:
            emit(child_optuna(args))
        return 0
    with tempfile.TemporaryDirectory(prefix="tunefleet-scale-methods-") as tmp:
        rows = measure(args, Path(tmp))
    report: dict[str, Any] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"platform": f"{platform.system()} {platform.machine()}",
                    "cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg())},
        "workload": {"backend": args.backend, "reports": args.reports,
                     "concurrency": args.concurrency, "caps": args.caps},
        "rows": rows,
    }  # fmt: skip
    print(format_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        print(f"\nAll figures written to {args.json}")
    failed = any(r.get("run_error") or r.get("resume_error") or r.get("resume_rerun")
                 for r in rows)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
