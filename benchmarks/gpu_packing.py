"""What sharing a GPU gains: small PyTorch LSTM trials at ``gpu=1/K`` against raw processes.

For each hidden size of ``--hidden`` (default 128,512) and each K of ``--ks`` (default
1,2,4,8,16), K copies of the same small LSTM training loop run on one GPU:

- **raw**: K plain Python processes (this script with ``--raw-worker``), no framework;
- **tunefleet**: K trials of ``tune.with_resources(train, {"cpu": ..., "gpu": 1/K})``.

Every copy initialises CUDA and trains one warm-up epoch, then waits until all K have
(a barrier in a folder), then trains ``--epochs`` epochs; aggregate epochs per second is
all copies' timed epochs over the span from the first timed start to the last end, so
process and CUDA start-up count in neither. The gain at K is throughput(K) /
throughput(1) of the same kind; the issue's target is a tunefleet gain of at least 80 %
of the raw gain at every K. ``--auto N`` also runs N trials with ``{"gpu": "auto"}``
and prints the K it chose and its throughput over the whole run (start-up included).

Needs an NVIDIA GPU and torch; elsewhere it exits with status 2 and says so.

    .venv/bin/python benchmarks/gpu_packing.py [--hidden 128,512] [--ks 1,2,4,8,16]
        [--epochs 20] [--auto 32] [--out gpu_packing.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BATCHES, BATCH, SEQ, FEATURES = 40, 64, 50, 32  # one epoch


def no_gpu_reason() -> str | None:
    """Why this machine cannot run the benchmark, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install torch)"
    if not torch.cuda.is_available():
        return "no NVIDIA GPU is visible here (torch.cuda.is_available() is False)"
    return None


def train(config: dict[str, Any]) -> dict[str, float]:
    """K copies of this run at once: warm up, meet, then time `epochs` epochs."""
    import torch

    torch.manual_seed(0)
    device = torch.device("cuda")
    hidden = int(config["hidden"])
    lstm = torch.nn.LSTM(FEATURES, hidden, num_layers=2, batch_first=True).to(device)
    head = torch.nn.Linear(hidden, 1).to(device)
    params = [*lstm.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    x = torch.randn(BATCHES, BATCH, SEQ, FEATURES, device=device)
    y = torch.randn(BATCHES, BATCH, 1, device=device)

    def epoch() -> float:
        total = torch.zeros((), device=device)
        for i in range(BATCHES):
            out, _ = lstm(x[i])
            loss = torch.nn.functional.mse_loss(head(out[:, -1]), y[i])
            opt.zero_grad(set_to_none=True)
            torch.autograd.backward(loss)
            opt.step()
            total += loss.detach()
        return float(total) / BATCHES  # synchronises

    epoch()  # warm-up: cuDNN plans, the allocator's cache
    barrier = Path(config["barrier"])
    (barrier / str(os.getpid())).touch()
    deadline = time.monotonic() + 600
    while len(os.listdir(barrier)) < int(config["k"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.time()
    loss = 0.0
    for _ in range(int(config["epochs"])):
        loss = epoch()
    return {"start": start, "end": time.time(), "epochs": float(config["epochs"]), "loss": loss}


def tunefleet_trial(config: dict[str, Any]) -> None:
    import tunefleet as tune

    tune.report(train(config))


def throughput(runs: list[dict[str, float]]) -> float:
    """Aggregate epochs per second of copies that ran at once."""
    span = max(r["end"] for r in runs) - min(r["start"] for r in runs)
    return sum(r["epochs"] for r in runs) / span


def run_raw(k: int, hidden: int, epochs: int) -> float:
    with tempfile.TemporaryDirectory() as barrier:
        config = {"hidden": hidden, "epochs": epochs, "k": k, "barrier": barrier}
        cmd = [sys.executable, __file__, "--raw-worker", json.dumps(config)]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE) for _ in range(k)]
        outs = [p.communicate()[0] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit(f"a raw worker failed (hidden={hidden}, K={k})")
        return throughput([json.loads(out.splitlines()[-1]) for out in outs])


def run_tunefleet(k: int, hidden: int, epochs: int, storage: str) -> float:
    import tunefleet as tune

    cpus = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as barrier:
        grid = tune.Tuner(
            tune.with_resources(tunefleet_trial, {"cpu": min(1.0, cpus / k), "gpu": 1 / k}),
            param_space={"hidden": hidden, "epochs": epochs, "k": k, "barrier": barrier},
            tune_config=tune.TuneConfig(num_samples=k),
            run_config=tune.RunConfig(
                storage_path=storage, name=f"k{k}-h{hidden}", verbose=0, resources={"gpu": 1}
            ),
        ).fit()
    if grid.errors:
        raise SystemExit(f"tunefleet trials failed (hidden={hidden}, K={k}): {grid.errors}")
    return throughput([r.metrics for r in grid])


def run_auto(trials: int, hidden: int, epochs: int, storage: str) -> dict[str, Any]:
    """`trials` trials with gpu="auto": the K chosen and the whole run's epochs/s."""
    import tunefleet as tune

    with tempfile.TemporaryDirectory() as barrier:
        started = time.time()
        grid = tune.Tuner(
            tune.with_resources(tunefleet_trial, {"cpu": 1, "gpu": "auto"}),
            param_space={"hidden": hidden, "epochs": epochs, "k": 1, "barrier": barrier},
            tune_config=tune.TuneConfig(num_samples=trials),
            run_config=tune.RunConfig(
                storage_path=storage, name=f"auto-h{hidden}", verbose=0, resources={"gpu": 1}
            ),
        ).fit()
        wall = time.time() - started
    if grid.errors:
        raise SystemExit(f"gpu='auto' trials failed (hidden={hidden}): {grid.errors}")
    spans = [(r.metrics["start"], r.metrics["end"]) for r in grid]
    most = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    return {"trials_at_once": most, "epochs_per_s": trials * epochs / wall}


def machine() -> dict[str, Any]:
    """The GPU, torch, the CPUs and the load average, beside every figure."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "gpu_mb": round(props.total_memory / 2**20),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", default="128,512")
    parser.add_argument("--ks", default="1,2,4,8,16")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--auto", type=int, default=0, help="trials of a gpu='auto' run")
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    parser.add_argument("--raw-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw_worker is not None:
        print(json.dumps(train(json.loads(args.raw_worker))))
        return 0
    reason = no_gpu_reason()
    if reason is not None:
        print(f"gpu_packing.py needs an NVIDIA GPU with torch: {reason}.", file=sys.stderr)
        return 2
    ks = [int(k) for k in args.ks.split(",")]
    figures: list[dict[str, Any]] = [{"machine": machine()}]
    print(figures[0]["machine"], flush=True)

    def keep(row: dict[str, Any]) -> None:  # written at each row: a cut-off run keeps some
        figures.append(row)
        if args.out:
            Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")

    with tempfile.TemporaryDirectory() as storage:
        for hidden in (int(h) for h in args.hidden.split(",")):
            base: dict[str, float] = {}
            for k in ks:
                row: dict[str, Any] = {"hidden": hidden, "k": k}
                row["raw"] = run_raw(k, hidden, args.epochs)
                row["tunefleet"] = run_tunefleet(k, hidden, args.epochs, storage)
                base = base or {"raw": row["raw"], "tunefleet": row["tunefleet"]}
                row["raw_gain"] = row["raw"] / base["raw"]
                row["tunefleet_gain"] = row["tunefleet"] / base["tunefleet"]
                row["of_raw_gain"] = row["tunefleet_gain"] / row["raw_gain"]
                keep(row)
                print(
                    f"hidden {hidden:4d}  K={k:2d}  raw {row['raw']:7.2f} ep/s "
                    f"(x{row['raw_gain']:.2f})  tunefleet {row['tunefleet']:7.2f} ep/s "
                    f"(x{row['tunefleet_gain']:.2f})  = {100 * row['of_raw_gain']:.0f}% "
                    "of the raw gain",
                    flush=True,
                )
            if args.auto:
                auto = run_auto(args.auto, hidden, args.epochs, storage)
                keep({"hidden": hidden, "auto": auto})
                print(f"hidden {hidden:4d}  gpu='auto' ({args.auto} trials): {auto}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
