"""`tunefleet slurm`: an sbatch script that runs an experiment on a Ray cluster it starts.

The script starts a Ray head on the node the batch script runs on (the first of the
allocation) and a Ray worker on each other node (``srun --nodes=1 --ntasks=1
--nodelist=NODE ray start --block`` in the background), waits until the head answers
(``ray health-check``, polled) and the wanted number of nodes have joined, then runs
the experiment with ``RAY_ADDRESS`` set, so ``RunConfig(backend="ray",
ray_init={"address": "auto"})`` joins that cluster. On the way out (end, error, a
stop signal, the time limit) it stops the experiment gently, then the Ray nodes.

`render_sbatch` is a pure function from `SlurmOptions` to the script's text; the rest
is the command line around it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from tunefleet.cli.slurm_script import NODE_IP, TEMPLATE

# `ray start` options the script sets itself, and the `tunefleet slurm` option for each
_OWN_RAY_ARGS = {
    "--head": "(the script starts the head)",
    "--address": "(the script points workers at the head)",
    "--port": "--port",
    "--block": "(the script always blocks)",
    "--num-cpus": "--cpus-per-node",
    "--num-gpus": "--gpus-per-node",
    "--node-ip-address": "--interface or $TUNEFLEET_HEAD_IP",
    "--temp-dir": "--temp-dir",
}
_HEAD_ONLY_RAY_ARGS = ("--include-dashboard", "--redis-shard-ports")  # `ray start` refuses
_TIME = re.compile(r"^(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)$")
_GPUS = re.compile(r"^(?:[A-Za-z0-9_.-]+:)?(\d+)$")
_MEM = re.compile(r"^\d+[KMGT]?$")
_NAME = re.compile(r"^[A-Za-z0-9_.,:+@%=-]+$")  # Slurm names: no spaces, quotes or $


@dataclass(frozen=True, kw_only=True)
class SlurmOptions:
    """What `tunefleet slurm` was asked for; `render_sbatch` turns it into a script.

    Args:
        command: the experiment, as shell text (run with ``bash -c``).
        job_name: ``#SBATCH --job-name``.
        nodes: how many nodes to allocate (one Ray node each).
        time: the time limit in a Slurm format (``MM``, ``HH:MM:SS``, ``D-HH:MM``...).
        partition, account: ``#SBATCH --partition`` / ``--account``.
        gpus_per_node: ``[type:]count`` GPUs per node, e.g. ``"4"`` or ``"a100:4"``.
        cpus_per_node: CPUs per node (``--cpus-per-task`` of the one task per node).
        mem: memory per node in Slurm's form, e.g. ``"64G"`` (``"0"``: all of it).
        exclusive: ask for whole nodes.
        sbatch_lines: more ``#SBATCH`` options, e.g. ``["--constraint=gpu"]``.
        setup: shell lines run first (``module load ...``, ``source venv/bin/activate``).
        log: the job's output file (``#SBATCH --output``).
        port: the Ray head's port.
        temp_dir: Ray's temp dir on each node (may use ``$TMPDIR`` and the like).
        interface: the network interface whose address Ray uses (e.g. ``ib0``).
        min_nodes: Ray nodes that must join before the experiment starts (None: all).
        head_timeout_s: seconds the head has to answer.
        join_timeout_s: seconds the nodes have to join.
        grace_s: seconds the experiment has to wind down on a stop signal; Slurm
            is asked to send one that long (plus a minute) before the time limit.
        python: the Python with Ray installed, used to count the joined nodes.
        ray_args: more ``ray start`` arguments for every node.
        head_ray_args: more ``ray start`` arguments for the head only, e.g.
            ``["--include-dashboard=false"]``.
        ray_stop: run ``ray stop`` on the head node at the end, as a safety net.
    """

    command: str
    job_name: str = "tunefleet"
    nodes: int = 1
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    gpus_per_node: str | None = None
    cpus_per_node: int | None = None
    mem: str | None = None
    exclusive: bool = False
    sbatch_lines: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    log: str = "%x-%j.out"
    port: int = 6379
    temp_dir: str | None = None
    interface: str | None = None
    min_nodes: int | None = None
    head_timeout_s: int = 300
    join_timeout_s: int = 600
    grace_s: int = 120
    python: str = "python3"
    ray_args: list[str] = field(default_factory=list)
    head_ray_args: list[str] = field(default_factory=list)
    ray_stop: bool = True

    def validate(self) -> None:
        """Raise ValueError naming the option, its value and the rule it breaks."""
        if not self.command.strip():
            _bad("the command", self.command, "give the experiment to run, after -- or --command")
        _check_name("--job-name", self.job_name)
        for option, value in (("--partition", self.partition), ("--account", self.account)):
            if value is not None:
                _check_name(option, value)
        _check_int("--nodes", self.nodes, 1, 100_000)
        if self.time is not None and time_seconds(self.time) is None:
            _bad(
                "--time",
                self.time,
                "use a Slurm time: MINUTES, MM:SS, HH:MM:SS, DAYS-HH, DAYS-HH:MM or "
                "DAYS-HH:MM:SS (or UNLIMITED)",
            )
        if self.gpus_per_node is not None and not _GPUS.match(self.gpus_per_node):
            _bad(
                "--gpus-per-node", self.gpus_per_node, "use a count or TYPE:COUNT, e.g. 4 or a100:4"
            )
        if self.cpus_per_node is not None:
            _check_int("--cpus-per-node", self.cpus_per_node, 1, 100_000)
        if self.mem is not None and not _MEM.match(self.mem):
            _bad(
                "--mem",
                self.mem,
                "use a number with an optional unit K, M, G or T, e.g. 64G (0: all)",
            )
        for line in self.sbatch_lines:
            if "\n" in line or not _sbatch_option(line):
                _bad("--sbatch", line, "give one sbatch option per --sbatch, e.g. constraint=gpu")
        if any("\0" in line for line in self.setup) or "\0" in self.command:
            raise ValueError("--setup and the command must not contain NUL characters")
        if not self.log or any(c.isspace() or c in "'\"`$\\" for c in self.log):
            _bad("--log", self.log, "give a file path without spaces, quotes, $ or backslashes")
        _check_int("--port", self.port, 1024, 65535)
        if self.temp_dir is not None and (
            not self.temp_dir or any(c.isspace() or c in "'\"`\\" for c in self.temp_dir)
        ):
            _bad("--temp-dir", self.temp_dir, "give a short path without spaces or quotes")
        if self.interface is not None and not re.match(r"^[A-Za-z0-9_.:-]+$", self.interface):
            _bad("--interface", self.interface, "give a network interface name such as ib0")
        if self.min_nodes is not None:
            _check_int("--min-nodes", self.min_nodes, 1, self.nodes, f"(--nodes is {self.nodes})")
        _check_int("--head-timeout", self.head_timeout_s, 1, 86_400)
        _check_int("--join-timeout", self.join_timeout_s, 1, 86_400)
        _check_int("--grace", self.grace_s, 0, 86_400)
        limit = time_seconds(self.time) if self.time is not None else None
        if limit and self.grace_s and self.grace_s + 60 >= limit:
            _bad(
                "--grace",
                self.grace_s,
                f"the wind-down time plus a minute must be shorter than --time {self.time} "
                f"({limit}s); lower --grace or use --grace 0",
            )
        if not self.python or any(c.isspace() or c in "'\"`$\\" for c in self.python):
            _bad("--python", self.python, "give a command or path without spaces or quotes")
        for option, args in (
            ("--ray-args", self.ray_args),
            ("--head-ray-args", self.head_ray_args),
        ):
            _check_ray_args(option, args)
        for arg in self.ray_args:
            if arg.split("=", 1)[0] in _HEAD_ONLY_RAY_ARGS:
                _bad(
                    "--ray-args", arg, "`ray start` takes it on the head only; use --head-ray-args"
                )


def render_sbatch(options: SlurmOptions) -> str:
    """The sbatch script for `options` (validated first)."""
    from tunefleet._version import __version__

    options.validate()
    sbatch = [
        f"--job-name={options.job_name}",
        f"--nodes={options.nodes}",
        "--ntasks-per-node=1",
    ]
    for option, value in (
        ("time", options.time),
        ("partition", options.partition),
        ("account", options.account),
        ("cpus-per-task", options.cpus_per_node),
        ("gpus-per-node", options.gpus_per_node),
        ("mem", options.mem),
    ):
        if value is not None:
            sbatch.append(f"--{option}={value}")
    if options.exclusive:
        sbatch.append("--exclusive")
    sbatch.append(f"--output={options.log}")
    if options.grace_s:
        # Slurm may send it up to a minute early, never late; the minute is for Ray's cleanup
        sbatch.append(f"--signal=B:TERM@{options.grace_s + 60}")
    sbatch += [_sbatch_option(line) for line in options.sbatch_lines]
    gpus = _GPUS.match(options.gpus_per_node) if options.gpus_per_node else None
    values = {
        "SBATCH": "\n".join(f"#SBATCH {line}" for line in sbatch),
        "VERSION": __version__,
        "SETUP": "\n".join(options.setup) if options.setup else "# (none)",
        "PORT": str(options.port),
        "TEMP_DIR": f'"{options.temp_dir}"' if options.temp_dir else '""',
        "INTERFACE": shlex.quote(options.interface or ""),
        "GPUS": gpus.group(1) if gpus else '""',
        "CPUS": str(options.cpus_per_node) if options.cpus_per_node else '""',
        "MIN_NODES": str(options.min_nodes) if options.min_nodes else '""',
        "HEAD_TIMEOUT": str(options.head_timeout_s),
        "JOIN_TIMEOUT": str(options.join_timeout_s),
        "GRACE": str(options.grace_s),
        "PYTHON": shlex.quote(options.python),
        "RAY_STOP": "1" if options.ray_stop else "0",
        "RAY_ARGS": " ".join(shlex.quote(a) for a in options.ray_args),
        "HEAD_RAY_ARGS": " ".join(shlex.quote(a) for a in options.head_ray_args),
        "COMMAND": shlex.quote(options.command),
        "NODE_IP": NODE_IP,
    }
    text = TEMPLATE
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    return text


def time_seconds(text: str) -> int | None:
    """A Slurm time limit in seconds; 0 for UNLIMITED; None when it is not one."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return 0
    m = _TIME.match(text)
    if m is None:
        return None
    if m.group(1) is not None:  # DAYS-HH[:MM[:SS]]
        days, hours, minutes, seconds = (int(g or 0) for g in m.group(1, 2, 3, 4))
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    parts = [int(g) for g in m.group(5, 6, 7) if g is not None]
    if len(parts) == 1:  # MINUTES
        return parts[0] * 60
    if len(parts) == 2:  # MM:SS
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]  # HH:MM:SS


def _sbatch_option(line: str) -> str:
    """``--constraint=gpu`` from ``#SBATCH --constraint=gpu``, ``constraint=gpu`` or itself."""
    text = line.strip()
    text = text[len("#SBATCH") :].strip() if text.startswith("#SBATCH") else text
    return text if text.startswith("-") or not text else "--" + text


def _check_ray_args(option: str, args: list[str]) -> None:
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in _OWN_RAY_ARGS:
            _bad(option, arg, f"the script sets {name} itself; use {_OWN_RAY_ARGS[name]}")
    if args and not args[0].startswith("-"):
        _bad(
            option,
            shlex.join(args),
            "give `ray start` options, e.g. --object-store-memory=10000000000",
        )


def _bad(option: str, value: object, rule: str) -> NoReturn:
    raise ValueError(f"{option}={value!r} is not valid: {rule}")


def _check_name(option: str, value: str) -> None:
    if not _NAME.match(value) or len(value) > 200:
        _bad(option, value, "use letters, digits and _ . , : + @ % = - (no spaces or quotes)")


def _check_int(option: str, value: int, low: int, high: int, why: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        _bad(option, value, f"give a whole number from {low} to {high}{' ' + why if why else ''}")


# -- command line ------------------------------------------------------------------------------
def add_slurm_command(sub: Any) -> None:
    """Register `tunefleet slurm` on the `tunefleet` command's subparsers."""
    text = "write an sbatch script that starts a Ray cluster on the allocation and runs a command"
    cmd = sub.add_parser(
        "slurm",
        help=text,
        description=text + " (docs/clusters.md). Example: tunefleet slurm --nodes 4 "
        "--gpus-per-node 4 --time 2:00:00 --setup 'source ~/venv/bin/activate' "
        "-o tune.sbatch -- python tune.py",
    )
    add = cmd.add_argument
    add("--job-name", default="tunefleet", help="default: tunefleet")
    add("--nodes", type=int, default=1, help="nodes to allocate, one Ray node each (default 1)")
    add("--time", help="time limit, e.g. 2:00:00 or 1-12:00:00 (default: the partition's)")
    add("--partition", help="the Slurm partition")
    add("--account", help="the account to charge")
    add("--gpus-per-node", help="GPUs per node: COUNT or TYPE:COUNT (default: none asked)")
    add("--cpus-per-node", type=int, help="CPUs per node (default: what Slurm gives)")
    add("--mem", help="memory per node, e.g. 64G (0: all of it)")
    add("--exclusive", action="store_true", help="ask for whole nodes")
    add("--sbatch", action="append", default=[], metavar="OPTION",
        help="another #SBATCH option, e.g. constraint=gpu (repeatable)")  # fmt: skip
    add("--setup", action="append", default=[], metavar="LINE",
        help="a shell line run first, e.g. 'module load python' (repeatable)")  # fmt: skip
    add("--command", dest="command_text", metavar="TEXT",
        help="the experiment as shell text (or give it after --)")  # fmt: skip
    add("--log", default="%x-%j.out", help="the job's output file (default %%x-%%j.out)")
    add("--port", type=int, default=6379, help="the Ray head's port (default 6379)")
    add("--temp-dir", help="Ray's temp dir on each node, e.g. '$TMPDIR/ray' (keep it short)")
    add("--interface", help="network interface for Ray's addresses, e.g. ib0")
    add("--min-nodes", type=int, help="nodes that must join before the command (default all)")
    add("--head-timeout", type=int, default=300, help="seconds for the head to answer (300)")
    add("--join-timeout", type=int, default=600, help="seconds for the nodes to join (600)")
    add("--grace", type=int, default=120,
        help="seconds the command has to wind down when stopped (120; 0: none)")  # fmt: skip
    add("--python", default="python3", help="the Python that has ray (default python3)")
    add("--ray-args", default="", metavar="'OPTIONS'",
        help="more `ray start` options for every node: --ray-args='--opt=value ...'")  # fmt: skip
    add("--head-ray-args", default="", metavar="'OPTIONS'",
        help="more `ray start` options for the head only")  # fmt: skip
    add("--no-ray-stop", action="store_true",
        help="no final `ray stop` on the head node (it stops all your Ray there)")  # fmt: skip
    add("-o", "--output", help="write the script to this file (default: standard output)")
    add("--submit", action="store_true", help="submit it with sbatch")
    add("words", nargs=argparse.REMAINDER, metavar="COMMAND",
        help="the experiment, e.g. -- python tune.py")  # fmt: skip
    cmd.set_defaults(run=_slurm)


def _slurm(args: argparse.Namespace) -> int:
    words = args.words[1:] if args.words[:1] == ["--"] else args.words
    if words and args.command_text:
        raise ValueError(
            f"the command is given twice: --command={args.command_text!r} and "
            f"{shlex.join(words)!r} after --; give one"
        )
    ray_args, head_ray_args = (
        _split("--ray-args", args.ray_args),
        _split("--head-ray-args", args.head_ray_args),
    )
    options = SlurmOptions(
        command=args.command_text or shlex.join(words),
        job_name=args.job_name,
        nodes=args.nodes,
        time=args.time,
        partition=args.partition,
        account=args.account,
        gpus_per_node=args.gpus_per_node,
        cpus_per_node=args.cpus_per_node,
        mem=args.mem,
        exclusive=args.exclusive,
        sbatch_lines=args.sbatch,
        setup=args.setup,
        log=args.log,
        port=args.port,
        temp_dir=args.temp_dir,
        interface=args.interface,
        min_nodes=args.min_nodes,
        head_timeout_s=args.head_timeout,
        join_timeout_s=args.join_timeout,
        grace_s=args.grace,
        python=args.python,
        ray_args=ray_args,
        head_ray_args=head_ray_args,
        ray_stop=not args.no_ray_stop,
    )
    script = render_sbatch(options)
    _check_syntax(script)
    if args.output:
        path = Path(args.output)
        path.write_text(script)
        path.chmod(0o755)
    if args.submit:
        return _submit(script, args.output)
    if args.output:
        print(f"wrote {args.output}; submit it with: sbatch {shlex.quote(args.output)}")
    else:
        sys.stdout.write(script)
    return 0


def _split(option: str, text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"{option}={text!r} is not valid: {exc}") from None


def _check_syntax(script: str) -> None:
    """`bash -n` on the script, so a --setup or --command that breaks it fails here."""
    bash = shutil.which("bash")
    if bash is None:
        return
    proc = subprocess.run([bash, "-n"], input=script, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ValueError(
            f"the script does not parse (bash -n: {proc.stderr.strip()}); "
            "check the --setup lines and the command"
        )


def _submit(script: str, path: str | None) -> int:
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise RuntimeError(
            "--submit needs sbatch, which is not on PATH: run this on a Slurm login node, or "
            "write the script with -o FILE and submit it there with `sbatch FILE`"
        )
    cmd = [sbatch, path] if path else [sbatch]
    proc = subprocess.run(
        cmd, input=None if path else script, capture_output=True, text=True, check=False,
        cwd=os.getcwd(),
    )  # fmt: skip
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"sbatch failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return 0
