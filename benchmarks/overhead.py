"""How much tunefleet itself costs: per trial, per result, at start-up, in memory.

Run it with ``make bench`` (or ``.venv/bin/python benchmarks/overhead.py``). It prints
one table; with a peer virtual environment at ``.venv-peers`` (``make bench-peers``
creates it with ``ray[tune]`` and ``optuna``) it runs the same workload with Ray Tune
and Optuna in the same run and prints their figures side by side, with ratios.

Workload "trivial trials": ``--trials`` trials (default 1,000), each a function
trainable that does no work and reports ``--reports`` results (default 10), run
``--concurrency`` at a time (default 2), every trial asking for one CPU (or
``cpus / concurrency`` where that is less). Default search (random sampling of one
uniform parameter), FIFO scheduling, default storage in a temporary directory,
``verbose=0``. Each case runs in a fresh Python process, so nothing is warm.

Figures (the same definitions for every framework):

``wall_s``
    Seconds from just before setup (``Tuner(...)``; for Ray ``ray.init`` then
    ``Tuner(...)``; for Optuna ``create_study``) until ``fit()`` (``optimize``)
    returns. Interpreter start and the framework's import are not included.
``overhead_ms_per_trial``
    ``(wall_s - ideal_s) / trials`` in milliseconds, with ``ideal_s = 0`` because
    the trials do no work: the experiment's wall time per trial, start-up included.
    This is the figure the targets use (Ray Tune: about 80 s / 1,000 = 80 ms).
``slot_ms_per_trial``
    ``overhead_ms_per_trial * concurrency``: with ``concurrency`` slots busy in
    parallel, the average time one slot spends on one trial (choosing, starting,
    feeding, recording and ending it). The stricter of the two figures.
``results_per_s``
    ``trials * reports / wall_s``: results reported and recorded per second.
``import_s``
    Seconds to import the framework in a fresh interpreter (time.time() before and
    after ``import tunefleet`` / ``import ray.tune`` / ``import optuna``).
``first_trial_s``
    Seconds from just before setup (as for ``wall_s``) to the first line of the first
    trial's trainable, which writes time.time() to a file.
``process_to_first_trial_s``
    The same, but counted from the moment this script starts the driver's process:
    interpreter start + import + setup until the first trial runs.
``peak_driver_rss_mb``
    ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of the driver process (the one
    that calls ``fit()``), in MiB. Worker processes are not included.
``peak_tree_rss_mb``
    The largest sum of resident memory of the driver and all its descendant processes
    (trial workers; Ray's GCS, raylet and workers), sampled every 0.25 s, in MiB (and
    never less than ``peak_driver_rss_mb``, which a sample can miss).
``trials_ok`` / ``trials_error`` / ``results_recorded``
    Sanity checks: every trial must end without error and every report be recorded.

Report throughput: one trial calling ``report`` ``--throughput-reports`` times
(default 200,000) in a tight loop, stopping early after ``--throughput-max-s``
seconds of looping (default 60; only slow frameworks reach it, and the table then
says how many reports were made):

``throughput_results_per_s``
    reports made / seconds from the trial's first line until ``fit()`` returns, so
    every result has been received and recorded by the driver.
``throughput_loop_per_s``
    reports made / seconds the trial's loop took: how long ``report()`` blocks the
    trainable.

Ratios are "tunefleet is X times faster" (the peer's time divided by ours, or our
rate divided by the peer's); below 1 they read "slower". Memory ratios read "less".

Options: ``--quick`` (100 trials, 20,000 throughput reports, unless given),
``--skip-peers``, ``--peers-python PATH``, ``--json OUT`` (all figures as JSON),
``--timeout S`` (per case). All storage goes in a temporary directory that is removed.

The peer scripts (``benchmarks/peers/*.py``) import the small helpers below
(``MemorySampler``, ``peak_rss_mb``, ``emit``) from this file, which is why this file
imports nothing but the standard library at module level.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PEERS = (
    ("ray_tune", "Ray Tune", HERE / "peers" / "ray_tune_overhead.py"),
    ("optuna", "Optuna", HERE / "peers" / "optuna_overhead.py"),
)
RESULT_TAG = "TUNEFLEET_BENCH_RESULT "  # prefix of the one JSON line each case prints

# --------------------------------------------------------------------------------------
# Helpers shared with the peer scripts (standard library only)
# --------------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (ru_maxrss)."""
    import resource

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return maxrss / (1024 * 1024) if sys.platform == "darwin" else maxrss / 1024


def _tree_rss_bytes_psutil(root: int) -> int:
    import psutil

    total = 0
    try:
        proc = psutil.Process(root)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _tree_rss_bytes_proc(root: int) -> int:
    """The same from /proc, for environments without psutil (Linux only)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    page = os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


class MemorySampler:
    """Samples the resident memory of this process and all its descendants.

    Use as a context manager; ``peak_mb`` is the largest sum seen (None where the
    platform gives no way to measure it).
    """

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._measure: Callable[[int], int] | None
        try:
            import psutil  # noqa: F401

            self._measure = _tree_rss_bytes_psutil
        except ImportError:
            self._measure = _tree_rss_bytes_proc if os.path.isdir("/proc/self") else None

    @property
    def peak_mb(self) -> float | None:
        return None if self._measure is None else self.peak_bytes / (1024 * 1024)

    def sample(self) -> None:
        if self._measure is not None:
            self.peak_bytes = max(self.peak_bytes, self._measure(os.getpid()))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> MemorySampler:
        self.sample()
        if self._measure is not None:
            self._thread = threading.Thread(target=self._loop, name="mem-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


def tree_peak_mb(sampler: MemorySampler) -> float | None:
    """The sampled peak of the process tree, never below the driver's own peak."""
    sampled = sampler.peak_mb
    return None if sampled is None else max(sampled, peak_rss_mb())


def read_first_trial_time(marker_dir: str | os.PathLike[str]) -> float | None:
    """The time.time() a trainable wrote at its first line (see ``mark_first_trial``)."""
    try:
        return float(Path(marker_dir, "first_trial").read_text())
    except (OSError, ValueError):
        return None


def read_throughput_marker(marker_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """What the throughput trainable wrote at its end (t_first, t_loop, t_end, done)."""
    try:
        data: dict[str, Any] = json.loads(Path(marker_dir, "throughput.json").read_text())
    except (OSError, ValueError):
        return {}
    return data


def throughput_figures(marker: dict[str, Any], t_fit_end: float) -> dict[str, Any]:
    """The throughput figures from the trainable's marker and the end of fit()."""
    if not marker:
        return {"error": "the throughput trial wrote no marker (did it run?)"}
    done = int(marker["done"])
    return {
        "throughput_reports_done": done,
        "throughput_capped": bool(marker.get("capped", False)),
        "throughput_results_per_s": done / max(t_fit_end - marker["t_first"], 1e-9),
        "throughput_loop_per_s": done / max(marker["t_end"] - marker["t_loop"], 1e-9),
    }


def overhead_figures(
    *, trials: int, reports: int, concurrency: int, t_setup: float, t_end: float
) -> dict[str, Any]:
    """wall_s, overhead_ms_per_trial and results_per_s, as defined in the docstring."""
    wall = t_end - t_setup
    ideal = 0.0  # the trials do no work
    return {
        "wall_s": wall,
        "overhead_ms_per_trial": (wall - ideal) / trials * 1000.0,
        "slot_ms_per_trial": (wall - ideal) / trials * concurrency * 1000.0,
        "results_per_s": trials * reports / max(wall, 1e-9),
    }


def emit(record: dict[str, Any]) -> None:
    """Print the case's figures as one tagged JSON line on stdout (read by the parent)."""
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(record, sort_keys=True), flush=True)


def add_case_args(parser: argparse.ArgumentParser) -> None:
    """The arguments every case script (ours in --child mode, the peers) takes."""
    parser.add_argument("--case", choices=("overhead", "throughput"), default="overhead")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--reports", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--throughput-reports", type=int, default=200_000)
    parser.add_argument("--throughput-max-s", type=float, default=60.0)
    parser.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir)")


# --------------------------------------------------------------------------------------
# tunefleet's cases (run in a fresh child process: ``overhead.py --child ...``)
# --------------------------------------------------------------------------------------


def _trivial_trainable(config: dict[str, Any]) -> None:
    """A trial that does no work: marks its start, then reports ``reports`` results."""
    now = time.time()
    try:
        fd = os.open(
            os.path.join(config["marker_dir"], "first_trial"),
            os.O_CREAT | os.O_EXCL | os.O_WRONLY,
        )
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(repr(now))
    from tunefleet import report

    x = config["x"]
    for i in range(config["reports"]):
        report({"score": x * i})


def _throughput_trainable(config: dict[str, Any]) -> None:
    """One trial reporting as fast as it can, then writing its timings to a file."""
    t_first = time.time()
    from tunefleet import report

    n, deadline = config["reports"], t_first + config["max_s"]
    done, capped = 0, False
    t_loop = time.time()
    while done < n:
        report({"score": done})
        done += 1
        if not done & 1023 and time.time() > deadline:
            capped = True
            break
    t_end = time.time()
    marker = {"t_first": t_first, "t_loop": t_loop, "t_end": t_end, "done": done}
    marker["capped"] = capped
    Path(config["marker_dir"], "throughput.json").write_text(json.dumps(marker))


def _count_results(results: Any) -> dict[str, int]:
    ok = errors = recorded = 0
    for result in results:
        if getattr(result, "error", None) is not None:
            errors += 1
        else:
            ok += 1
        recorded += int((getattr(result, "metrics", None) or {}).get("training_iteration", 0))
    return {"trials_ok": ok, "trials_error": errors, "results_recorded": recorded}


def _child_tunefleet(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tf-bench-"))
    marker_dir, storage = workdir / "markers", workdir / "storage"
    marker_dir.mkdir(parents=True, exist_ok=True)
    storage.mkdir(parents=True, exist_ok=True)

    t0 = time.time()
    import tunefleet as tune

    t_import = time.time()
    record: dict[str, Any] = {
        "framework": "tunefleet",
        "version": getattr(tune, "__version__", "dev"),
        "case": args.case,
        "t_start": t0,
        "import_s": t_import - t0,
    }
    cpus = os.cpu_count() or 1
    per_trial = {"cpu": min(1.0, cpus / args.concurrency)}
    with MemorySampler() as mem:
        t_setup = time.time()
        if args.case == "overhead":
            tuner = tune.Tuner(
                tune.with_resources(_trivial_trainable, per_trial),
                param_space={
                    "x": tune.uniform(0.0, 1.0),
                    "reports": args.reports,
                    "marker_dir": str(marker_dir),
                },
                tune_config=tune.TuneConfig(
                    metric="score",
                    mode="max",
                    num_samples=args.trials,
                    max_concurrent_trials=args.concurrency,
                    reuse_actors=True,
                ),
                run_config=tune.RunConfig(name="overhead", storage_path=str(storage), verbose=0),
            )
        else:
            tuner = tune.Tuner(
                tune.with_resources(_throughput_trainable, {"cpu": 1}),
                param_space={
                    "reports": args.throughput_reports,
                    "max_s": args.throughput_max_s,
                    "marker_dir": str(marker_dir),
                },
                tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=1),
                run_config=tune.RunConfig(name="throughput", storage_path=str(storage), verbose=0),
            )
        results = tuner.fit()
        t_end = time.time()
    record["peak_driver_rss_mb"] = peak_rss_mb()
    record["peak_tree_rss_mb"] = tree_peak_mb(mem)
    record.update(_count_results(results))
    t_first = read_first_trial_time(marker_dir)
    if args.case == "overhead":
        record.update(
            overhead_figures(
                trials=args.trials,
                reports=args.reports,
                concurrency=args.concurrency,
                t_setup=t_setup,
                t_end=t_end,
            )
        )
        record["t_first_trial"] = t_first
        record["first_trial_s"] = None if t_first is None else t_first - t_setup
    else:
        record.update(throughput_figures(read_throughput_marker(marker_dir), t_end))
    return record


# --------------------------------------------------------------------------------------
# The parent: runs every case in a fresh process and prints the table
# --------------------------------------------------------------------------------------


def _parse_record(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            record: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
            return record
    return None


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_case(
    python: str,
    script: Path,
    case: str,
    args: argparse.Namespace,
    workdir: Path,
    extra: list[str] | None = None,
    env_extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one case in a fresh process and return its figures (or an "error" entry)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [
        python,
        str(script),
        *(extra or []),
        "--case",
        case,
        "--trials",
        str(args.trials),
        "--reports",
        str(args.reports),
        "--concurrency",
        str(args.concurrency),
        "--throughput-reports",
        str(args.throughput_reports),
        "--throughput-max-s",
        str(args.throughput_max_s),
        "--workdir",
        str(workdir),
    ]
    env = dict(os.environ)
    env.update(env_extra or {})
    t_spawn = time.time()
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
    record = _parse_record(proc.stdout)
    if proc.returncode != 0 or record is None:
        return {
            "error": f"exit code {proc.returncode}\n{_tail(proc.stderr or proc.stdout)}",
        }
    if record.get("t_first_trial") is not None:
        record["process_to_first_trial_s"] = record["t_first_trial"] - t_spawn
    return record


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "rate":
        return f"{value:,.0f}"
    if kind == "s":
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if kind == "ms" or kind == "mb":
        return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"
    return str(value)


def _ratio(ours: Any, peer: Any, better: str) -> str:
    """How many times better tunefleet is ("lower" or "higher" is better)."""
    if not isinstance(ours, (int, float)) or not isinstance(peer, (int, float)):
        return ""
    if ours <= 0 or peer <= 0:
        return ""
    ratio = peer / ours if better in ("lower", "memory") else ours / peer
    good, bad = ("less", "more") if better == "memory" else ("faster", "slower")
    return f"{ratio:.1f}x {good}" if ratio >= 1 else f"{1 / ratio:.1f}x {bad}"


# (label, case, key, format, which is better)
ROWS: tuple[tuple[str, str, str, str, str], ...] = (
    ("total wall time (s)", "overhead", "wall_s", "s", "lower"),
    ("overhead per trial (ms)", "overhead", "overhead_ms_per_trial", "ms", "lower"),
    ("slot time per trial (ms)", "overhead", "slot_ms_per_trial", "ms", "lower"),
    ("results per second", "overhead", "results_per_s", "rate", "higher"),
    ("import (s)", "overhead", "import_s", "s", "lower"),
    ("setup+fit -> first trial (s)", "overhead", "first_trial_s", "s", "lower"),
    ("process start -> first trial (s)", "overhead", "process_to_first_trial_s", "s", "lower"),
    ("peak driver RSS (MiB)", "overhead", "peak_driver_rss_mb", "mb", "memory"),
    ("peak RSS incl. workers (MiB)", "overhead", "peak_tree_rss_mb", "mb", "memory"),
    ("trials ok", "overhead", "trials_ok", "int", ""),
    ("trials in error", "overhead", "trials_error", "int", ""),
    ("results recorded", "overhead", "results_recorded", "int", ""),
    ("report throughput: results/s", "throughput", "throughput_results_per_s", "rate", "higher"),
    ("report() calls/s in the trial", "throughput", "throughput_loop_per_s", "rate", "higher"),
    ("reports made (1 trial)", "throughput", "throughput_reports_done", "int", ""),
)


def format_table(report: dict[str, Any]) -> str:
    ours = report["tunefleet"]
    peers = report["peers"]
    columns: list[tuple[str, dict[str, Any], bool]] = [
        (f"tunefleet {ours.get('overhead', {}).get('version', '')}".strip(), ours, False)
    ]
    for key, label, _script in PEERS:
        if key in peers:
            version = peers[key].get("overhead", {}).get("version", "")
            columns.append((f"{label} {version}".strip(), peers[key], False))
            columns.append((f"vs {label}", peers[key], True))

    header = ["figure", *[c[0] for c in columns]]
    body: list[list[str]] = []
    for label, case, key, kind, better in ROWS:
        row = [label]
        for _title, source, is_ratio in columns:
            if is_ratio:
                row.append(
                    _ratio(ours.get(case, {}).get(key), source.get(case, {}).get(key), better)
                    if better
                    else ""
                )
            else:
                row.append(_fmt(source.get(case, {}).get(key), kind))
        body.append(row)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    w = report["workload"]
    m = report["machine"]
    out = [
        f"Workload: {w['trials']:,} trivial trials x {w['reports']} reports each, "
        f"{w['concurrency']} at a time; report throughput: 1 trial x "
        f"{w['throughput_reports']:,} reports",
        f"Machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, load average "
        f"{' '.join(str(x) for x in m.get('load_average', []))} before  ({report['date']})",
        *(
            [
                f"Filesystem of the trials' folders: {fs['mkdir_us']:.0f} us of CPU to make a "
                f"folder, {fs['create_us']:.0f} us to create a file (means; a trivial trial "
                "makes one folder and two log files)"
            ]
            if (fs := m.get("filesystem"))
            else []
        ),
        "",
        line(header),
        line(["-" * x for x in widths]),
        *(line(r) for r in body),
    ]
    notes = []
    for name, source in [("tunefleet", ours), *peers.items()]:
        for case in ("overhead", "throughput"):
            entry = source.get(case, {})
            if "error" in entry:
                notes.append(f"{name} {case}: FAILED: {entry['error']}")
            elif entry.get("throughput_capped"):
                notes.append(
                    f"{name}: the throughput trial stopped at the {w['throughput_max_s']:.0f} s "
                    f"cap after {entry['throughput_reports_done']:,} reports"
                )
            elif case == "overhead" and entry and entry.get("trials_error"):
                notes.append(f"{name}: {entry['trials_error']} trials ended in error")
    if report.get("peers_note"):
        notes.append(report["peers_note"])
    if notes:
        out += ["", *notes]
    return "\n".join(out)


def _child_main(args: argparse.Namespace) -> int:
    emit(_child_tunefleet(args))
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="tunefleet overhead benchmark (see the module docstring for definitions)"
    )
    parser.add_argument("--trials", type=int, default=None, help="trials (default 1000)")
    parser.add_argument("--reports", type=int, default=10, help="reports per trial")
    parser.add_argument("--concurrency", type=int, default=2, help="trials at a time")
    parser.add_argument(
        "--throughput-reports", type=int, default=None, help="reports in one trial (200,000)"
    )
    parser.add_argument(
        "--throughput-max-s", type=float, default=60.0, help="cap on the throughput loop"
    )
    parser.add_argument("--quick", action="store_true", help="100 trials, 20,000 reports")
    parser.add_argument("--skip-peers", action="store_true", help="do not run Ray Tune/Optuna")
    parser.add_argument(
        "--peers-python",
        default=str(REPO / ".venv-peers" / "bin" / "python"),
        help="python of the venv with ray[tune] and optuna (default .venv-peers)",
    )
    parser.add_argument("--json", metavar="OUT", default=None, help="write all figures here")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per case")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--case", choices=("overhead", "throughput"), default="overhead", help=argparse.SUPPRESS
    )
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trials is None:
        args.trials = 100 if args.quick else 1000
    if args.throughput_reports is None:
        args.throughput_reports = 20_000 if args.quick else 200_000
    for name in ("trials", "reports", "concurrency", "throughput_reports"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def _machine() -> dict[str, Any]:
    return {
        "platform": f"{platform.system()} {platform.machine()}",
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def filesystem_cost(folder: Path, n: int = 200) -> dict[str, float]:
    """CPU microseconds to make a folder, and to create a file in it, on `folder`'s
    filesystem (the mean of `n`: the rare slow ones count, as they do in a run). Each
    trivial trial makes one folder and two log files (its stdout and stderr), as in every
    framework that keeps a folder per trial, so two machines' figures differ by these."""
    probe = folder / "filesystem-probe"
    probe.mkdir()
    made: list[float] = []
    created: list[float] = []
    try:
        for i in range(n):
            started = time.process_time()
            (probe / str(i)).mkdir()
            middle = time.process_time()
            os.close(os.open(probe / str(i) / "stdout.log", os.O_WRONLY | os.O_CREAT, 0o644))
            made.append(middle - started)
            created.append(time.process_time() - middle)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return {
        "mkdir_us": round(statistics.fmean(made) * 1e6, 1),
        "create_us": round(statistics.fmean(created) * 1e6, 1),
    }


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return _child_main(args)

    src = str(REPO / "src")
    pythonpath = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    report: dict[str, Any] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": _machine(),
        "workload": {
            "trials": args.trials,
            "reports": args.reports,
            "concurrency": args.concurrency,
            "throughput_reports": args.throughput_reports,
            "throughput_max_s": args.throughput_max_s,
        },
        "tunefleet": {},
        "peers": {},
    }
    peers_python = Path(args.peers_python)
    run_peers = not args.skip_peers and peers_python.exists()
    if not args.skip_peers and not run_peers:
        report["peers_note"] = (
            f"Peers not run: no {peers_python} (create it with `make bench-peers`)."
        )

    with tempfile.TemporaryDirectory(prefix="tunefleet-bench-") as tmp:
        report["machine"]["filesystem"] = filesystem_cost(Path(tmp))
        jobs: list[tuple[str, str, list[str], dict[str, str], dict[str, Any]]] = [
            (
                sys.executable,
                "tunefleet",
                [str(Path(__file__).resolve()), "--child"],
                {"PYTHONPATH": pythonpath},
                report["tunefleet"],
            )
        ]
        if run_peers:
            for key, _label, script in PEERS:
                report["peers"][key] = {}
                jobs.append((str(peers_python), key, [str(script)], {}, report["peers"][key]))
        for python, name, command, env, into in jobs:
            for case in ("overhead", "throughput"):
                what = (
                    f"{args.trials:,} trials x {args.reports} reports, {args.concurrency} at a time"
                    if case == "overhead"
                    else f"1 trial x {args.throughput_reports:,} reports"
                )
                _log(f"[bench] {name}: {case} ({what}) ...")
                started = time.time()
                workdir = Path(tmp, f"{name}-{case}")
                into[case] = run_case(
                    python,
                    Path(command[0]),
                    case,
                    args,
                    workdir,
                    extra=command[1:],
                    env_extra=env,
                )
                status = "FAILED" if "error" in into[case] else "done"
                _log(f"[bench] {name}: {case} {status} in {time.time() - started:.1f} s")

    print(format_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        print(f"\nAll figures written to {args.json}")
    failed = "error" in report["tunefleet"].get("overhead", {}) or "error" in report[
        "tunefleet"
    ].get("throughput", {})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
