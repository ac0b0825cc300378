"""What SIGKILLing the driver again and again costs: total run time vs one clean run.

The workload: 4 trials x 30 iterations of 0.1 s, 2 at a time, each checkpointing
every iteration (about 6 s of trial time when nothing goes wrong). First it runs
once uninterrupted. Then, for each seed, a driver runs it with
``tune.run(..., resume="AUTO")`` and is SIGKILLed after a random 0.7-1.8 s, again
and again, until a driver finishes on its own. Printed per seed: the number of
kills, the sum of all the drivers' wall times (Python start and import included,
as a user restarting a job pays them) and its ratio to the uninterrupted run. The
issue's target is a ratio of at most 1.5 with kills every one to two seconds.

Each finished experiment is checked: every trial TERMINATED with iterations
1..30 recorded exactly once.

    .venv/bin/python benchmarks/chaos_resume.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ITERATIONS = 30
DRIVER = textwrap.dedent(
    """
    import os, sys, tempfile, time
    from pathlib import Path
    import tunefleet as tune

    def train(config):
        start = 0
        if (ckpt := tune.get_checkpoint()) is not None:
            with ckpt.as_directory() as d:
                start = int(Path(d, "i").read_text())
        for i in range(start, {iterations}):
            time.sleep(0.1)
            with tempfile.TemporaryDirectory() as d:
                Path(d, "i").write_text(str(i + 1))
                tune.report({{"i": i + 1}}, checkpoint=tune.Checkpoint.from_directory(d))

    if __name__ == "__main__":
        tune.run(train, config={{"x": tune.uniform(0, 1)}}, num_samples=4,
                 max_concurrent_trials=2, storage_path=sys.argv[1], name="chaos",
                 resume="AUTO", keep_checkpoints_num=2, verbose=0)
    """
)


def run_until_done(storage: str, script: Path, rng: random.Random | None) -> tuple[float, int]:
    """(sum of driver wall times, kills) until a driver ends by itself."""
    total, kills = 0.0, 0
    while True:
        start = time.perf_counter()
        driver = subprocess.Popen(
            [sys.executable, str(script), storage],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _, err = driver.communicate(timeout=rng.uniform(0.7, 1.8) if rng else None)
        except subprocess.TimeoutExpired:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.communicate()
            total += time.perf_counter() - start
            kills += 1
            continue
        total += time.perf_counter() - start
        if driver.returncode != 0:
            raise SystemExit(f"driver failed:\n{err.decode(errors='replace')[-3000:]}")
        return total, kills


def check(storage: str) -> None:
    from tunefleet.store import StoreReader

    with StoreReader(Path(storage, "chaos")) as reader:
        trials = reader.trials()
        assert len(trials) == 4, f"{len(trials)} trials, expected 4"
        for trial in trials:
            assert trial.status.value == "TERMINATED", trial.status
            its = [r["training_iteration"] for r in reader.results(trial.trial_id)]
            assert its == list(range(1, ITERATIONS + 1)), (trial.trial_id, its)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "driver.py")
        script.write_text(DRIVER.format(iterations=ITERATIONS))
        clean, _ = run_until_done(str(Path(tmp, "clean")), script, None)
        check(str(Path(tmp, "clean")))
        print(f"uninterrupted run: {clean:.2f} s")
        print(f"{'seed':>5} {'kills':>6} {'total (s)':>10} {'ratio':>6}")
        for seed in range(1, args.seeds + 1):
            storage = str(Path(tmp, f"seed{seed}"))
            total, kills = run_until_done(storage, script, random.Random(seed))
            check(storage)
            print(f"{seed:>5} {kills:>6} {total:>10.2f} {total / clean:>6.2f}")


if __name__ == "__main__":
    main()
