"""`tunefleet resume EXP --script FILE`: continue an experiment from the shell.

The script is the file that defines the trainable (usually the one that started
the experiment). It is run with ``__name__ == "__tunefleet_resume__"``, so its
``if __name__ == "__main__":`` block does not start a new experiment; the
trainable is the object named like the experiment's trainable (or `--trainable`).
"""

from __future__ import annotations

import argparse
import runpy
from pathlib import Path
from typing import Any


def add_resume_command(sub: Any) -> None:
    text = "continue an interrupted or crashed experiment"
    cmd = sub.add_parser("resume", help=text, description=text + " (see Tuner.restore)")
    cmd.add_argument("experiment", metavar="EXP", help="experiment name or directory")
    cmd.add_argument("--script", required=True, help="the Python file defining the trainable")
    cmd.add_argument("--trainable", help="its name in the script (default: the experiment's)")
    cmd.add_argument("--storage", help="where names are looked up")
    cmd.add_argument("--resume-errored", action="store_true", help="rerun failed trials")
    cmd.add_argument(
        "--restart-errored", action="store_true", help="rerun failed trials from scratch"
    )
    cmd.add_argument(
        "--no-unfinished", action="store_true", help="do not continue unfinished trials"
    )
    cmd.add_argument("--force", action="store_true", help="resume even if settings changed")
    cmd.set_defaults(run=_resume)


def _resume(args: argparse.Namespace) -> int:
    import tunefleet as tune
    from tunefleet.store import StoreReader, resolve_experiment

    exp = resolve_experiment(args.experiment, args.storage)
    with StoreReader(exp) as reader:
        recorded = str(reader.meta().get("trainable", ""))
    name = args.trainable or recorded
    trainable = _load_trainable(Path(args.script), name)
    grid = tune.Tuner.restore(
        exp,
        trainable,
        resume_unfinished=not args.no_unfinished,
        resume_errored=args.resume_errored,
        restart_errored=args.restart_errored,
        force=args.force,
    ).fit()
    return 1 if grid.num_errors else 0


def _load_trainable(script: Path, name: str) -> Any:
    if not script.is_file():
        raise FileNotFoundError(f"--script {script}: no such file")
    namespace = runpy.run_path(str(script), run_name="__tunefleet_resume__")
    if name in namespace:
        return namespace[name]
    known = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("_"))
    raise ValueError(
        f"--script {script} defines no {name!r} (the experiment's trainable); "
        f"pass --trainable NAME, one of: {', '.join(known) or 'nothing callable'}"
    )
