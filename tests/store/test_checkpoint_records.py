"""A checkpoint folder written again (a rewind, a PBT exploit) has one record: the new one."""

from __future__ import annotations

from pathlib import Path

from tunefleet.store import ExperimentStore


def test_a_path_written_again_replaces_its_record(tmp_path: Path) -> None:
    with ExperimentStore(tmp_path / "exp") as store:
        store.add_checkpoint("t1", 2, "/x/checkpoint_000002", {"acc": 0.1})
        store.flush()
        # An exploit copies another trial's checkpoint into the same folder name.
        store.add_checkpoint("t1", 2, "/x/checkpoint_000002", {"acc": 0.9})
        store.add_checkpoint("t1", 4, "/x/checkpoint_000004", {"acc": 1.0})
        assert store.checkpoints_of("t1") == [
            ("/x/checkpoint_000004", 4, {"acc": 1.0}),
            ("/x/checkpoint_000002", 2, {"acc": 0.9}),
        ]


def test_deleted_then_written_again_in_one_flush_keeps_the_new_record(tmp_path: Path) -> None:
    with ExperimentStore(tmp_path / "exp") as store:
        store.add_checkpoint("t1", 3, "/x/checkpoint_000003", {"acc": 0.2})
        store.flush()
        store.mark_checkpoint_deleted("/x/checkpoint_000003")  # a rewind drops it...
        store.add_checkpoint("t1", 3, "/x/checkpoint_000003", {"acc": 0.3})  # ...then rewritten
        assert store.checkpoints_of("t1") == [("/x/checkpoint_000003", 3, {"acc": 0.3})]
        store.mark_checkpoint_deleted("/x/checkpoint_000003")  # retention, later
        assert store.checkpoints_of("t1") == []
