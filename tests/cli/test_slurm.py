"""`tunefleet slurm`: the options, their errors, and the script run for real by bash.

The script runs here in a fake Slurm: `srun`, `scontrol` and `sbatch` are small stubs
first on PATH (srun runs its command on this machine), SLURM_* variables describe a
one- or two-"node" allocation, and `ray` is the real Ray CLI, so a real head (and a
second raylet as the second node) start, join and stop. Only `ray stop` is caught by
a wrapper: for real it would stop every Ray process of this user on the machine,
including other tests' clusters.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.processes import default_sigint
from tunefleet.cli import main
from tunefleet.cli.slurm import SlurmOptions, render_sbatch, time_seconds

BIN = Path(sys.executable).parent  # the venv's bin: python3, and ray when installed
RAY = shutil.which("ray", path=str(BIN))
needs_ray = pytest.mark.skipif(RAY is None, reason="the ray CLI is not installed (tunefleet[ray])")

SRUN = r"""#!/bin/bash
# fake srun: take the step's options, record them, run the command on this machine
options=()
while [ $# -gt 0 ]; do
    case "$1" in
        --nodelist=*) export SLURMD_NODENAME=${1#--nodelist=} ;;
        --cpus-per-task=*) export SLURM_CPUS_PER_TASK=${1#--cpus-per-task=} ;;
        -*) ;;
        *) break ;;
    esac
    options+=("$1")
    shift
done
echo "srun ${options[*]} $1" >> "$FAKE_SLURM_LOG"
if [ -n "${FAKE_SRUN_FAIL:-}" ] && [ "$SLURMD_NODENAME" = "$FAKE_SRUN_FAIL" ]; then
    echo "srun: error: fake failure on $SLURMD_NODENAME" >&2
    exit 1
fi
exec "$@"
"""
SCONTROL = r"""#!/bin/bash
[ "$1 $2" = "show hostnames" ] || { echo "fake scontrol: $*" >&2; exit 1; }
for host in $FAKE_SLURM_HOSTS; do echo "$host"; done
"""
SBATCH = r"""#!/bin/bash
echo "sbatch $*" >> "$FAKE_SLURM_LOG"
if [ $# -eq 0 ]; then cat > "$FAKE_SLURM_LOG.stdin"; fi
echo "Submitted batch job 4242"
"""
# `ray stop` is recorded, not run; everything else goes to the real ray
RAY_WRAPPER = r"""#!/bin/bash
if [ "$1" = stop ]; then echo "ray stop" >> "$FAKE_SLURM_LOG"; exit 0; fi
exec "$REAL_RAY" "$@"
"""
# A ray that never gets ready: the head's `ray start` blocks, health checks fail
RAY_NEVER_READY = r"""#!/bin/bash
echo "ray $1" >> "$FAKE_SLURM_LOG"
case "$1" in
    start) exec sleep 600 ;;
    health-check) echo "fake: cannot reach the GCS at $3"; exit 1 ;;
    *) exit 0 ;;
esac
"""
RAY_START_FAILS = r"""#!/bin/bash
echo "ray $1" >> "$FAKE_SLURM_LOG"
case "$1" in
    start) echo "fake: port in use" >&2; exit 1 ;;
    health-check) exit 1 ;;
    *) exit 0 ;;
esac
"""
# A ray whose cluster is ready at once (with PYTHON_JOINED below) and blocks in start
RAY_READY = r"""#!/bin/bash
echo "ray $*" >> "$FAKE_SLURM_LOG"
case "$1" in
    start) exec sleep 600 ;;
    *) exit 0 ;;
esac
"""
# The join check (python3 -c CHECK ADDRESS WANT TIMEOUT): done when WANT `ray start` ran
PYTHON_JOINED = r"""#!/bin/bash
for _ in $(seq 300); do
    if [ "$(grep -c '^ray start' "$FAKE_SLURM_LOG")" -ge "$4" ]; then exit 0; fi
    sleep 0.1
done
exit 3
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


class FakeSlurm:
    """A directory of stubs and the environment of an allocation of `hosts`."""

    def __init__(self, root: Path, hosts: list[str]) -> None:
        self.bin = root / "fakebin"
        self.bin.mkdir()
        self.log = root / "slurm.log"
        self.log.touch()
        self.mark = uuid.uuid4().hex  # every process the script starts inherits it
        _write(self.bin / "srun", SRUN)
        _write(self.bin / "scontrol", SCONTROL)
        _write(self.bin / "sbatch", SBATCH)
        _write(self.bin / "ray", RAY_WRAPPER)  # never a real `ray stop` (see the top)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RAY_"))}
        env.update(
            PATH=f"{self.bin}{os.pathsep}{BIN}{os.pathsep}/usr/bin{os.pathsep}/bin",
            FAKE_SLURM_LOG=str(self.log),
            FAKE_SLURM_HOSTS=" ".join(hosts),
            REAL_RAY=RAY or "/no/ray/installed",
            TUNEFLEET_TEST_MARK=self.mark,
            SLURM_JOB_ID="4242",
            SLURM_JOB_NODELIST=",".join(hosts),
            SLURM_JOB_NUM_NODES=str(len(hosts)),
            SLURMD_NODENAME=hosts[0],
            SLURM_JOB_CPUS_PER_NODE=f"1(x{len(hosts)})",
            SLURM_CPUS_ON_NODE="1",
            PYTHONUNBUFFERED="1",
        )
        env.pop("CUDA_VISIBLE_DEVICES", None)
        self.env = env

    def use_ray(self, text: str) -> None:
        _write(self.bin / "ray", text)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()

    def run(self, script: str, timeout: float) -> subprocess.CompletedProcess[str]:
        path = _write(self.bin.parent / "job.sbatch", script)
        return subprocess.run(
            ["bash", str(path)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.bin.parent,
        )


def _marked(mark: str) -> list[psutil.Process]:
    """The live processes that carry `mark` in their environment."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TUNEFLEET_TEST_MARK") == mark and proc.status() != "zombie":
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeSlurm]:
    slurm = FakeSlurm(tmp_path, ["node1"])
    yield slurm
    _assert_none_left(slurm.mark)


def _assert_none_left(mark: str) -> None:
    left = _marked(mark)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    assert not left, f"processes left behind: {[p.cmdline() for p in left]}"


def _options(**kw: Any) -> SlurmOptions:
    return SlurmOptions(**{"command": "python tune.py", **kw})


def _bash_n(script: str) -> None:
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# -- the script's text ---------------------------------------------------------------------------
def test_defaults_make_a_one_node_script_that_parses() -> None:
    script = render_sbatch(_options())
    _bash_n(script)
    header = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert header == [
        "#SBATCH --job-name=tunefleet",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --output=%x-%j.out",
        "#SBATCH --signal=B:TERM@180",
    ]
    assert "TF_COMMAND='python tune.py'" in script
    assert "sleep 5" not in script and "sleep 10" not in script  # readiness is polled


def test_every_option_reaches_the_script() -> None:
    script = render_sbatch(
        _options(
            command="python tune.py --name 'my run' && echo done",
            job_name="lstm",
            nodes=4,
            time="1-12:00:00",
            partition="gpu",
            account="m1234",
            gpus_per_node="a100:4",
            cpus_per_node=32,
            mem="200G",
            exclusive=True,
            sbatch_lines=["constraint=gpu", "#SBATCH --qos=regular", "-C gpu"],
            setup=["module load python", "source ~/venv/bin/activate"],
            log="logs/%j.out",
            port=6380,
            temp_dir="$TMPDIR/ray",
            interface="hsn0",
            min_nodes=3,
            head_timeout_s=60,
            join_timeout_s=90,
            grace_s=300,
            python="/opt/py/bin/python",
            ray_args=["--object-store-memory=1000000000", "--resources", '{"a": 1}'],
            ray_stop=False,
        )
    )
    _bash_n(script)
    for line in (
        "#SBATCH --job-name=lstm",
        "#SBATCH --nodes=4",
        "#SBATCH --time=1-12:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=m1234",
        "#SBATCH --cpus-per-task=32",
        "#SBATCH --gpus-per-node=a100:4",
        "#SBATCH --mem=200G",
        "#SBATCH --exclusive",
        "#SBATCH --output=logs/%j.out",
        "#SBATCH --signal=B:TERM@360",
        "#SBATCH --constraint=gpu",
        "#SBATCH --qos=regular",
        "#SBATCH -C gpu",
        "module load python\nsource ~/venv/bin/activate\n",
        "TF_PORT=6380",
        'TF_TEMP_DIR="$TMPDIR/ray"',
        "TF_INTERFACE=hsn0",
        "TF_GPUS_PER_NODE=4",
        "TF_CPUS_PER_NODE=32",
        "TF_MIN_NODES=3",
        "TF_HEAD_TIMEOUT=60",
        "TF_JOIN_TIMEOUT=90",
        "TF_GRACE=300",
        "TF_PYTHON=/opt/py/bin/python",
        "TF_RAY_STOP=0",
        """TF_RAY_ARGS=(--object-store-memory=1000000000 --resources '{"a": 1}')""",
    ):
        assert line in script, line
    # the setup runs before `set -u`, which activate scripts do not always survive
    assert script.index("source ~/venv/bin/activate") < script.index("set -euo pipefail")
    # the command comes back as it was given
    quoted = next(line for line in script.splitlines() if line.startswith("TF_COMMAND="))
    echoed = subprocess.run(
        ["bash", "-c", f'{quoted}\nprintf %s "$TF_COMMAND"'], capture_output=True, text=True
    )
    assert echoed.stdout == "python tune.py --name 'my run' && echo done"


def test_grace_zero_asks_for_no_signal() -> None:
    assert "#SBATCH --signal" not in render_sbatch(_options(grace_s=0))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("30:15", 1815),
        ("2:00:00", 7200),
        ("1-0", 86400),
        ("1-2:30", 95400),
        ("1-2:30:05", 95405),
        ("UNLIMITED", 0),
        ("2h", None),
        ("1:2:3:4", None),
        ("", None),
    ],
)
def test_slurm_times(text: str, seconds: int | None) -> None:
    assert time_seconds(text) == seconds


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"command": "  "}, "the command='  ' is not valid: give the experiment to run"),
        ({"nodes": 0}, "--nodes=0 is not valid: give a whole number from 1 to"),
        ({"nodes": True}, "--nodes=True is not valid"),
        ({"job_name": "my job"}, "--job-name='my job' is not valid: use letters"),
        ({"partition": "gpu;rm"}, "--partition='gpu;rm' is not valid"),
        ({"account": "a'b"}, '--account="a\'b" is not valid'),
        ({"time": "2h"}, "--time='2h' is not valid: use a Slurm time: MINUTES, MM:SS"),
        ({"gpus_per_node": "four"}, "--gpus-per-node='four' is not valid: use a count or"),
        ({"cpus_per_node": 0}, "--cpus-per-node=0 is not valid: give a whole number from 1"),
        ({"mem": "64GB"}, "--mem='64GB' is not valid: use a number with an optional unit"),
        ({"sbatch_lines": ["--a\n--b"]}, "--sbatch='--a\\n--b' is not valid: give one"),
        ({"sbatch_lines": ["#SBATCH"]}, "--sbatch='#SBATCH' is not valid"),
        ({"log": "my log.out"}, "--log='my log.out' is not valid: give a file path without"),
        ({"port": 80}, "--port=80 is not valid: give a whole number from 1024 to 65535"),
        ({"temp_dir": "/tmp/a b"}, "--temp-dir='/tmp/a b' is not valid"),
        ({"interface": "eth0; reboot"}, "--interface='eth0; reboot' is not valid"),
        (
            {"nodes": 2, "min_nodes": 3},
            "--min-nodes=3 is not valid: give a whole number from 1 to 2 (--nodes is 2)",
        ),
        ({"head_timeout_s": 0}, "--head-timeout=0 is not valid"),
        ({"join_timeout_s": -5}, "--join-timeout=-5 is not valid"),
        ({"grace_s": -1}, "--grace=-1 is not valid"),
        (
            {"time": "2", "grace_s": 120},
            "--grace=120 is not valid: the wind-down time plus a "
            "minute must be shorter than --time 2 (120s)",
        ),
        ({"python": "my python"}, "--python='my python' is not valid"),
        (
            {"ray_args": ["--num-cpus=4"]},
            "--ray-args='--num-cpus=4' is not valid: the script "
            "sets --num-cpus itself; use --cpus-per-node",
        ),
        ({"ray_args": ["--block"]}, "the script sets --block itself"),
        ({"ray_args": ["4"]}, "--ray-args='4' is not valid: give `ray start` options"),
        (
            {"ray_args": ["--include-dashboard=false"]},
            "--ray-args='--include-dashboard=false' is not valid: `ray start` takes it on the "
            "head only; use --head-ray-args",
        ),
        (
            {"head_ray_args": ["--temp-dir=/x"]},
            "--head-ray-args='--temp-dir=/x' is not valid: the script sets --temp-dir itself",
        ),
    ],
)
def test_bad_options_say_which_and_why(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        render_sbatch(_options(**kw))
    assert message in str(info.value)


# -- the command line ----------------------------------------------------------------------------
def test_cli_prints_the_script_or_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["slurm", "--nodes", "2", "--", "python", "tune.py", "--lr", "0.1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash\n#SBATCH --job-name=tunefleet\n#SBATCH --nodes=2\n")
    assert "TF_COMMAND='python tune.py --lr 0.1'" in out
    target = tmp_path / "job.sbatch"
    code = main(["slurm", "--command", "python tune.py | tee log", "-o", str(target)])
    assert code == 0
    assert f"wrote {target}" in capsys.readouterr().out
    assert "TF_COMMAND='python tune.py | tee log'" in target.read_text()
    assert os.access(target, os.X_OK)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["slurm"], "the command='' is not valid"),
        (["slurm", "--command", "a", "--", "b"], "the command is given twice: --command='a'"),
        (["slurm", "--nodes", "0", "--", "x"], "--nodes=0 is not valid"),
        (["slurm", "--ray-args", "'unclosed", "--", "x"], '--ray-args="\'unclosed" is not'),
        (["slurm", "--setup", "if true; then", "--", "x"], "the script does not parse (bash -n"),
    ],
)
def test_cli_errors_exit_2_with_the_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tunefleet slurm: error: ") and message in err


def test_submit_without_sbatch_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch (and no bash: no syntax check)
    assert main(["slurm", "--submit", "--", "python", "tune.py"]) == 1
    err = capsys.readouterr().err
    assert "--submit needs sbatch, which is not on PATH" in err


def test_submit_hands_the_script_to_sbatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    slurm = FakeSlurm(tmp_path, ["node1"])
    monkeypatch.setenv("PATH", slurm.env["PATH"])
    monkeypatch.setenv("FAKE_SLURM_LOG", str(slurm.log))
    assert main(["slurm", "--submit", "--", "python", "tune.py"]) == 0
    assert "Submitted batch job 4242" in capsys.readouterr().out
    assert slurm.calls() == ["sbatch "]  # the script on standard input
    assert Path(f"{slurm.log}.stdin").read_text().startswith("#!/bin/bash\n#SBATCH")
    target = tmp_path / "job.sbatch"
    assert main(["slurm", "--submit", "-o", str(target), "--", "python", "tune.py"]) == 0
    assert slurm.calls()[-1] == f"sbatch {target}"


# -- the script run by bash in a fake Slurm ------------------------------------------------------
def test_outside_slurm_it_says_so(fake: FakeSlurm) -> None:
    del fake.env["SLURM_JOB_NODELIST"]
    proc = fake.run(render_sbatch(_options()), timeout=30)
    assert proc.returncode == 1
    assert "SLURM_JOB_NODELIST is not set: run this script inside a Slurm job" in proc.stderr
    assert fake.calls() == []  # nothing started, so no `ray stop` either


def test_without_ray_on_path_it_names_the_install(fake: FakeSlurm) -> None:
    (fake.bin / "ray").unlink()
    fake.env["PATH"] = f"{fake.bin}{os.pathsep}/usr/bin{os.pathsep}/bin"  # no venv, no ray
    if shutil.which("ray", path=fake.env["PATH"]):
        pytest.skip("a ray CLI is installed system-wide")
    proc = fake.run(render_sbatch(_options()), timeout=30)
    assert proc.returncode == 1
    assert (
        'ray is not on PATH after the setup lines: pip install "tunefleet[ray]" in the'
        in proc.stderr
    )


def test_a_head_that_never_answers_fails_within_its_timeout(fake: FakeSlurm) -> None:
    fake.use_ray(RAY_NEVER_READY)
    proc = fake.run(render_sbatch(_options(head_timeout_s=3)), timeout=60)  # 3 s + cleanup
    assert proc.returncode == 1, proc.stderr
    assert "the Ray head at " in proc.stderr
    assert (
        "did not answer within 3s (--head-timeout); ray health-check said: fake: cannot reach"
        in proc.stderr
    )
    calls = fake.calls()
    srun = [c for c in calls if c.startswith("srun")]
    assert len(srun) == 1  # no worker started
    assert srun == [
        "srun --nodes=1 --ntasks=1 --nodelist=node1 --cpus-per-task=1 --export=ALL bash"
    ]
    assert "ray start" in calls and calls[-1] == "ray stop"  # the blocked start is gone (fixture)


def test_a_head_that_exits_fails_at_once(fake: FakeSlurm) -> None:
    fake.use_ray(RAY_START_FAILS)
    proc = fake.run(render_sbatch(_options(head_timeout_s=300)), timeout=60)
    assert proc.returncode == 1
    assert "fake: port in use" in proc.stderr
    assert (
        "the Ray head on node1 (srun ... ray start --head) exited before it answered" in proc.stderr
    )


def test_a_stop_signal_winds_the_experiment_down_then_stops_ray(
    tmp_path: Path, fake: FakeSlurm
) -> None:
    fake.use_ray(RAY_READY)
    python = _write(tmp_path / "python-joined", PYTHON_JOINED)
    marker = tmp_path / "experiment.log"
    # the experiment: says it runs, then on SIGINT records it and exits like tunefleet does
    command = (
        f"trap 'echo INT >> {marker}; exit 130' INT; echo running >> {marker}; "
        "while true; do sleep 0.1; done"
    )
    script = render_sbatch(_options(command=command, python=str(python), grace_s=20))
    path = _write(tmp_path / "job.sbatch", script)
    proc = subprocess.Popen(
        ["bash", str(path)], env=fake.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, preexec_fn=default_sigint,  # the experiment's INT trap must be honoured
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (marker.exists() and "running" in marker.read_text()):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the experiment did not start"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # what Slurm sends --grace seconds before the limit
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert marker.read_text().split() == ["running", "INT"]
    assert "asking the experiment to stop (SIGINT, as Ctrl-C); it has 20s" in out
    assert "stopping the Ray nodes" in out
    assert fake.calls()[-1] == "ray stop"


def test_each_node_gets_its_cpus_and_the_gpus_it_sees(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path, ["node1", "node2", "node3"])
    try:
        fake.use_ray(RAY_READY)
        python = _write(tmp_path / "python-joined", PYTHON_JOINED)
        fake.env.update(SLURM_JOB_CPUS_PER_NODE="3,1(x2)", CUDA_VISIBLE_DEVICES="0,1")
        script = render_sbatch(
            _options(
                command="echo EXPERIMENT $RAY_ADDRESS",
                python=str(python),
                ray_args=["--object-store-memory=100000000"],
                head_ray_args=["--include-dashboard=false"],
            )
        )
        proc = fake.run(script, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        steps = [c.split()[3:5] for c in fake.calls() if c.startswith("srun")]
        assert sorted(steps) == [
            ["--nodelist=node1", "--cpus-per-task=3"],
            ["--nodelist=node2", "--cpus-per-task=1"],
            ["--nodelist=node3", "--cpus-per-task=1"],
        ]
        assert "ray start --head, 3 CPUs, 2 GPUs" in proc.stdout
        starts = sorted(c for c in fake.calls() if c.startswith("ray start"))
        common = "--num-gpus=2 --disable-usage-stats --block --object-store-memory=100000000"
        ip = starts[-1].split()[3].split("=")[1]  # --node-ip-address=IP of the head
        assert starts == [
            f"ray start --address={ip}:6379 --num-cpus=1 {common}",
            f"ray start --address={ip}:6379 --num-cpus=1 {common}",
            f"ray start --head --node-ip-address={ip} --port=6379 --num-cpus=3 {common} "
            "--include-dashboard=false",
        ]
        assert proc.stdout.count("ray start (worker), 1 CPUs, 2 GPUs") == 2
        head = proc.stdout.split("Ray head on node1 at ")[1].split()[0]
        assert f"EXPERIMENT {head}\n" in proc.stdout
        assert "the experiment ended with exit status 0" in proc.stdout
    finally:
        _assert_none_left(fake.mark)


@pytest.mark.parametrize(
    ("env", "interface", "address", "error"),
    [
        ({"TUNEFLEET_HEAD_IP": "10.1.2.3"}, None, "10.1.2.3", None),
        ({}, "lo", "127.0.0.1", None),
        ({}, "nope0", None, "no IPv4 address on interface nope0 (--interface)"),
    ],
)
def test_the_head_address(
    fake: FakeSlurm, env: dict[str, str], interface: str | None, address: str | None,
    error: str | None,
) -> None:  # fmt: skip
    if interface and shutil.which("ip") is None:
        pytest.skip("no `ip` command here")
    fake.use_ray(RAY_START_FAILS)  # ends the run as soon as the address is known
    fake.env.update(env)
    proc = fake.run(render_sbatch(_options(interface=interface, port=7000)), timeout=30)
    assert proc.returncode == 1
    if address:
        assert f"the Ray head on node1 at {address}:7000" in proc.stdout
    else:
        assert error and error in proc.stderr
        assert "cannot tell the address of the head node node1" in proc.stderr


# -- with the real Ray ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


PRINT_CLUSTER = (
    'python3 -c \'import ray; ray.init(address="auto"); '
    'print("CLUSTER_CPUS", ray.cluster_resources()["CPU"]); '
    'print("CLUSTER_NODES", len([n for n in ray.nodes() if n["Alive"]]))\''
)


def _real_ray_run(
    tmp_path: Path, hosts: list[str], env: dict[str, str] | None = None, **kw: Any
) -> tuple[FakeSlurm, subprocess.CompletedProcess[str]]:
    """Runs a script of `kw` in a fake allocation of `hosts` with the real Ray."""
    slurm = FakeSlurm(tmp_path, hosts)
    slurm.env.update(env or {})
    temp_dir = tempfile.mkdtemp(prefix="tfs", dir="/tmp")  # Ray's socket paths must be short
    options = _options(
        command=PRINT_CLUSTER,
        port=_free_port(),
        temp_dir=temp_dir,
        head_timeout_s=120,
        # no fixed ports that another Ray on this machine may hold
        ray_args=["--dashboard-agent-listen-port=0"],
        head_ray_args=["--include-dashboard=false"],
        **kw,
    )
    try:
        return slurm, slurm.run(render_sbatch(options), timeout=240)
    finally:
        _assert_none_left(slurm.mark)
        shutil.rmtree(temp_dir, ignore_errors=True)


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_end_to_end_two_nodes_with_real_ray(tmp_path: Path) -> None:
    slurm, proc = _real_ray_run(tmp_path, ["node1", "node2"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "CLUSTER_CPUS 2.0" in proc.stdout and "CLUSTER_NODES 2" in proc.stdout, out
    assert "2 of 2 Ray nodes have joined" in proc.stdout
    steps = [c.split() for c in slurm.calls() if c.startswith("srun")]
    assert [s[3] for s in steps] == ["--nodelist=node1", "--nodelist=node2"]
    assert slurm.calls()[-1] == "ray stop"


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_node_that_never_joins_fails_after_the_join_timeout(tmp_path: Path) -> None:
    slurm, proc = _real_ray_run(
        tmp_path, ["node1", "node2"], env={"FAKE_SRUN_FAIL": "node2"}, join_timeout_s=5
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 of 2 Ray nodes have joined" in proc.stdout
    assert "fake failure on node2" in proc.stderr
    assert (
        "fewer than 2 Ray nodes joined within 5s (--join-timeout, --min-nodes); worker steps "
        "that ended: node2" in proc.stderr
    )
    assert "CLUSTER_CPUS" not in proc.stdout  # the experiment never ran
    assert slurm.calls()[-1] == "ray stop"
