"""Reports a loss that depends on --q; a stopped run must really end, its child too.

It starts a sleeping child process, writes both pids to pids.txt in its working
directory (the trial's folder), and on SIGTERM writes sigterm.txt before it exits.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def on_sigterm(signum: int, frame: object) -> None:
    with open("sigterm.txt", "w") as f:
        f.write("SIGTERM\n")
    sys.exit(143)


signal.signal(signal.SIGTERM, on_sigterm)
parser = argparse.ArgumentParser()
parser.add_argument("--q", type=float, required=True)
args = parser.parse_args()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open("pids.txt", "w") as f:
    f.write(f"{os.getpid()} {child.pid}\n")
for step in range(1, 21):
    print("tunefleet-report: " + json.dumps({"loss": args.q + 1.0 / step}))
    time.sleep(0.05)
child.kill()
