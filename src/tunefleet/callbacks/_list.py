"""`CallbackList`: Ray's ``ray.tune.callback.CallbackList``, several callbacks as one.

Every hook is passed on to each callback in order. The callbacks' states (what their
`get_state` returns) are saved together in one file of a directory and read back.
"""

from __future__ import annotations

import glob
import os
import pickle
from collections.abc import Iterable
from typing import Any

from tunefleet.callbacks._base import Callback

_HOOKS = (
    "setup",
    "on_step_begin",
    "on_step_end",
    "on_trial_start",
    "on_trial_restore",
    "on_trial_save",
    "on_trial_result",
    "on_trial_complete",
    "on_trial_error",
    "on_trial_recover",
    "on_checkpoint",
    "on_experiment_end",
)


class CallbackList(Callback):
    """Several callbacks that act as one; each hook calls every callback in turn.

    Example:
        >>> callbacks = CallbackList([Callback(), Callback()])
        >>> callbacks.on_step_begin(iteration=0, trials=[])
        >>> len(callbacks)
        2
    """

    CKPT_FILE_TMPL = "callback-states-{}.pkl"

    def __init__(self, callbacks: Iterable[Callback]) -> None:
        listed = list(callbacks)
        for i, callback in enumerate(listed):
            if not isinstance(callback, Callback):
                raise TypeError(
                    f"CallbackList: callbacks[{i}]={callback!r} is a "
                    f"{type(callback).__name__}, not a tune.Callback"
                )
        self._callbacks = listed

    def __len__(self) -> int:
        return len(self._callbacks)

    def __getitem__(self, index: int) -> Callback:
        return self._callbacks[index]

    def _each(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for callback in self._callbacks:
            getattr(callback, hook)(*args, **kwargs)

    def get_state(self) -> dict[str, Any] | None:
        """``{index: state}`` of the callbacks that keep a state (None: none does)."""
        states = {i: c.get_state() for i, c in enumerate(self._callbacks)}
        kept = {str(i): s for i, s in states.items() if s is not None}
        return kept or None

    def set_state(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            index = int(key)
            if not 0 <= index < len(self._callbacks):
                raise ValueError(
                    f"CallbackList.set_state: the state is for callback {index}, but the "
                    f"list has {len(self._callbacks)} callbacks"
                )
            self._callbacks[index].set_state(value)

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        """Write the callbacks' states to `checkpoint_dir` (nothing when none keeps one)."""
        state = self.get_state()
        if state is None:
            return
        path = os.path.join(checkpoint_dir, self.CKPT_FILE_TMPL.format(session_str))
        with open(path + ".tmp", "wb") as f:
            pickle.dump(state, f)
        os.replace(path + ".tmp", path)

    def _latest(self, checkpoint_dir: str) -> str | None:
        found = glob.glob(os.path.join(checkpoint_dir, self.CKPT_FILE_TMPL.format("*")))
        return max(found, key=os.path.getmtime) if found else None

    def can_restore(self, checkpoint_dir: str) -> bool:
        """Whether `checkpoint_dir` holds states written by `save_to_dir`."""
        return self._latest(checkpoint_dir) is not None

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """Give each callback the state `save_to_dir` wrote (RuntimeError: none there)."""
        path = self._latest(checkpoint_dir)
        if path is None:
            raise RuntimeError(
                f"CallbackList.restore_from_dir: no callback state in {checkpoint_dir!r} "
                f"(no {self.CKPT_FILE_TMPL.format('*')} file)"
            )
        with open(path, "rb") as f:
            self.set_state(pickle.load(f))


def _forward(hook: str) -> Any:
    def call(self: CallbackList, *args: Any, **kwargs: Any) -> None:
        self._each(hook, *args, **kwargs)

    call.__name__ = call.__qualname__ = hook
    call.__doc__ = f"Call ``{hook}`` of every callback, in order."
    return call


for _hook in _HOOKS:
    setattr(CallbackList, _hook, _forward(_hook))
