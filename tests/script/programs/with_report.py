"""Reports with tunefleet.report, checkpoints into a temporary folder, resumes from one."""

import json
import os
import sys
import tempfile

import tunefleet

config = json.loads(os.environ["TUNEFLEET_CONFIG"])
with open(os.environ["TUNEFLEET_CONFIG_FILE"]) as f:
    assert json.load(f) == config
start = 0
checkpoint = tunefleet.get_checkpoint()
if checkpoint is not None:
    with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
        start = json.load(f)["epoch"] + 1
for epoch in range(start, 6):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"epoch": epoch}, f)
        tunefleet.report(
            {"score": config["x"] * (epoch + 1), "epoch": epoch, "start": start},
            checkpoint=tunefleet.Checkpoint.from_directory(d),
        )
    # the first attempt of each trial crashes after its checkpoint of epoch 2
    if epoch == 2 and checkpoint is None and config.get("crash_once"):
        print("simulated crash", file=sys.stderr)
        sys.exit(3)
