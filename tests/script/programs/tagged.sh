#!/usr/bin/env bash
# A shell script: config from TUNEFLEET_CONFIG_FILE (--config-style json), reports as
# tagged lines, a checkpoint in TUNEFLEET_CHECKPOINT_DIR, waiting for the acknowledgement.
set -euo pipefail
width=$(sed -E 's/.*"width": *([0-9]+).*/\1/' "$TUNEFLEET_CONFIG_FILE")
start=0
if [[ -n "${TUNEFLEET_RESTORE_DIR:-}" ]]; then
  start=$(cat "$TUNEFLEET_RESTORE_DIR/step")
fi
for ((step = start + 1; step <= 4; step++)); do
  echo "$step" > "$TUNEFLEET_CHECKPOINT_DIR/step"
  echo "tunefleet-report: {\"loss\": $((100 / width + step)), \"step\": $step, \"checkpoint\": true}"
  read -r ack <&"$TUNEFLEET_ACK_FD"
  echo "acknowledged: $ack"
done
