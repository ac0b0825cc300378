"""Reports by printing tagged lines; the config arrives as --key value arguments."""

import argparse
import json

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--layers", type=int, default=1)
parser.add_argument("--act", default="relu")
parser.add_argument("--epochs", type=int, default=5)
args = parser.parse_args()

for epoch in range(args.epochs):
    val_loss = abs(args.lr - 0.01) * 10 + args.layers / 100 + 1.0 / (epoch + 1)
    print(f"epoch {epoch}: val_loss {val_loss:.4f}")
    print("tunefleet-report: " + json.dumps({"val_loss": val_loss, "epoch": epoch}))
