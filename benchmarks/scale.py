"""Does an experiment's cost per event stay flat from 1,000 to 10,000 trials? And resume?

Run it with ``make bench-scale`` (or ``.venv/bin/python benchmarks/scale.py``). It runs
``--trials`` trivial trials (default 10,000), each a function trainable that does no
work and calls ``report`` ``--reports`` times (default 10), ``--concurrency`` at a time
(default 2), random search over one uniform parameter, FIFO scheduling, storage in a
temporary directory, ``verbose=0``; then, in a fresh process, it resumes the finished
experiment. With a peer virtual environment at ``.venv-peers`` (``make bench-peers``)
it does the same with Ray Tune, at ``--peer-trials`` trials (default 2,000: Ray takes
about 10 minutes for 10,000 on a 2-core machine), and prints both side by side.

An *event* is one thing the driver has to record: a trial starting, one reported
result, or a trial ending (finished or failed), so ``reports + 2`` per trial. The
driver's hooks count them: a ``Callback`` (tunefleet's, or Ray's ``tune.Callback``)
counts ``on_trial_start``, ``on_trial_result`` and ``on_trial_complete`` /
``on_trial_error`` calls, and takes a *reading* in ``setup()`` (before the first trial
starts) and in ``on_trial_complete`` when ``W``, ``trials - W`` and ``trials`` trials
have ended, where the window ``W`` is 1,000 (less when a run is smaller: half the
smaller run). A reading is the driver process's ``/proc/self/io`` counters, its
resident memory (psutil), the time, and the events so far.

Figures (the driver is the process that calls ``fit()``; trial workers, and Ray's
GCS, raylet and workers, are not included):

``write_bytes_per_event_first`` / ``_last`` / ``_all``
    ``write_bytes`` from ``/proc/self/io`` gained over the first ``W`` trials (from
    ``setup()``), over the last ``W`` trials, and over the whole run, divided by the
    events in that span. ``write_bytes`` counts the bytes the process sent towards the
    disk: each page it dirtied in the page cache counts once (a page written again
    before it reaches the disk is not counted again). Flat means last == first.
``wchar_per_event_first`` / ``_last`` / ``_all``
    The same with ``wchar``: every byte passed to ``write()``-like calls, to files,
    pipes and sockets alike (so it includes talking to workers, and for Ray to its
    GCS and raylet).
``ms_per_trial_first`` / ``_last``
    Driver wall time per trial in the two windows (milliseconds): whether the pace
    holds as the experiment grows.
``rss_mb_at_window`` / ``rss_mb_at_end``
    Resident memory of the driver (psutil ``memory_info().rss``, MiB) when ``W`` trials
    and when all trials have ended.
``state_bytes`` / ``state_bytes_per_trial``
    The experiment's state at the end, after ``fit()`` returns. tunefleet: its
    database (``experiment.db`` and any ``-wal``/``-shm`` file), which holds every
    trial and every result. Ray Tune: the files at the top of its experiment directory
    (``experiment_state-*.json``, ``basic-variant-state-*.json``, ``tuner.pkl``, ...),
    which hold each trial's last result only.
``dir_bytes`` / ``dir_files``
    Every file under the experiment directory (Ray also writes ``result.json``,
    ``progress.csv``, ``params.*`` and a TensorBoard file per trial; tunefleet a
    ``stdout.log`` and ``stderr.log`` per trial): apparent size and count.
``wall_s``
    From just before ``Tuner(...)`` (Ray: ``ray.init``) until ``fit()`` returns.

Resume, in a fresh process after the run, the same trainable with the same wrappers:

``restore_s``
    ``Tuner.restore(path, trainable)``.
``fit_s``
    ``.fit()`` of the restored tuner. Every trial has ended, so nothing runs: this is
    the cost of opening the experiment, loading its trials and ending it.
``ray_init_s``
    Ray only: ``ray.init`` before the restore (Ray's restore needs a running Ray).
``resume_s``
    ``ray_init_s`` (Ray) + ``restore_s`` + ``fit_s``.
``resume_peak_rss_mb``
    Peak resident memory of the resuming process (``ru_maxrss``), MiB.
``resume_trials`` / ``resume_rerun``
    Sanity checks: the results hold every trial; no trial ran again (the trainable
    counts its calls in a file named by an environment variable set only here).

Options: ``--trials``, ``--reports``, ``--concurrency``, ``--peer-trials``,
``--skip-peers``, ``--peers-python PATH``, ``--json OUT``, ``--timeout S`` (per case).

``scale.py methods [options]`` runs ``benchmarks/scale_methods.py`` instead: the
bookkeeping per trial of random search, OptunaSearch (TPE), ASHA, PBT and BOHB from
1,000 to 100,000 trials, on the simulated or the local backend (its docstring says
what it measures).

The Ray Tune peer (``benchmarks/peers/ray_tune_scale.py``) imports the helpers below
(``Probe``, ``add_case_args``, ``scale_figures``, ``state_sizes``, ``count_results``,
``RERUN_ENV``) from this file, which is why it imports nothing but the standard
library (and ``overhead.py``, which does the same) at module level.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from overhead import RESULT_TAG, emit

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PEER = ("ray_tune", "Ray Tune", HERE / "peers" / "ray_tune_scale.py")
RERUN_ENV = "TUNEFLEET_SCALE_RERUN_FILE"  # set only when resuming: trials append a line
IO_KEYS = ("wchar", "write_bytes", "cancelled_write_bytes", "syscw")
MIB = 1024 * 1024

# --------------------------------------------------------------------------------------
# Helpers shared with the peer script (standard library only)
# --------------------------------------------------------------------------------------


def proc_io() -> dict[str, int]:
    """This process's write counters from ``/proc/self/io`` (empty where there is none)."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return {}
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return {key: int(fields[key]) for key in IO_KEYS if key in fields}


def rss_bytes() -> int:
    """This process's resident memory now."""
    try:
        import psutil
    except ImportError:  # Linux without psutil
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return int(psutil.Process().memory_info().rss)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (ru_maxrss; Linux KiB, macOS bytes)."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / MIB if sys.platform == "darwin" else maxrss / 1024


def window_for(*trials: int) -> int:
    """The window W: 1,000 trials, or half the smallest run when that is less."""
    return max(1, min(1000, *(n // 2 for n in trials)))


class Probe:
    """Counts the driver's events and takes readings at given numbers of ended trials.

    A framework's callback calls `start` in its ``setup()``, `event` when a trial
    starts or reports, and `trial_done` when a trial ends; a reading holds the
    driver's ``/proc/self/io`` counters, RSS, time, events and trials so far.
    """

    def __init__(self, marks: Iterable[int]) -> None:
        self.marks = set(marks)
        self.events = 0
        self.done = 0
        self.readings: list[dict[str, Any]] = []

    def _read(self) -> None:
        reading: dict[str, Any] = {"trials": self.done, "events": self.events}
        reading.update(proc_io(), rss=rss_bytes(), time=time.perf_counter())
        self.readings.append(reading)

    def start(self) -> None:
        self._read()

    def event(self) -> None:
        self.events += 1

    def trial_done(self) -> None:
        self.events += 1
        self.done += 1
        if self.done in self.marks:
            self._read()


def marks(trials: int, window: int) -> tuple[int, int, int]:
    """The numbers of ended trials at which the probe takes a reading."""
    return window, trials - window, trials


def scale_figures(readings: list[dict[str, Any]], *, trials: int, window: int) -> dict[str, Any]:
    """The per-event, per-trial and memory figures from a probe's readings."""
    at = {r["trials"]: r for r in readings}
    out: dict[str, Any] = {"readings": readings}
    spans = {"first": (0, window), "last": (trials - window, trials), "all": (0, trials)}
    for name, (a, b) in spans.items():
        if a not in at or b not in at:
            continue
        events = at[b]["events"] - at[a]["events"]
        out[f"events_{name}"] = events
        out[f"ms_per_trial_{name}"] = (at[b]["time"] - at[a]["time"]) / (b - a) * 1000.0
        for key in ("write_bytes", "wchar"):
            if key in at[a] and events > 0:
                out[f"{key}_per_event_{name}"] = (at[b][key] - at[a][key]) / events
    for key, n in (("rss_mb_at_window", window), ("rss_mb_at_end", trials)):
        if n in at:
            out[key] = at[n]["rss"] / MIB
    for key in ("write_bytes", "wchar"):
        first, last = out.get(f"{key}_per_event_first"), out.get(f"{key}_per_event_last")
        if first and last is not None:
            out[f"{key}_growth"] = last / first
    return out


def state_sizes(experiment: Path, state_glob: str, trials: int) -> dict[str, Any]:
    """Sizes of the state files (``state_glob`` at the top of the experiment) and all files."""
    state = {p.name: p.stat().st_size for p in experiment.glob(state_glob) if p.is_file()}
    dir_bytes = dir_files = 0
    for root, _dirs, files in os.walk(experiment):
        for name in files:
            try:
                dir_bytes += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while walking (a lock file)
                continue
            dir_files += 1
    total = sum(state.values())
    return {
        "state_files": state,
        "state_bytes": total,
        "state_bytes_per_trial": total / trials,
        "dir_bytes": dir_bytes,
        "dir_bytes_per_trial": dir_bytes / trials,
        "dir_files": dir_files,
    }


def count_results(results: Any) -> dict[str, int]:
    """trials_ok, trials_error and results_recorded of a ResultGrid (either framework)."""
    ok = errors = recorded = 0
    for result in results:
        if getattr(result, "error", None) is not None:
            errors += 1
        else:
            ok += 1
        recorded += int((getattr(result, "metrics", None) or {}).get("training_iteration", 0))
    return {"trials_ok": ok, "trials_error": errors, "results_recorded": recorded}


def rerun_count(path: Path) -> int:
    """How many trials ran during the resume (lines the trainable appended)."""
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


def add_case_args(parser: argparse.ArgumentParser) -> None:
    """The arguments of a case (this file in --child mode, and the peer)."""
    parser.add_argument("--case", choices=("run", "resume"), default="run")
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--reports", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--window", type=int, default=None, help="default: see window_for")
    parser.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--experiment", default=None, help="resume: the experiment's path")


# --------------------------------------------------------------------------------------
# tunefleet's cases (each in a fresh process: ``scale.py --child --case run|resume``)
# --------------------------------------------------------------------------------------


def _trivial_trainable(config: dict[str, Any]) -> None:
    """A trial that does no work: ``reports`` results (and a line in a file on resume)."""
    from tunefleet import report

    rerun = os.environ.get(RERUN_ENV)
    if rerun:
        with open(rerun, "a") as f:
            f.write(f"{os.getpid()}\n")
    x = config["x"]
    for i in range(config["reports"]):
        report({"score": x * i})


def _trainable(tune: Any, concurrency: int) -> Any:
    """The trainable with its wrappers: the same for the run and the resume."""
    cpus = os.cpu_count() or 1
    return tune.with_resources(_trivial_trainable, {"cpu": min(1.0, cpus / concurrency)})


def _child_run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import tunefleet as tune

    window = args.window or window_for(args.trials)
    probe = Probe(marks(args.trials, window))

    t_setup = time.perf_counter()
    tuner = tune.Tuner(
        _trainable(tune, args.concurrency),
        param_space={"x": tune.uniform(0.0, 1.0), "reports": args.reports},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            num_samples=args.trials,
            max_concurrent_trials=args.concurrency,
        ),
        run_config=tune.RunConfig(
            name="scale",
            storage_path=str(workdir / "storage"),
            verbose=0,
            callbacks=[probe_callback(tune.Callback, probe)],
        ),
    )
    results = tuner.fit()
    wall = time.perf_counter() - t_setup
    experiment = Path(results.experiment_path)
    record: dict[str, Any] = {
        "framework": "tunefleet",
        "version": getattr(tune, "__version__", "dev"),
        "trials": args.trials,
        "window": window,
        "wall_s": wall,
        "experiment_path": str(experiment),
        "peak_driver_rss_mb": peak_rss_mb(),
    }
    record.update(count_results(results))
    record.update(scale_figures(probe.readings, trials=args.trials, window=window))
    record.update(state_sizes(experiment, "experiment.db*", args.trials))
    return record


def _child_resume(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rerun_file = workdir / "rerun.txt"
    os.environ[RERUN_ENV] = str(rerun_file)  # before any worker starts
    t0 = time.perf_counter()
    import tunefleet as tune

    t1 = time.perf_counter()
    tuner = tune.Tuner.restore(args.experiment, _trainable(tune, args.concurrency))
    t2 = time.perf_counter()
    results = tuner.fit()
    t3 = time.perf_counter()
    record: dict[str, Any] = {
        "framework": "tunefleet",
        "import_s": t1 - t0,
        "restore_s": t2 - t1,
        "fit_s": t3 - t2,
        "resume_s": t3 - t1,
        "resume_peak_rss_mb": peak_rss_mb(),
        "resume_rerun": rerun_count(rerun_file),
    }
    counts = count_results(results)
    record["resume_trials"] = counts["trials_ok"] + counts["trials_error"]
    record.update({f"resume_{key}": value for key, value in counts.items()})
    return record


def _child_main(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tf-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.case == "run":
        emit(_child_run(args, workdir))
    else:
        emit(_child_resume(args, workdir))
    return 0


# --------------------------------------------------------------------------------------
# The parent: runs each case in a fresh process and prints the table
# --------------------------------------------------------------------------------------


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_case(
    python: str,
    command: list[str],
    case: str,
    trials: int,
    args: argparse.Namespace,
    workdir: Path,
    experiment: str | None = None,
    env_extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one case in a fresh process and return its figures (or an "error" entry)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [python, *command, "--case", case, "--trials", str(trials)]
    cmd += ["--reports", str(args.reports), "--concurrency", str(args.concurrency)]
    cmd += ["--window", str(args.window), "--workdir", str(workdir)]
    if experiment is not None:
        cmd += ["--experiment", experiment]
    env = dict(os.environ)
    env.update(env_extra or {})
    try:
        proc = subprocess.run(
            cmd,
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=args.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stderr if isinstance(exc.stderr, str) else (exc.stderr or b"").decode()
        return {"error": f"timed out after {args.timeout:.0f} s\n{_tail(out)}"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG) and proc.returncode == 0:
            record: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
            return record
    return {"error": f"exit code {proc.returncode}\n{_tail(proc.stderr or proc.stdout)}"}


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "bytes":
        return f"{value:,.0f}"
    if kind == "x":
        return f"{value:.2f}x"
    if kind == "s":
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"  # ms, MiB, KiB


def _ratio(ours: Any, peer: Any, better: str) -> str:
    """How many times better tunefleet is: "faster" for times, "less" for sizes."""
    if not isinstance(ours, (int, float)) or not isinstance(peer, (int, float)):
        return ""
    if ours <= 0 or peer <= 0:
        return ""
    ratio = peer / ours
    good, bad = ("faster", "slower") if better == "time" else ("less", "more")
    return f"{ratio:.1f}x {good}" if ratio >= 1 else f"{1 / ratio:.1f}x {bad}"


# (label, case, key, format, scale, better, comparable at any size): scale divides the
# value (MiB, KiB); rows marked False get a ratio only when both ran the same trials.
ROWS: tuple[tuple[str, str, str, str, float, str, bool], ...] = (
    ("write_bytes per event, trials 1-{W}", "run", "write_bytes_per_event_first", "bytes",
     1, "size", True),
    ("write_bytes per event, last {W} trials", "run", "write_bytes_per_event_last", "bytes",
     1, "size", False),
    ("  growth (last / first)", "run", "write_bytes_growth", "x", 1, "", False),
    ("wchar per event, trials 1-{W}", "run", "wchar_per_event_first", "bytes", 1, "size", True),
    ("wchar per event, last {W} trials", "run", "wchar_per_event_last", "bytes", 1, "size",
     False),
    ("  growth (last / first)", "run", "wchar_growth", "x", 1, "", False),
    ("driver ms per trial, trials 1-{W}", "run", "ms_per_trial_first", "ms", 1, "time", True),
    ("driver ms per trial, last {W} trials", "run", "ms_per_trial_last", "ms", 1, "time",
     False),
    ("driver RSS at {W} trials (MiB)", "run", "rss_mb_at_window", "mb", 1, "size", True),
    ("driver RSS at the end (MiB)", "run", "rss_mb_at_end", "mb", 1, "size", False),
    ("state at the end (MiB)", "run", "state_bytes", "mb", MIB, "size", False),
    ("state per trial (KiB)", "run", "state_bytes_per_trial", "mb", 1024, "size", True),
    ("all files at the end (MiB)", "run", "dir_bytes", "mb", MIB, "size", False),
    ("all files per trial (KiB)", "run", "dir_bytes_per_trial", "mb", 1024, "size", True),
    ("files in the experiment dir", "run", "dir_files", "int", 1, "", False),
    ("total wall time (s)", "run", "wall_s", "s", 1, "time", False),
    ("trials ok", "run", "trials_ok", "int", 1, "", False),
    ("trials in error", "run", "trials_error", "int", 1, "", False),
    ("results recorded", "run", "results_recorded", "int", 1, "", False),
    ("resume: ray.init, Ray only (s)", "resume", "ray_init_s", "s", 1, "", False),
    ("resume: Tuner.restore (s)", "resume", "restore_s", "s", 1, "time", False),
    ("resume: fit() (s)", "resume", "fit_s", "s", 1, "time", False),
    ("resume: total (s)", "resume", "resume_s", "s", 1, "time", False),
    ("resume: peak RSS (MiB)", "resume", "resume_peak_rss_mb", "mb", 1, "size", False),
    ("resume: trials in the results", "resume", "resume_trials", "int", 1, "", False),
    ("resume: trials run again", "resume", "resume_rerun", "int", 1, "", False),
)  # fmt: skip


def format_table(report: dict[str, Any]) -> str:
    ours = report["tunefleet"]
    peer = report["peers"].get(PEER[0])
    w = report["workload"]
    columns = [(f"tunefleet {ours.get('run', {}).get('version', '')}".strip(), ours)]
    if peer is not None:
        columns.append((f"{PEER[1]} {peer.get('run', {}).get('version', '')}".strip(), peer))
    same_size = peer is not None and w["peer_trials"] == w["trials"]

    header = ["figure", *(title for title, _ in columns)]
    if peer is not None:
        header.append(f"vs {PEER[1]}")
    body: list[list[str]] = []
    for label, case, key, kind, scale, better, comparable in ROWS:
        row = [label.format(W=f"{w['window']:,}")]
        values = [source.get(case, {}).get(key) for _, source in columns]
        row += [_fmt(None if v is None else v / scale, kind) for v in values]
        if peer is not None:
            row.append(_ratio(values[0], values[1], better) if comparable or same_size else "")
        body.append(row)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        rest = [c.rjust(n) for c, n in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([cells[0].ljust(widths[0]), *rest]).rstrip()

    m = report["machine"]
    sizes = f"tunefleet {w['trials']:,} trials"
    if peer is not None:
        sizes += f", {PEER[1]} {w['peer_trials']:,} trials (--peer-trials)"
    out = [
        f"Workload: trivial trials x {w['reports']} reports each, {w['concurrency']} at a "
        f"time: {sizes}",
        f"An event is a trial start, a result or a trial end ({w['reports'] + 2} per trial); "
        f"windows: the first and the last {w['window']:,} trials of each run",
        f"Machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}  ({report['date']})",
        "",
        line(header),
        line(["-" * n for n in widths]),
        *(line(r) for r in body),
    ]
    notes = []
    if peer is not None and not same_size:
        notes.append(
            f"Ratios only where both were measured at the same point (the first "
            f"{w['window']:,} trials, or per trial); {PEER[1]} ran {w['peer_trials']:,} "
            f"trials, tunefleet {w['trials']:,}."
        )
    for name, source in (("tunefleet", ours), *report["peers"].items()):
        for case in ("run", "resume"):
            entry = source.get(case, {})
            if "error" in entry:
                notes.append(f"{name} {case}: FAILED: {entry['error']}")
            elif case == "resume" and entry.get("resume_rerun"):
                notes.append(f"{name}: {entry['resume_rerun']} trials ran again on resume")
    if report.get("peers_note"):
        notes.append(report["peers_note"])
    return "\n".join([*out, *([""] if notes else []), *notes])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="tunefleet scale benchmark (see the module docstring for definitions)"
    )
    add_case_args(parser)
    parser.add_argument("--peer-trials", type=int, default=2000, help="trials for Ray Tune")
    parser.add_argument("--skip-peers", action="store_true", help="do not run Ray Tune")
    parser.add_argument(
        "--peers-python",
        default=str(REPO / ".venv-peers" / "bin" / "python"),
        help="python of the venv with ray[tune] (default .venv-peers)",
    )
    parser.add_argument("--json", metavar="OUT", default=None, help="write all figures here")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per case")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("trials", "peer_trials"):
        if getattr(args, name) < 2:
            parser.error(f"--{name.replace('_', '-')} must be at least 2")
    for name in ("reports", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.window is not None and not 1 <= args.window <= args.trials // 2:
        parser.error(f"--window must be between 1 and half of --trials, not {args.window}")
    return args


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def probe_callback(base: type, probe: Any) -> Any:
    """A callback (of tunefleet's or Ray Tune's `Callback` class) that feeds `probe`."""

    class ProbeCallback(base):  # type: ignore[misc]
        def setup(self, stop: Any = None, num_samples: Any = None, **info: Any) -> None:
            probe.start()

        def on_trial_start(self, iteration: int, trials: Any, trial: Any, **info: Any) -> None:
            probe.event()

        def on_trial_result(
            self, iteration: int, trials: Any, trial: Any, result: Any, **info: Any
        ) -> None:
            probe.event()

        def on_trial_complete(self, iteration: int, trials: Any, trial: Any, **info: Any) -> None:
            probe.trial_done()

        def on_trial_error(self, iteration: int, trials: Any, trial: Any, **info: Any) -> None:
            probe.trial_done()

    return ProbeCallback()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["methods"]:
        import scale_methods

        return scale_methods.main(argv[1:])
    args = parse_args(argv)
    if args.child:
        return _child_main(args)

    peers_python = Path(args.peers_python)
    run_peer = not args.skip_peers and peers_python.exists()
    sizes = [args.trials, *([args.peer_trials] if run_peer else [])]
    if args.window is None:
        args.window = window_for(*sizes)
    elif args.window > min(sizes) // 2:
        print(
            f"--window must be at most half of each run's trials ({min(sizes) // 2})",
            file=sys.stderr,
        )
        return 2
    report: dict[str, Any] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {
            "platform": f"{platform.system()} {platform.machine()}",
            "processor": platform.processor(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "workload": {
            "trials": args.trials,
            "peer_trials": args.peer_trials if run_peer else None,
            "reports": args.reports,
            "concurrency": args.concurrency,
            "window": args.window,
        },
        "tunefleet": {},
        "peers": {},
    }
    if not args.skip_peers and not run_peer:
        report["peers_note"] = f"Ray Tune not run: no {peers_python} (`make bench-peers`)."

    src = str(REPO / "src")
    pythonpath = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    jobs = [
        (
            "tunefleet",
            sys.executable,
            [str(Path(__file__).resolve()), "--child"],
            args.trials,
            report["tunefleet"],
        )
    ]
    if run_peer:
        report["peers"][PEER[0]] = {}
        jobs.append((PEER[0], str(peers_python), [str(PEER[2])], args.peer_trials,
                     report["peers"][PEER[0]]))  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="tunefleet-scale-") as tmp:
        for name, python, command, trials, into in jobs:
            for case in ("run", "resume"):
                experiment = into.get("run", {}).get("experiment_path")
                if case == "resume" and experiment is None:
                    into[case] = {"error": "not run: the run case failed"}
                    continue
                what = f"{trials:,} trials x {args.reports} reports" if case == "run" else ""
                _log(f"[scale] {name}: {case} {what}...")
                started = time.time()
                into[case] = run_case(
                    python,
                    command,
                    case,
                    trials,
                    args,
                    Path(tmp, f"{name}-{case}"),
                    experiment=experiment,
                    env_extra={"PYTHONPATH": pythonpath} if name == "tunefleet" else None,
                )
                status = "FAILED" if "error" in into[case] else "done"
                _log(f"[scale] {name}: {case} {status} in {time.time() - started:.1f} s")

    print(format_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        print(f"\nAll figures written to {args.json}")
    return 1 if any("error" in report["tunefleet"].get(c, {}) for c in ("run", "resume")) else 0


if __name__ == "__main__":
    sys.exit(main())
