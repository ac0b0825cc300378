"""Where an experiment's files live: local or remote storage, checkpoints, retention, paths.

Private to tunefleet; users meet `Checkpoint` as `tunefleet.Checkpoint`.
"""
