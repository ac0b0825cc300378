"""What a checkpoint costs the trial: the seconds spent inside ``report()``.

A function trainable writes an ``MB``-sized file into a folder each epoch, sleeps
``--epoch-s`` (its training, on a GPU: no CPU taken) and reports the folder as its
checkpoint; it times each ``report()`` call. Cases, for each size of ``--sizes``
(default 100,400 MB), ``--reports`` reports each (default 5):

- **Ray's style**: the folder is a ``tempfile.TemporaryDirectory()`` handed to
  ``Checkpoint.from_directory``: tunefleet hard-links its files (same filesystem) and
  hashes, fsyncs and renames in the background.
- **zero-copy**: the folder is ``tune.get_context().new_checkpoint_dir()``, renamed
  into place.
- **other filesystem** (if ``/dev/shm`` is one): the temporary folder is there, so the
  files are copied, once; the rest is in the background.
- **before**: `persist_checkpoint` called in the trial's place (copy, hash, fsync,
  manifest, rename: what ``report()`` did before issue 18), timed directly.
- **Ray Tune** (if ``.venv-peers`` has Ray, or ``--peers-python``): the same trainable
  in Ray's style, with ``ray.tune.report`` (``benchmarks/peers/ray_tune_checkpoint.py``).

It prints the median and the maximum seconds inside ``report()`` of each case.

    .venv/bin/python benchmarks/checkpoint_cost.py [--sizes 100,400] [--reports 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS_PYTHON = HERE.parent / ".venv-peers" / "bin" / "python"


def training_loop(
    report: Callable[..., None],
    checkpoint_from: Callable[[str], Any],
    folder_for: Callable[[], Any],
    config: dict[str, Any],
) -> None:
    """The trainable's body, shared with the Ray Tune peer (standard library only):
    `folder_for()` is a context manager giving the folder of each epoch's checkpoint."""
    payload = os.urandom(1 << 20) * int(config["mb"])
    times = []
    for epoch in range(int(config["reports"])):
        time.sleep(float(config["epoch_s"]))  # training on a GPU
        with folder_for() as folder:
            with open(os.path.join(folder, "model.pt"), "wb") as f:
                f.write(payload)
            started = time.perf_counter()
            report({"epoch": epoch}, checkpoint=checkpoint_from(folder))
            times.append(time.perf_counter() - started)
    with open(config["out"], "a") as f:
        f.write(json.dumps({"case": config["case"], "mb": config["mb"], "times": times}) + "\n")


def tunefleet_trainable(config: dict[str, Any]) -> None:
    import tunefleet as tune

    folder_for: Callable[[], Any]
    if config["case"] == "zero-copy":
        folder_for = lambda: contextlib.nullcontext(tune.get_context().new_checkpoint_dir())  # noqa: E731
    elif config["case"] == "other filesystem":
        folder_for = lambda: tempfile.TemporaryDirectory(dir="/dev/shm")  # noqa: E731
    else:
        folder_for = tempfile.TemporaryDirectory
    training_loop(tune.report, tune.Checkpoint.from_directory, folder_for, config)


def run_tunefleet(case: str, mb: int, args: argparse.Namespace, work: str, out: str) -> None:
    import tunefleet as tune

    config = {"case": case, "mb": mb, "reports": args.reports, "epoch_s": args.epoch_s}
    tune.Tuner(
        tunefleet_trainable,
        param_space={**config, "out": out},
        run_config=tune.RunConfig(
            storage_path=work,
            name=f"{case.replace(' ', '_')}_{mb}",
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        ),
    ).fit()


def run_before(mb: int, args: argparse.Namespace, work: str, out: str) -> None:
    from tunefleet.storage.checkpoint import persist_checkpoint
    from tunefleet.storage.retention import delete_checkpoints

    def report(metrics: dict[str, Any], checkpoint: str) -> None:
        report.n += 1  # type: ignore[attr-defined]
        path = persist_checkpoint(checkpoint, os.path.join(work, "before"), report.n)  # type: ignore[attr-defined]
        delete_checkpoints([path])

    report.n = 0  # type: ignore[attr-defined]
    config = {"case": "before", "mb": mb, "reports": args.reports, "epoch_s": args.epoch_s}
    training_loop(report, str, tempfile.TemporaryDirectory, {**config, "out": out})


def run_ray(python: Path, args: argparse.Namespace, work: str, out: str) -> str | None:
    cmd = [str(python), str(HERE / "peers" / "ray_tune_checkpoint.py"), "--sizes", args.sizes]
    cmd += ["--reports", str(args.reports), "--epoch-s", str(args.epoch_s)]
    cmd += ["--storage", os.path.join(work, "ray"), "--out", out]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return None
    return proc.stdout.strip().splitlines()[-1]  # the version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,400", help="checkpoint sizes in MB, e.g. 100,400")
    parser.add_argument("--reports", type=int, default=5, help="checkpoints reported per case")
    parser.add_argument("--epoch-s", type=float, default=1.0, help="training between reports")
    parser.add_argument("--skip-peers", action="store_true", help="do not run Ray Tune")
    parser.add_argument("--peers-python", type=Path, default=PEERS_PYTHON)
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: a comma-separated list of whole MB, e.g. 100,400")
    if any(s < 1 for s in sizes) or args.reports < 1 or args.epoch_s < 0:
        parser.error("--sizes and --reports must be >= 1, --epoch-s >= 0")

    cases = ["Ray's style", "zero-copy"]
    if (
        os.path.isdir("/dev/shm")
        and os.stat("/dev/shm").st_dev != os.stat(tempfile.gettempdir()).st_dev
    ):
        cases.append("other filesystem")
    ray_version = None
    with tempfile.TemporaryDirectory(prefix="checkpoint_cost_") as work:
        out = os.path.join(work, "times.jsonl")
        for mb in sizes:
            run_before(mb, args, work, out)
            for case in cases:
                run_tunefleet(case, mb, args, work, out)
        if not args.skip_peers and args.peers_python.exists():
            ray_version = run_ray(args.peers_python, args, work, out)
        rows = [json.loads(line) for line in Path(out).read_text().splitlines()]

    label = {"before": "tunefleet before (copy+hash+fsync in report)"}
    label["Ray Tune"] = f"Ray Tune {ray_version or ''}".strip()
    print(f"{args.reports} reports per case, {args.epoch_s:g} s between; load {_load()}")
    print(f"{'case':46} {'MB':>5} {'median (ms)':>12} {'max (ms)':>9}")
    for row in rows:
        name = label.get(row["case"], f"tunefleet {row['case']}")
        times = row["times"]
        print(
            f"{name:46} {row['mb']:5} {1000 * statistics.median(times):12.1f} "
            f"{1000 * max(times):9.1f}"
        )


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
