"""Trainables shared by the resume tests and the driver processes they start and kill."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import tunefleet as tune
from tests.helpers.processes import claim

ITERATIONS = 30


def counting(config: dict[str, Any]) -> None:
    """Checkpoints every iteration; resumes from its checkpoint; `fail_at` fails once."""
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = int(Path(d, "i").read_text())
    flag = config.get("fail_flag")
    for i in range(start, config.get("iterations", ITERATIONS)):
        time.sleep(config.get("pause", 0.03))
        if flag and i == config.get("fail_at") and claim(flag):
            raise RuntimeError(f"planned failure at iteration {i}")
        with tempfile.TemporaryDirectory() as d:
            Path(d, "i").write_text(str(i + 1))
            tune.report(
                {"score": config["x"] * (i + 1), "i": i + 1},
                checkpoint=tune.Checkpoint.from_directory(d),
            )


def needs_secrets(config: dict[str, Any]) -> None:
    """Fails once (flag file), and insists on the real secret values every time."""
    if (config["api_key"], config["db_url"], config["token"]) != (
        "CANARY-AK-1",
        "postgresql://u:CANARY-PW-2@localhost/db",
        "CANARY-TOK-3",
    ):
        raise ValueError("the trial did not get its real secrets")
    tune.report(score=1.0)
    if claim(config["flag"]):
        raise RuntimeError("planned failure")
    tune.report(score=2.0)


class Stepper(tune.Trainable):
    """A class trainable that checkpoints its step count (every iteration in the tests)."""

    def setup(self, config: dict[str, Any], **params: Any) -> None:
        self.steps = 0

    def step(self) -> dict[str, Any]:
        self.steps += 1
        return {"score": float(self.steps), "steps": self.steps}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "steps").write_text(str(self.steps))

    def load_checkpoint(self, checkpoint_dir: dict[str, Any] | str | None) -> None:
        assert isinstance(checkpoint_dir, str)  # save_checkpoint wrote files, returned None
        self.steps = int(Path(checkpoint_dir, "steps").read_text())
