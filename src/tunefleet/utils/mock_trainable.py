"""`MyTrainableClass`: the toy trainable Ray Tune's examples and docs use.

Its "reward" follows a fixed curve, ``height * tanh(t / width)`` at step ``t``, so a
search over ``width`` and ``height`` has a known best (the largest height, the
smallest width) and runs in microseconds per step.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from typing import Any

from tunefleet.trainable import Trainable

__all__ = ["MyTrainableClass"]

_FILE = "checkpoint"


class MyTrainableClass(Trainable):
    """A class trainable whose ``episode_reward_mean`` rises as ``height * tanh(t / width)``.

    Config keys (both optional, default 1): ``width``, how slowly the curve rises
    (> 0), and ``height``, the value it approaches. Each step reports
    ``episode_reward_mean`` and ``timesteps_total`` (the step count). Checkpoints
    hold the step count, so a restored trial continues its curve.

    Example:
        >>> t = MyTrainableClass({"width": 2, "height": 10})
        >>> round(t.step()["episode_reward_mean"], 3)
        4.621
    """

    def setup(self, config: dict[str, Any], **params: Any) -> None:
        for key in ("width", "height"):
            value = config.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"MyTrainableClass: config[{key!r}]={value!r} must be a number")
        if config.get("width", 1) == 0:
            raise ValueError("MyTrainableClass: config['width']=0 must not be 0")
        self.timestep = 0

    def step(self) -> dict[str, Any]:
        self.timestep += 1
        width = float(self.config.get("width", 1))
        height = float(self.config.get("height", 1))
        reward = math.tanh(self.timestep / width) * height
        return {"episode_reward_mean": reward, "timesteps_total": self.timestep}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | None:
        with open(os.path.join(checkpoint_dir, _FILE), "w", encoding="utf-8") as f:
            json.dump({"timestep": self.timestep}, f)
        return None

    def load_checkpoint(self, checkpoint: dict[str, Any] | str | None) -> None:
        if isinstance(checkpoint, dict):
            self.timestep = int(checkpoint["timestep"])
            return
        if checkpoint is None:
            raise ValueError("MyTrainableClass: load_checkpoint got no checkpoint")
        path = os.path.join(checkpoint, _FILE) if os.path.isdir(checkpoint) else checkpoint
        with open(path, encoding="utf-8") as f:
            self.timestep = int(json.load(f)["timestep"])
