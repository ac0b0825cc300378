"""What a verified checkpoint costs against a plain durable copy of the same bytes.

`persist_checkpoint` copies a trial's checkpoint folder into storage, hashes every
file while it copies, fsyncs, writes the manifest and renames the folder into place.
This benchmark writes a ``--mb`` MB file (default 100) both ways ``--runs`` times
(default 5): a plain copy with one fsync, and `persist_checkpoint`, and prints the
minimum and median of each and their ratio (1.0: the checks cost nothing). It was a
timed assertion in the tests; a shared machine made it flaky there.

    .venv/bin/python benchmarks/checkpoint_cost.py [--mb N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from tunefleet.storage.checkpoint import persist_checkpoint
from tunefleet.storage.retention import delete_checkpoints


def durable_copy(source: Path, target: Path) -> None:
    target.mkdir()
    with open(source, "rb") as fin, open(target / source.name, "wb") as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the checkpoint's file")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.mb < 1 or args.runs < 1:
        parser.error("--mb and --runs must be >= 1")

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "src")
        folder.mkdir()
        model = folder / "model.pt"
        model.write_bytes(os.urandom(args.mb << 20))
        copy_s: list[float] = []
        persist_s: list[float] = []
        for i in range(args.runs):  # interleaved, so a drift of the machine hits both
            started = time.perf_counter()
            durable_copy(model, Path(tmp, f"copy{i}"))
            copy_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            path = persist_checkpoint(str(folder), str(Path(tmp, "trial")), i + 1)
            persist_s.append(time.perf_counter() - started)
            delete_checkpoints([path])
            (Path(tmp, f"copy{i}") / model.name).unlink()

    print(f"{args.mb} MB, {args.runs} runs each, interleaved")
    print(f"{'':24} {'min (s)':>8} {'median (s)':>11}")
    for name, times in (("copy + fsync", copy_s), ("persist_checkpoint", persist_s)):
        print(f"{name:24} {min(times):8.3f} {statistics.median(times):11.3f}")
    ratio = statistics.median(persist_s) / statistics.median(copy_s)
    print(f"persist_checkpoint / copy (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
