"""``tunefleet port``: rewrite a Ray Tune program's imports to tunefleet's.

`port_source` works on the syntax tree and replaces only the spans it changes, so
comments and formatting elsewhere stay byte for byte; porting ported code changes
nothing. What it cannot port (Ray core calls, a Ray name tunefleet lacks) is left as
is and listed. The table of names is `tunefleet.cli.port_map`.

    tunefleet port train.py            # print a unified diff
    tunefleet port src/ --write        # rewrite every *.py under src/ in place
"""

from __future__ import annotations

import argparse
import ast
import difflib
import sys
from pathlib import Path

from tunefleet.cli._porter import Ported, Porter, Unported

__all__ = ["Ported", "Unported", "add_port_command", "port_source"]


def port_source(source: str, path: str = "<string>") -> Ported:
    """Port one Ray Tune program's source text to tunefleet.

    Args:
        source: the program's text.
        path: its file name, for error messages.

    Returns:
        The ported text and the places left unported.

    Raises:
        ValueError: the source is not valid Python (the message names the path and line).

    Example:
        >>> port_source("from ray import tune\\n").text
        'import tunefleet as tune\\n'
    """
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise ValueError(
            f"{path}: cannot port: not valid Python at line {exc.lineno}: {exc.msg}"
        ) from None
    return Porter(source, tree).run()


def add_port_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``tunefleet port FILE_OR_DIR... [--write | --diff]`` to the command line."""
    text = "port Ray Tune programs to tunefleet: rewrite their imports"
    cmd = sub.add_parser("port", help=text, description=text)
    cmd.add_argument(
        "paths", nargs="+", metavar="FILE_OR_DIR", help="Python files, or folders of *.py"
    )
    how = cmd.add_mutually_exclusive_group()
    how.add_argument("--diff", action="store_true", help="print a unified diff (the default)")
    how.add_argument("--write", action="store_true", help="rewrite the files in place")
    cmd.set_defaults(run=_port)


def _files(paths: list[str]) -> list[Path]:
    """The *.py files named or under the folders named, in order; a missing path raises."""
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found += sorted(
                p
                for p in path.rglob("*.py")
                if not any(part.startswith(".") or part == "__pycache__" for part in p.parts)
            )
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"no such file or directory: {name!r}")
    return found


def _port(args: argparse.Namespace) -> int:
    files = _files(args.paths)
    unported = 0
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: cannot port: not UTF-8 text ({exc.reason})") from None
        ported = port_source(source, str(path))
        if ported.text != source and args.write:
            path.write_text(ported.text, encoding="utf-8")
            print(f"ported {path}")
        elif ported.text != source:
            sys.stdout.writelines(
                difflib.unified_diff(
                    source.splitlines(keepends=True),
                    ported.text.splitlines(keepends=True),
                    fromfile=str(path) if path.is_absolute() else f"a/{path}",
                    tofile=str(path) if path.is_absolute() else f"b/{path}",
                )
            )
        for item in ported.unported:
            print(f"{path}:{item.line}: {item.reason}: {item.code}", file=sys.stderr)
        unported += len(ported.unported)
    if unported:
        print(
            f"tunefleet port: {unported} line(s) left as they were: tunefleet has no "
            "counterpart (docs/from_ray_tune.md)",
            file=sys.stderr,
        )
    return 1 if unported else 0
