"""`Checkpoint` and `CheckpointWriteError`, where Ray Tune users look for them.

The code lives in `tunefleet.storage.checkpoint` (writing, verifying and restoring
checkpoints, locally and remotely).
"""

from tunefleet.storage.checkpoint import Checkpoint, CheckpointWriteError

__all__ = ["Checkpoint", "CheckpointWriteError"]
