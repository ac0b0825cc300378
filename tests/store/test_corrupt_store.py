"""A damaged experiment database is named, with what is wrong, by every reader, and
never written: its bytes, its mtime and its -wal/-shm stay as they were (issue 16,
defect 8)."""

from __future__ import annotations

import re
import shutil
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.cli.main import main
from tunefleet.dashboard import _data
from tunefleet.results import ExperimentAnalysis, ResultGrid
from tunefleet.store._check import CorruptStoreError
from tunefleet.store._integrity import StoreWarning

NAME = "tiny"


def three_reports(config: dict[str, Any]) -> None:
    for i in range(3):
        tune.report({"score": config["x"] * (i + 1)})


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    storage = tmp_path_factory.mktemp("made")
    grid = tune.Tuner(
        three_reports,
        param_space={"x": tune.grid_search([1.0, 2.0])},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(name=NAME, storage_path=str(storage), verbose=0),
    ).fit()
    assert len(grid) == 2
    return Path(grid.experiment_path)


def _empty(db: Path) -> None:
    db.write_bytes(b"")


def _garbage(db: Path) -> None:
    db.write_bytes(b"this is not a database, only bytes\n" * 300)


def _truncated(db: Path) -> None:
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2 + 10])


def _garbage_wal(db: Path) -> None:
    Path(f"{db}-wal").write_bytes(b"\x37\x7f\x06\x82garbage, not frames" * 400)


def _dropped(db: Path) -> None:
    conn = sqlite3.connect(db)
    tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    for (table,) in tables:
        conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()


def _foreign(db: Path) -> None:
    db.unlink()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    conn.commit()
    conn.close()


# corruption -> (damage, the file named, what the message says)
CASES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "empty": (_empty, "experiment.db", r"at byte offset 0: the file is empty"),
    "garbage": (_garbage, "experiment.db", r"at byte offset 0: it is not an SQLite database"),
    "truncated": (_truncated, "experiment.db", r"at byte offset \d+: the file is truncated"),
    "garbage-wal": (_garbage_wal, "experiment.db-wal", r"not a valid write-ahead log"),
    "dropped": (_dropped, "experiment.db", r"none of tunefleet's tables.*no tables"),
    "foreign": (_foreign, "experiment.db", r"none of tunefleet's tables.*notes"),
}


def _restore(path: Path, tmp: Path) -> Any:
    return tune.Tuner.restore(str(path), three_reports)


def _run_resume(path: Path, tmp: Path) -> Any:
    return tune.run(three_reports, name=NAME, storage_path=str(path.parent), resume=True)


def _grid(path: Path, tmp: Path) -> Any:
    return len(ResultGrid(path))


def _analysis(path: Path, tmp: Path) -> Any:
    return ExperimentAnalysis(str(path)).dataframe()


def _dashboard(path: Path, tmp: Path) -> Any:
    return _data.experiment_view(path)


def _cli(*argv: str) -> Callable[[Path, Path], Any]:
    def run(path: Path, tmp: Path) -> Any:
        args = [a.replace("EXP", str(path)).replace("TMP", str(tmp)) for a in argv]
        return main(args)

    return run


SCRIPT = "from tests.store.test_corrupt_store import three_reports\n"
# entry point -> (call, whether it writes: a log it cannot read stops it)
ENTRIES: dict[str, tuple[Callable[[Path, Path], Any], bool]] = {
    "Tuner.restore": (_restore, True),
    "tune.run(resume=True)": (_run_resume, True),
    "ResultGrid": (_grid, False),
    "ExperimentAnalysis": (_analysis, False),
    "dashboard": (_dashboard, False),
    "cli show": (_cli("show", "EXP"), False),
    "cli errors": (_cli("errors", "EXP"), False),
    "cli report": (_cli("report", "EXP", "--out", "TMP/report.html"), False),
    "cli resume": (_cli("resume", "EXP", "--script", "TMP/script.py"), True),
}


def _files(db: Path) -> dict[str, tuple[bytes, int] | None]:
    out: dict[str, tuple[bytes, int] | None] = {}
    for suffix in ("", "-wal", "-shm"):
        f = Path(f"{db}{suffix}")
        out[f.name] = (f.read_bytes(), f.stat().st_mtime_ns) if f.exists() else None
    return out


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_store_is_named_and_left_untouched(
    case: str,
    entry: str,
    experiment: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    damage, named, says = CASES[case]
    call, writes = ENTRIES[entry]
    path = tmp_path / "results" / NAME
    shutil.copytree(experiment, path)
    (tmp_path / "script.py").write_text(SCRIPT)
    db = path / "experiment.db"
    damage(db)
    before = _files(db)
    capsys.readouterr()
    warns = case == "garbage-wal" and not writes  # a reader reads the database file alone
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if entry.startswith("cli"):
            code = call(path, tmp_path)
            err = capsys.readouterr().err.strip()
            assert "Traceback" not in err and str(path / named) in err, err
            lines = [line for line in err.splitlines() if "warning:" not in line]
            if warns:
                assert code == 0 and not lines and err.count("\n") == 0, err
                assert "is not a valid write-ahead log" in err and "lost" in err
            else:  # one line (after the warning a reader gave for a log it left out)
                assert code != 0 and len(lines) == 1 and re.search(says, lines[0]), err
        elif warns:
            call(path, tmp_path)
        else:
            with pytest.raises(CorruptStoreError, match=says) as raised:
                call(path, tmp_path)
            assert str(path / named) in str(raised.value)
    if warns and not entry.startswith("cli"):
        found = [str(w.message) for w in caught if issubclass(w.category, StoreWarning)]
        assert found and str(path / named) in found[0] and "lost" in found[0]
    assert _files(db) == before, "a damaged database was written"
