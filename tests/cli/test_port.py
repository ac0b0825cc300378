"""`tunefleet port`: Ray Tune programs' imports rewritten on the syntax tree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.paths import EXAMPLES, REPO, SRC
from tunefleet.cli import main
from tunefleet.cli.port import Ported, port_source


def port(source: str) -> Ported:
    return port_source(textwrap.dedent(source))


def text(source: str) -> str:
    ported = port(source)
    assert ported.unported == [], ported.unported
    return ported.text


def same(source: str) -> str:
    return textwrap.dedent(source)


# -- import forms ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ray", "ours"),
    [
        ("from ray import tune\n", "import tunefleet as tune\n"),
        ("from ray import train, tune\n", "import tunefleet as train\nimport tunefleet as tune\n"),
        ("import ray.tune as tune\n", "import tunefleet as tune\n"),
        ("import ray.train as rt\n", "import tunefleet as rt\n"),
        ("from ray.tune import Tuner, TuneConfig\n", "from tunefleet import Tuner, TuneConfig\n"),
        ("from ray.tune import Tuner as T\n", "from tunefleet import Tuner as T\n"),
        (
            "from ray.train import report, get_checkpoint, get_context, Checkpoint\n",
            "from tunefleet import report, get_checkpoint, get_context, Checkpoint\n",
        ),
        (
            "from ray.train import RunConfig, CheckpointConfig, FailureConfig, SyncConfig\n",
            "from tunefleet import RunConfig, CheckpointConfig, FailureConfig, SyncConfig\n",
        ),
        ("from ray.air import RunConfig\n", "from tunefleet import RunConfig\n"),
        ("from ray.air.config import RunConfig\n", "from tunefleet.config import RunConfig\n"),
        ("from ray.air import session\n", "from tunefleet import session\n"),
        ("from ray.air.result import Result\n", "from tunefleet.results import Result\n"),
        (
            "from ray.tune.result_grid import ResultGrid\n",
            "from tunefleet.results import ResultGrid\n",
        ),
        (
            "from ray.tune.search.optuna import OptunaSearch\n",
            "from tunefleet.search import OptunaSearch\n",
        ),
        (
            "from ray.tune.search.hyperopt import HyperOptSearch as H\n",
            "from tunefleet.search import HyperOptSearch as H\n",
        ),
        ("from ray.tune.search import optuna\n", "from tunefleet import search as optuna\n"),
        (
            "from ray.tune.schedulers.pb2 import PB2\n",
            "from tunefleet.schedulers import PB2\n",
        ),
        (
            "from ray.tune.stopper import MaximumIterationStopper\n",
            "from tunefleet.stopper import MaximumIterationStopper\n",
        ),
        (
            "from ray.tune.logger import CSVLoggerCallback\n",
            "from tunefleet.logger import CSVLoggerCallback\n",
        ),
        (
            "from ray.air.integrations.wandb import WandbLoggerCallback\n",
            "from tunefleet.callbacks import WandbLoggerCallback\n",
        ),
        (
            "from ray.tune.execution.placement_groups import PlacementGroupFactory\n",
            "from tunefleet.resources import PlacementGroupFactory\n",
        ),
        ("from ray.tune.result import DONE\n", "from tunefleet.result import DONE\n"),
        ("from ray.tune.error import TuneError\n", "from tunefleet import TuneError\n"),
        ("from ray.tune.experiment import Trial\n", "from tunefleet.trial import Trial\n"),
        ("from ray.tune import *\n", "from tunefleet import *\n"),
    ],
)
def test_import_forms(ray: str, ours: str) -> None:
    assert text(ray) == ours


def test_a_from_import_is_split_across_tunefleet_modules() -> None:
    ported = text("from ray.tune import Tuner, search, ExperimentAnalysis as EA, schedulers\n")
    assert ported == ("from tunefleet import Tuner, search, ExperimentAnalysis as EA, schedulers\n")
    ported = text("from ray.train.context import TrainContext\n")
    assert ported == "from tunefleet import TuneContext as TrainContext\n"


def test_a_name_tunefleet_lacks_stays_and_is_listed() -> None:
    ported = port(
        """\
        from ray.tune import Tuner, NotATuneName
        from ray.tune.execution.ray_trial_executor import RayTrialExecutor
        """
    )
    assert ported.text == (
        "from tunefleet import Tuner\n"
        "from ray.tune import NotATuneName\n"
        "from ray.tune.execution.ray_trial_executor import RayTrialExecutor\n"
    )
    assert [(u.line, u.code) for u in ported.unported] == [
        (1, "from ray.tune import Tuner, NotATuneName"),
        (2, "from ray.tune.execution.ray_trial_executor import RayTrialExecutor"),
    ]
    assert "ray.tune.NotATuneName" in ported.unported[0].reason


def test_indented_and_parenthesized_imports() -> None:
    source = """\
    def f():
        from ray.tune import (
            Tuner,  # the tuner
            TuneConfig,
        )
        from ray import train, tune
        return Tuner
    """
    assert text(source) == same(
        """\
        def f():
            from tunefleet import (
                Tuner,  # the tuner
                TuneConfig,
            )
            import tunefleet as train
            import tunefleet as tune
            return Tuner
        """
    )


def test_a_parenthesized_import_split_across_modules_keeps_one_name_a_line() -> None:
    ported = port(
        """\
        if True:
            from ray.tune.logger import (  # loggers
                CSVLoggerCallback,
                NotALogger,
                JsonLoggerCallback,
            )
        """
    )
    assert ported.text == same(
        """\
        if True:
            from tunefleet.logger import (
                CSVLoggerCallback,
                JsonLoggerCallback,
            )
            from ray.tune.logger import NotALogger
        """
    )
    assert [u.line for u in ported.unported] == [2]


# -- attribute chains -----------------------------------------------------------------------
def test_chains_from_import_ray_are_rewritten_and_import_ray_goes() -> None:
    source = """\
    import ray


    def train_fn(config):
        ray.train.report({"loss": 1.0}, checkpoint=ray.train.Checkpoint.from_directory("."))


    tuner = ray.tune.Tuner(train_fn, tune_config=ray.tune.TuneConfig(num_samples=2))
    searcher = ray.tune.search.optuna.OptunaSearch()
    key = ray.tune.result.TRAINING_ITERATION
    """
    assert text(source) == same(
        """\
        import tunefleet.result


        def train_fn(config):
            tunefleet.report({"loss": 1.0}, checkpoint=tunefleet.Checkpoint.from_directory("."))


        tuner = tunefleet.Tuner(train_fn, tune_config=tunefleet.TuneConfig(num_samples=2))
        searcher = tunefleet.search.OptunaSearch()
        key = tunefleet.result.TRAINING_ITERATION
        """
    )


def test_chains_through_an_alias() -> None:
    source = """\
    from ray import tune

    searcher = tune.search.optuna.OptunaSearch()
    scheduler = tune.schedulers.pb2.PB2()
    key = tune.result.DONE
    tuner = tune.Tuner
    """
    assert text(source) == same(
        """\
        import tunefleet as tune
        import tunefleet.result

        searcher = tune.search.OptunaSearch()
        scheduler = tune.schedulers.PB2()
        key = tune.result.DONE
        tuner = tune.Tuner
        """
    )


def test_ray_core_stays_with_its_import_and_is_listed() -> None:
    source = """\
    import ray
    from ray import tune


    @ray.remote
    def square(x):
        return x * x


    print(ray.get(square.remote(3)), ray.train.report)
    """
    ported = port(source)
    assert ported.text == same(
        """\
        import ray
        import tunefleet
        import tunefleet as tune


        @ray.remote
        def square(x):
            return x * x


        print(ray.get(square.remote(3)), tunefleet.report)
        """
    )
    assert [(u.line, u.code) for u in ported.unported] == [
        (5, "@ray.remote"),
        (10, "print(ray.get(square.remote(3)), ray.train.report)"),
    ]
    assert "Ray core" in ported.unported[0].reason


def test_a_local_variable_hides_a_ray_name() -> None:
    source = """\
    from ray.tune import search


    def f(search):
        return search.suggest("t1")


    def g():
        session = object()
        return session.anything, lambda tune: tune.whatever
    """
    assert text(source) == same(
        """\
        from tunefleet import search


        def f(search):
            return search.suggest("t1")


        def g():
            session = object()
            return session.anything, lambda tune: tune.whatever
        """
    )


def test_an_attribute_tunefleet_lacks_is_listed() -> None:
    ported = port("from ray import tune\n\ntune.NotATuneName()\n")
    assert [u.line for u in ported.unported] == [3]
    assert "ray.tune.NotATuneName" in ported.unported[0].reason


# -- ray.init and friends -------------------------------------------------------------------
def test_local_ray_init_and_shutdown_are_removed() -> None:
    source = """\
    import ray
    from ray import tune

    ray.init()  # a local Ray
    ray.init(num_cpus=2, ignore_reinit_error=True)
    ray.init(address="local")
    if ray.is_initialized():
        ray.shutdown()
    if not ray.is_initialized():
        ray.init()


    def main():
        ray.init()
        ray.shutdown()


    if __name__ == "__main__":
        main()
        ray.shutdown()
    """
    assert text(source) == same(
        """\
        import tunefleet as tune



        def main():
            pass


        if __name__ == "__main__":
            main()
        """
    )


@pytest.mark.parametrize(
    "call",
    [
        'ray.init(address="auto")',
        'ray.init("ray://head:10001")',
        "ray.init(address=os.environ['HEAD'])",
        "ray.init(**kwargs)",
        'ray.init(runtime_env={"pip": ["torch"]})',
    ],
)
def test_a_cluster_ray_init_stays_and_is_listed(call: str) -> None:
    source = f"import ray\n\n{call}\n"
    ported = port_source(source)
    assert ported.text == source
    assert [(u.line, u.code) for u in ported.unported] == [(3, call)]
    assert "ray.init" in ported.unported[0].reason


def test_an_emptied_block_keeps_a_pass_and_a_shared_line_is_kept() -> None:
    source = """\
    import ray

    try:
        ray.init()
    except RuntimeError:
        ray.shutdown()
    x = 1; ray.shutdown()
    """
    assert text(source) == same(
        """\

        try:
            pass
        except RuntimeError:
            pass
        x = 1; pass
        """
    )


# -- text kept as written -------------------------------------------------------------------
def test_everything_outside_a_changed_span_is_kept_byte_for_byte() -> None:
    source = (
        "#!/usr/bin/env python\n"
        "# -*- coding: utf-8 -*-\n"
        '"""Naïve docstring — ünïcode."""\n'
        "from ray import tune  # Ray's tune\r\n"
        "x = {'ä': tune.uniform(0,1)}   # spacing  kept\n"
        "\n\n\n"
        "def f( a ,b ):\n"
        "\treturn  ray_like_name(a)  # not ray\n"
    )
    ported = port_source(source)
    assert ported.unported == []
    assert ported.text == source.replace("from ray import tune  #", "import tunefleet as tune  #")


def test_a_program_without_ray_is_unchanged() -> None:
    source = "import tunefleet as tune\nimport rayleigh\nfrom raytracer import ray\n"
    assert port_source(source) == Ported(text=source, unported=[])


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match=r"broken\.py: cannot port: not valid Python at line 1"):
        port_source("from ray import (\n", "broken.py")


# -- idempotence ----------------------------------------------------------------------------
RAY_FILES = sorted(
    [*(REPO / "tests" / "conformance").glob("*.py"), *(EXAMPLES / "ray_tune").glob("*.py")]
)


@pytest.mark.parametrize("path", RAY_FILES, ids=lambda p: p.name)
def test_porting_a_ported_file_changes_nothing(path: Path) -> None:
    once = port_source(path.read_text(), str(path))
    twice = port_source(once.text, str(path))
    assert twice.text == once.text
    assert twice.unported == once.unported


LINES = [
    "import ray\n",
    "from ray import tune\n",
    "from ray import train, tune\n",
    "import ray.tune as tune\n",
    "from ray.tune import Tuner, NotATuneName as N\n",
    "from ray.air import session\n",
    "ray.init()\n",
    "ray.init(address='auto')\n",
    "ray.shutdown()\n",
    "x = ray.tune.Tuner  # a chain\n",
    "y = ray.get(1)\n",
    "z = tune.search.optuna.OptunaSearch\n",
    "def f(tune):\n    return tune.x\n",
    "if ray.is_initialized():\n    ray.shutdown()\n",
    "session.report({'a': 1})\n",
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=8))
def test_port_is_idempotent(lines: list[str]) -> None:
    once = port_source("".join(lines))
    assert port_source(once.text).text == once.text


# -- the command ----------------------------------------------------------------------------
RAY_PROGRAM = "import ray\nfrom ray import tune\n\nray.init()\nprint(tune.uniform(0, 1))\n"
CLUSTER_PROGRAM = "import ray\n\nray.init(address='auto')\n"


def test_the_command_prints_a_diff_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(RAY_PROGRAM)
    for argv in (["port", str(script)], ["port", "--diff", str(script)]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "-from ray import tune\n+import tunefleet as tune\n" in out
        assert "-ray.init()\n" in out
        assert script.read_text() == RAY_PROGRAM


def test_the_command_writes_a_folder_and_lists_what_it_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(RAY_PROGRAM)
    (tmp_path / "pkg" / "b.py").write_text(CLUSTER_PROGRAM)
    (tmp_path / "pkg" / "notes.txt").write_text("from ray import tune\n")
    assert main(["port", "--write", str(tmp_path / "pkg")]) == 1
    captured = capsys.readouterr()
    assert (tmp_path / "pkg" / "a.py").read_text() == (
        "import tunefleet as tune\n\nprint(tune.uniform(0, 1))\n"
    )
    assert (tmp_path / "pkg" / "b.py").read_text() == CLUSTER_PROGRAM
    assert (tmp_path / "pkg" / "notes.txt").read_text() == "from ray import tune\n"
    assert f"ported {tmp_path / 'pkg' / 'a.py'}" in captured.out
    assert f"{tmp_path / 'pkg' / 'b.py'}:3: ray.init" in captured.err
    assert main(["port", "--write", str(tmp_path / "pkg" / "a.py")]) == 0  # nothing left


def test_the_command_refuses_bad_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.py"
    assert main(["port", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    assert main(["port", "--write", "--diff", str(tmp_path)]) == 2
    assert main(["port"]) == 2
    (tmp_path / "bad.py").write_text("def (:\n")
    assert main(["port", str(tmp_path / "bad.py")]) == 2
    assert "bad.py: cannot port: not valid Python" in capsys.readouterr().err


def test_python_m_tunefleet_port(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(RAY_PROGRAM)
    proc = subprocess.run(
        [sys.executable, "-m", "tunefleet", "port", "--write", str(script)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert script.read_text().startswith("import tunefleet as tune\n")


def test_tune_controller_annotation_import_is_the_cluster_view() -> None:
    # Ray's xgboost_dynamic_resources_example.py imports it under TYPE_CHECKING for the
    # allocation function's first argument; tunefleet passes its Cluster there.
    ported = port(
        """\
        from typing import TYPE_CHECKING
        from ray.tune.execution import tune_controller
        if TYPE_CHECKING:
            from ray.tune.execution.tune_controller import TuneController
        """
    )
    assert ported.unported == []
    assert "from tunefleet import schedulers as tune_controller\n" in ported.text
    assert "    from tunefleet.schedulers import Cluster as TuneController\n" in ported.text


# -- Ray's own examples and tests: the forms they use ---------------------------------------
@pytest.mark.parametrize(
    ("ray", "ours"),
    [
        # a sub-module of a Ray package holds the package's names
        (
            "from ray.tune.search.optuna.optuna_search import OptunaSearch\n",
            "from tunefleet.search import OptunaSearch\n",
        ),
        (
            "from ray.tune.stopper.trial_plateau import TrialPlateauStopper\n",
            "from tunefleet.stopper import TrialPlateauStopper\n",
        ),
        (
            "from ray.tune.utils.util import flatten_dict\n",
            "from tunefleet.utils import flatten_dict\n",
        ),
        ("from ray.tune.utils import flatten_dict\n", "from tunefleet.utils import flatten_dict\n"),
        # Ray modules that re-export names tunefleet has
        (
            "from ray.air.constants import TRAINING_ITERATION\n",
            "from tunefleet.result import TRAINING_ITERATION\n",
        ),
        (
            "from ray.train.constants import TIME_TOTAL_S\n",
            "from tunefleet.result import TIME_TOTAL_S\n",
        ),
        (
            "from ray.tune.progress_reporter import CLIReporter\n",
            "from tunefleet import CLIReporter\n",
        ),
        ("from ray.tune.syncer import SyncConfig\n", "from tunefleet import SyncConfig\n"),
        (
            "from ray.tune.context import get_context\n",
            "from tunefleet.session import get_context\n",
        ),
        ("import ray.cloudpickle as cloudpickle\n", "import cloudpickle\n"),
        ("from ray.cloudpickle import dumps\n", "from cloudpickle import dumps\n"),
        # Ray 2.0-2.2's deprecated aliases
        (
            "from ray.tune.suggest.hyperopt import HyperOptSearch\n",
            "from tunefleet.search import HyperOptSearch\n",
        ),
        (
            "from ray.tune.suggest import ConcurrencyLimiter\n",
            "from tunefleet.search import ConcurrencyLimiter\n",
        ),
    ],
)
def test_ray_module_paths_that_hold_names_tunefleet_has(ray: str, ours: str) -> None:
    assert text(ray) == ours


def test_a_chain_through_a_sub_module_and_a_name_that_is_not_a_module() -> None:
    source = """\
    from ray import tune

    a = tune.search.optuna.optuna_search.OptunaSearch
    b = tune.search.optuna.OptunaSearch.convert_search_space
    c = tune.utils.flatten_dict({})
    """
    assert text(source) == same(
        """\
        import tunefleet as tune

        a = tune.search.OptunaSearch
        b = tune.search.OptunaSearch.convert_search_space
        c = tune.utils.flatten_dict({})
        """
    )


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("from ray.train.torch import TorchTrainer", "Ray Train's distributed trainers"),
        ("from ray.train import ScalingConfig", "Ray Train's distributed trainers"),
        ("from ray.air.config import ScalingConfig", "Ray Train's distributed trainers"),
        ("from ray.train.lightning import RayDDPStrategy", "Ray Train's distributed trainers"),
        ("from ray.data import Dataset", "Ray Data"),
        ("from ray.rllib.algorithms.ppo import PPO", "RLlib"),
        ("from ray.tune.examples.mnist_pytorch import ConvNet", "ray.tune.examples"),
        ("from ray.tune.execution.tune_controller import logger", "internal module"),
        ("from ray.train._internal.session import get_session", "Ray internal"),
        ("from ray.util.annotations import PublicAPI", "ray.util"),
        ("from ray.exceptions import RayActorError", "Result.error"),
        ("from ray.tune.logger import JsonLogger", "JsonLoggerCallback"),
        ("from ray.tune.trainable import wrap_function", "write a tune.Trainable"),
        ("from ray.tune.syncer import Syncer", "storage_filesystem"),
        ("from ray.tune.search.skopt import SkOptSearch", "ray.tune.search.skopt.SkOptSearch"),
    ],
)
def test_each_unported_name_says_why(code: str, says: str) -> None:
    ported = port_source(code + "\n")
    assert ported.text == code + "\n"
    [item] = ported.unported
    assert says in item.reason


def test_ray_version_is_not_called_an_internal() -> None:
    [item] = port_source("import ray\n\nprint(ray.__version__)\n").unported
    assert "internal" not in item.reason
    assert "ray.__version__" in item.reason


def test_one_entry_per_line_and_reason() -> None:
    ported = port_source("import ray\n\nrefs = [ray.put(1), ray.put(2)]\n")
    assert [(u.line, u.code) for u in ported.unported] == [(3, "refs = [ray.put(1), ray.put(2)]")]


def test_an_optional_ray_import_and_type_checking_imports() -> None:
    source = """\
    from typing import TYPE_CHECKING

    try:
        import ray
        from ray import tune
    except ImportError:
        ray = tune = None

    if TYPE_CHECKING:
        import ray.tune
        from ray.tune.experiment import Trial
    """
    assert text(source) == same(
        """\
        from typing import TYPE_CHECKING

        try:
            import tunefleet as tune
        except ImportError:
            ray = tune = None

        if TYPE_CHECKING:
            from tunefleet.trial import Trial
        """
    )


def test_import_ray_submodule_becomes_import_ray_while_ray_core_stays() -> None:
    source = """\
    import ray.tune
    import ray.data

    ray.tune.run(lambda config: None)
    ray.get([])
    """
    ported = port(source)
    assert ported.text == same(
        """\
        import ray
        import tunefleet
        import ray.data

        tunefleet.run(lambda config: None)
        ray.get([])
        """
    )
    assert [u.line for u in ported.unported] == [2, 5]
    assert "Ray Data" in ported.unported[0].reason
    kept = port_source("import ray.tune\n\nray.tune.NotATuneName()\n")
    assert kept.text == "import ray.tune\n\nray.tune.NotATuneName()\n"


def test_every_local_ray_init_form_is_removed() -> None:
    source = """\
    import ray

    ray.init(num_cpus=2, local_mode=True, ignore_reinit_error=True, log_to_driver=False)
    ray.init(num_cpus=4, num_gpus=0, include_dashboard=False, object_store_memory=10**8)
    """
    assert text(source) == same("\n")


def test_a_name_tunefleet_exports_at_its_top_level_is_found_there() -> None:
    source = """\
    from ray import tune
    from ray.tune.search import grid_search
    from ray.tune.search.variant_generator import grid_search as gs

    space = {"x": tune.search.grid_search([1, 2])}
    """
    assert text(source) == same(
        """\
        import tunefleet as tune
        from tunefleet import grid_search
        from tunefleet import grid_search as gs

        space = {"x": tune.grid_search([1, 2])}
        """
    )
