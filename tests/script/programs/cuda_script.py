"""A script for `tunefleet run` on a real GPU: multiplies a matrix on the device it sees
and reports which device that was (config as --key value arguments)."""

import argparse
import json
import os

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--size", type=int, required=True)
args = parser.parse_args()

x = torch.randn(args.size, args.size, device="cuda")
props = torch.cuda.get_device_properties(0)
report = {
    "loss": float((x @ x).norm()) / args.size,
    "uuid": str(props.uuid),
    "device_count": torch.cuda.device_count(),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
}
print("tunefleet-report: " + json.dumps(report))
