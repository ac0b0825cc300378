#!/bin/sh
# A checkpoint line attaches a folder (its own, then TUNEFLEET_CHECKPOINT_DIR) to the next report.
mkdir -p mine && echo 1 > mine/a
echo 'tunefleet-checkpoint: {"path": "mine"}'
echo 'tunefleet-report: {"loss": 1}'
echo 2 > "$TUNEFLEET_CHECKPOINT_DIR/b"
echo 'tunefleet-checkpoint: {}'
echo 'tunefleet-report: {"loss": 0.5}'
