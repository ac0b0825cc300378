"""The checkpoint-cost workload of ``benchmarks/checkpoint_cost.py``, run with Ray Tune.

Run by ``checkpoint_cost.py`` with the peer virtual environment's Python
(``.venv-peers``); Ray is never a tunefleet dependency. The same trainable body
(``checkpoint_cost.training_loop``) in Ray's documented style: each epoch's checkpoint
is written into a ``tempfile.TemporaryDirectory()`` and handed to
``ray.tune.report(..., checkpoint=ray.tune.Checkpoint.from_directory(d))``; each
report's seconds are appended to ``--out``. One trial per size, ``num_to_keep=1``,
local storage. It prints Ray's version last.

    .venv-peers/bin/python benchmarks/peers/ray_tune_checkpoint.py --storage DIR --out FILE
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import checkpoint_cost
import ray
from ray import tune


def trainable(config: dict[str, Any]) -> None:
    checkpoint_cost.training_loop(
        tune.report, tune.Checkpoint.from_directory, tempfile.TemporaryDirectory, config
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,400")
    parser.add_argument("--reports", type=int, default=5)
    parser.add_argument("--epoch-s", type=float, default=1.0)
    parser.add_argument("--storage", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ray.cloudpickle.register_pickle_by_value(checkpoint_cost)  # workers need not import it
    ray_tmp = tempfile.mkdtemp(prefix="rt")  # its own Ray, never one already running here
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=ray_tmp,
    )
    for mb in (int(s) for s in args.sizes.split(",")):
        config = {"case": "Ray Tune", "mb": mb, "reports": args.reports}
        tune.Tuner(
            trainable,
            param_space={**config, "epoch_s": args.epoch_s, "out": args.out},
            run_config=tune.RunConfig(
                storage_path=args.storage,
                name=f"ray_{mb}",
                verbose=0,
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            ),
        ).fit()
    ray.shutdown()
    shutil.rmtree(ray_tmp, ignore_errors=True)
    print(ray.__version__)


if __name__ == "__main__":
    main()
