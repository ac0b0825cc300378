"""Safety: secrets are never written or printed, and names never lead out of their directory."""

from __future__ import annotations

import io
import logging
import os
import pickle
import re
import string
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet._redact import (
    REDACTED,
    Secret,
    is_secret_key,
    redact,
    redact_text,
    reveal,
    scrub_failure,
    secret_values,
)
from tunefleet.progress.live import StatusReporter
from tunefleet.storage.paths import (
    MAX_SLUG,
    default_experiment_name,
    experiment_dirname,
    safe_child,
    slug,
    trial_dirname,
)
from tunefleet.store import ExperimentStore
from tunefleet.store._schema import decode, encode
from tunefleet.trial import FailureKind, FailureRecord, Trial, TrialStatus

# -- the key rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "apiKey",
        "AUTH_TOKEN",
        "db_password",
        "credentials",
        "key",
        "secret",
        "client-secret",
        "aws.secret_access_key",
        "hf_token",
        "OAuthToken",
        "HTTPBasicAuth",
        "dbpassword",
        "authtoken",
        "passwd",
        "private_key",
        "wandbApiKey",
    ],
)
def test_secret_looking_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "keys_per_batch",
        "max_tokens",
        "tokenizer",
        "monkey",
        "author",
        "lr",
        "hidden",
        "db_url",
        "secretary_count",
        "passage_len",
    ],
)
def test_ordinary_keys(key: str) -> None:
    assert not is_secret_key(key)


# -- redact(): nested data ---------------------------------------------------------------------


def test_redact_hides_strings_under_secret_keys_and_keeps_numbers() -> None:
    config = {
        "api_key": "sk-1234567",
        "key_dim": 64,
        "use_auth": True,
        "credentials": {"user": "bob", "password": "pw-99999", "port": 5432},
        "tokens": ["tok-abcdef", "tok-ghijkl"],  # a plural secret word
        "max_tokens": "512",  # a plural with a count word: a count, not a secret
        "auth": ["t1-abcdef", "t2-abcdef"],
        "lr": 0.1,
        "db_url": "postgresql://u:pw-77777@localhost/db",
        "nested": [{"apiKey": b"bytes-secret"}],
    }
    out = redact(config)
    assert out["api_key"] == REDACTED and out["key_dim"] == 64 and out["use_auth"] is True
    assert out["credentials"] == {"user": REDACTED, "password": REDACTED, "port": 5432}
    assert out["tokens"] == [REDACTED, REDACTED] and out["auth"] == [REDACTED, REDACTED]
    assert out["max_tokens"] == "512"
    assert out["db_url"] == "postgresql://u:***@localhost/db"
    assert out["nested"] == [{"apiKey": REDACTED}]
    assert config["api_key"] == "sk-1234567"  # the input is not changed


def test_redact_returns_clean_data_as_it_is() -> None:
    clean = {"lr": 0.1, "layers": [1, 2, {"act": "relu"}], "name": "mlp"}
    assert redact(clean) is clean


def test_secret_wrapper() -> None:
    secret = Secret("tok-abcdef")
    assert repr(secret) == str(secret) == f"{secret}" == "Secret('***')"
    assert secret.get_secret_value() == "tok-abcdef"
    assert Secret(secret).get_secret_value() == "tok-abcdef"
    assert pickle.loads(pickle.dumps(secret)) == secret  # it travels to the trial
    assert hash(secret) == hash(Secret("tok-abcdef")) and secret != Secret("other")
    assert redact({"anything": secret, "list": [secret]}) == {"anything": "***", "list": ["***"]}
    assert "tok-abcdef" not in encode({"anything": secret, "s": {secret}})
    config = {"token": secret, "nested": {"x": [Secret(1), (Secret("y"),)]}, "lr": 0.5}
    assert reveal(config) == {"token": "tok-abcdef", "nested": {"x": [1, ("y",)]}, "lr": 0.5}
    assert tune.Secret is Secret


def test_search_space_markers_survive_under_a_secret_key() -> None:
    from tunefleet.space import space_to_json

    space = {"token": tune.choice(["tok-aaaa1", "tok-bbbb2"]), "key": tune.uniform(0, 1)}
    stored = decode(encode(space_to_json(space)))
    assert stored["token"]["__domain__"] == "choice"
    assert "tok-aaaa1" not in str(stored) and "tok-bbbb2" not in str(stored)
    assert stored["key"]["__domain__"] == "uniform"  # numbers under a secret key are kept


# -- redact_text(): free text ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://u:hunter2@db/prod", "postgresql://u:***@db/prod"),
        ("redis://:hunter2@cache:6379/0", "redis://:***@cache:6379/0"),
        ("see https://bob:p@ss/w0rd@host/x now", "see https://bob:***@host/x now"),
        ("GET https://api.x/v1?api_key=abc123&page=2", "GET https://api.x/v1?api_key=***&page=2"),
        ("Authorization: Bearer eyJhbGciOi.J9", "Authorization: Bearer ***"),
        ("{'api_key': 'abc', 'lr': 0.1}", "{'api_key': '***', 'lr': 0.1}"),
        ('connect(password="hunter2", port=1)', 'connect(password="***", port=1)'),
        ("https://example.com/a?page=2 and user@example.com", None),
        ("http://host:8080/path", None),
    ],
)
def test_redact_text(text: str, expected: str | None) -> None:
    assert redact_text(text) == (text if expected is None else expected)


def test_values_learnt_from_configs_are_hidden_in_text() -> None:
    redact({"api_key": "learnt-7f3a9c"})
    assert redact_text("server said: bad key learnt-7f3a9c") == "server said: bad key ***"
    assert redact_text("short", ["abc"]) == "short"  # too short to search for


@pytest.mark.parametrize(
    "text",
    ["x://a:" * 10000, "a" * 60000 + "':'x'", "?" * 60000 + "=", "a='" * 20000, "Bearer " * 9000],
)
def test_redact_text_stays_fast_on_pathological_text(text: str) -> None:
    import time

    started = time.process_time()
    redact_text(text)
    assert time.process_time() - started < 2.0  # linear, not quadratic (~0.3 s at worst)


password_chars = st.text(
    alphabet=string.ascii_letters + string.digits + "!#$%&()*+,-./:;=?@[]^_{|}~",
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(user=st.from_regex(r"[a-z0-9_.]{0,8}", fullmatch=True), password=password_chars)
def test_no_url_password_survives(user: str, password: str) -> None:
    secret = "PW" + password + "X"
    text = f"failed: postgresql://{user}:{secret}@db.internal:5432/prod (retrying)"
    out = redact_text(text)
    assert secret not in out and f"{user}:***@" in out


json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
ordinary_key = st.sampled_from(["lr", "layers", "name", "act", "db", "x", "batch", "keys_n"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.recursive(
        json_leaf,
        lambda kids: st.one_of(
            st.lists(kids, max_size=3), st.dictionaries(ordinary_key, kids, max_size=3)
        ),
        max_leaves=12,
    ),
    key=st.sampled_from(["api_key", "apiKey", "AUTH_TOKEN", "db_password", "credentials"]),
    value=st.text(alphabet=string.ascii_letters + string.digits, min_size=4, max_size=20),
    wrap=st.booleans(),
    depth=st.integers(0, 3),
)
def test_no_secret_reaches_the_store(
    base: Any, key: str, value: str, wrap: bool, depth: int
) -> None:
    secret = f"Zq{value}9Q"
    node: Any = {key: Secret(secret) if wrap else secret, "other": base}
    for _ in range(depth):
        node = {"level": [node]}
    text = encode(node)
    assert secret not in text
    assert redact(redact(node)) == redact(node)  # idempotent


# -- failures, logs, printed tables -----------------------------------------------------------


def test_scrub_failure_hides_the_trials_secrets() -> None:
    config = {"api_key": "fail-ak-31337", "token": Secret("fail-tok-4242"), "lr": 0.1}
    failure = FailureRecord(
        kind=FailureKind.EXCEPTION,
        message="refused fail-ak-31337 / fail-tok-4242",
        traceback="Traceback ...\nValueError: refused fail-ak-31337 / fail-tok-4242",
        stderr_tail="curl https://u:fail-pw-777@h",
    )
    scrub_failure(failure, config)
    text = f"{failure.message} {failure.traceback} {failure.stderr_tail}"
    for secret in ("fail-ak-31337", "fail-tok-4242", "fail-pw-777"):
        assert secret not in text
    assert failure.message == "refused *** / ***"
    assert secret_values({"a": {"password": "pw-12345"}}) == {"pw-12345"}


def test_log_lines_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tunefleet"):
        logging.getLogger("tunefleet").warning("cannot reach %s", "mysql://root:log-pw-5150@db/x")
    assert "log-pw-5150" not in caplog.text and "mysql://root:***@db/x" in caplog.text


def _trial(config: dict[str, Any], **kw: Any) -> Trial:
    return Trial(
        trial_id="abc_00000",
        index=0,
        name="train_abc_00000",
        config=config,
        resources={"cpu": 1},
        path="/tmp/x",
        **kw,
    )


def test_summary_prints_no_secret() -> None:
    out = io.StringIO()
    trial = _trial(
        {"api_key": "sum-ak-2468", "token": Secret("sum-tok-1357"), "lr": 0.1},
        status=TrialStatus.TERMINATED,
        last_result={"loss": 0.5, "training_iteration": 1},
    )
    failed = _trial(
        {"password": "ab"},
        status=TrialStatus.ERROR,
        error=FailureRecord(kind=FailureKind.EXCEPTION, message="bad key sum-ak-2468"),
    )
    failed.trial_id = "abc_00001"
    reporter = StatusReporter(verbose=2, metric="loss", mode="min", out=out)
    reporter.finish([trial, failed], "/tmp/exp", None)
    text = out.getvalue()
    assert "sum-ak-2468" not in text and "sum-tok-1357" not in text
    assert "api_key=***" in text and "bad key ***" in text


def test_store_holds_no_secret(tmp_path: Path) -> None:
    from tunefleet.space import space_to_json

    space = {
        "api_key": "store-ak-8080",
        "url": "https://u:store-pw-9090@h/x",
        "token": Secret("store-tok-7070"),
        "lr": tune.uniform(0, 1),
    }
    config = {**space, "lr": 0.3}
    with ExperimentStore(tmp_path) as store:
        store.write_meta({"param_space": space_to_json(space)})
        trial = _trial(config)
        trial.name = "name-with-store-ak-8080"
        store.add_trial(trial)
        store.add_result(trial.trial_id, {"loss": 1.0, "api_key": "store-ak-8080"})
        store.add_event(
            trial.trial_id,
            "failed",
            FailureRecord(
                kind=FailureKind.CRASH, message="m", stderr_tail="store-tok-7070"
            ).to_json(),
        )
    _assert_no_canary(tmp_path, ("store-ak-8080", "store-pw-9090", "store-tok-7070"))


# -- the canary: a real run, every file and every printed line -------------------------------

AK, PW, TOK = "CANARY-AK-123", "CANARY-PW-456", "CANARY-TOK-789"
CANARIES = (AK, PW, TOK)
URL = f"postgresql://u:{PW}@localhost/db"


def canary_trainable(config: dict[str, Any]) -> None:
    # Checks the real values without ever printing them.
    received = (config["api_key"], config["db_url"], config["token"])
    if received != (AK, URL, TOK):
        raise RuntimeError("the trial did not receive the real secret values")
    if config["fail"]:
        raise ValueError(f"the server refused api key {config['api_key']} for {config['db_url']}")
    with tempfile.TemporaryDirectory() as d:
        Path(d, "weights.txt").write_text("not a secret")
        tune.report(
            {
                "loss": config["lr"],
                "api_key_len": len(config["api_key"]),
                "token_len": len(config["token"]),
                "api_key": config["api_key"],  # a result echoing a secret
                "echo_url": config["db_url"],
            },
            checkpoint=tune.Checkpoint.from_directory(d),
        )


def _assert_no_canary(root: Path, canaries: tuple[str, ...] = CANARIES) -> list[Path]:
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in [root, *root.rglob("*")]:
        for canary in canaries:
            assert canary not in str(path.relative_to(root.parent)), path
    for path in files:
        data = path.read_bytes()
        for canary in canaries:
            assert canary.encode() not in data, f"{canary} found in {path}"
    return files


def test_canary_secrets_never_leave_the_trial(
    storage: str, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tunefleet")
    grid = tune.Tuner(
        canary_trainable,
        param_space={
            "api_key": AK,
            "db_url": URL,
            "token": tune.Secret(TOK),
            "lr": tune.uniform(0, 1),
            "fail": tune.grid_search([False, True]),
        },
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            trial_name_creator=lambda t: f"run-{t.config['api_key']}-{t.trial_id}",
            trial_dirname_creator=lambda t: f"../{t.config['api_key']}/{t.config['fail']}",
        ),
        run_config=tune.RunConfig(
            name="canary",
            storage_path=storage,
            verbose=2,
            failure_config=tune.FailureConfig(max_failures=1),  # a retry is logged
        ),
    ).fit()
    printed = capfd.readouterr()

    # The trial received the real values; tunefleet kept none of them.
    assert grid.num_terminated == 1 and grid.num_errors == 1
    ok = next(r for r in grid if r.error is None)
    assert metrics_of(ok)["api_key_len"] == len(AK) and metrics_of(ok)["token_len"] == len(TOK)
    assert metrics_of(ok)["api_key"] == REDACTED and metrics_of(ok)["echo_url"] == URL.replace(
        PW, "***"
    )
    # The grid fit() returns holds the user's own Secret object (it prints as ***), as
    # Ray's holds the config; read from disk, every secret is "***".
    assert ok.config["api_key"] == REDACTED and isinstance(ok.config["token"], tune.Secret)
    assert repr(ok.config["token"]) == "Secret('***')" and TOK not in str(ok.config)
    assert ok.config["db_url"] == "postgresql://u:***@localhost/db"
    on_disk = next(r for r in tune.ResultGrid(grid.experiment_path) if r.error is None)
    assert on_disk.config["api_key"] == REDACTED and on_disk.config["token"] == REDACTED
    failed = next(r for r in grid if r.error is not None)
    assert failed.error is not None
    assert "the server refused api key *** for postgresql://u:***@localhost/db" in str(failed.error)
    assert "RuntimeError" not in str(failed.error)  # it got past the check of the values

    exp = Path(grid.experiment_path)
    trial_dirs = sorted(p.name for p in (exp / "trials").iterdir())
    assert len(trial_dirs) == 2 and all(re.fullmatch(r"[A-Za-z0-9._-]+", d) for d in trial_dirs)
    files = _assert_no_canary(exp)
    assert any(p.name == "experiment.db" for p in files)
    assert any(p.parent.name.startswith("checkpoint_") for p in files)
    for canary in CANARIES:
        assert canary not in printed.out and canary not in printed.err
        assert canary not in caplog.text
    assert "retrying" in caplog.text and "Best trial" in printed.out
    assert "FAILED" in printed.out and "refused api key ***" in printed.out

    outputs = {command: _cli(command, str(exp)) for command in ("show", "best", "errors")}
    outputs["ls"] = _cli("ls", storage)
    for command, text in outputs.items():
        for canary in CANARIES:
            assert canary not in text, (command, text)
    assert "api_key=***" in outputs["show"] and "refused api key ***" in outputs["errors"]
    assert '"token": "***"' in outputs["best"]


def _cli(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(Path(tune.__file__).parents[1])}
    proc = subprocess.run(
        [sys.executable, "-m", "tunefleet", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


# -- paths ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["../../etc", "/etc", "a/b", "a\\b", ".", "..", "a\x00b", "tab\tname", "x" * 201, " ", ""],
)
def test_unsafe_experiment_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=r"RunConfig\.name="):
        experiment_dirname(name)


@pytest.mark.parametrize("name", ["lstm", "my run 1", "lr=0.1", "...", "é-ü", "x" * 200])
def test_safe_experiment_names_are_kept(name: str) -> None:
    assert experiment_dirname(name) == name


def test_default_experiment_name_is_a_slug() -> None:
    assert (
        default_experiment_name("<lambda>", "2024-01-01_00-00-00") == "lambda_2024-01-01_00-00-00"
    )
    assert default_experiment_name("../../", "s") == "experiment_s"


def test_safe_child(tmp_path: Path) -> None:
    base = tmp_path / "exp"
    base.mkdir()
    assert safe_child(base, "trials/t_1") == str((base / "trials" / "t_1").resolve())
    assert safe_child(base, "a/../b") == str((base / "b").resolve())
    for bad, rule in [
        ("../x", "not inside"),
        ("trials/../../x", "not inside"),
        (".", "not inside"),
        ("/etc/passwd", "absolute"),
        ("a\x00b", "NUL"),
        ("x" * 300, "longer than 255"),
        ("", "non-empty"),
    ]:
        with pytest.raises(ValueError, match=rule) as info:
            safe_child(base, bad)
        assert repr(bad)[:20] in str(info.value)  # names the value
    (base / "link").symlink_to(tmp_path)  # a link that leads out is refused as well
    with pytest.raises(ValueError, match="not inside"):
        safe_child(base, "link/x")
    (base / "trials").mkdir()
    (base / "trials" / "out").symlink_to(tmp_path)  # the last component, existing folders
    with pytest.raises(ValueError, match="not inside"):
        safe_child(base, "trials/out")
    (base / "inner").mkdir()
    (base / "trials" / "in").symlink_to(base / "inner")  # a link that stays inside
    assert safe_child(base, "trials/in/t_2") == str((base / "inner" / "t_2").resolve())
    (tmp_path / "via").symlink_to(base)  # the base itself reached through a link
    assert safe_child(tmp_path / "via", "trials/t_3") == str(base.resolve() / "trials" / "t_3")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("../x", "x_ab1_00003"),
        ("/etc/passwd", "etc_passwd_ab1_00003"),
        ("..", "ab1_00003"),
        ("", "ab1_00003"),
        (None, "ab1_00003"),
        ("lr=0.1, act=relu", "lr_0.1_act_relu_ab1_00003"),
        ("ab1_00003_lr=0.1", "ab1_00003_lr_0.1"),  # holds the id already
        ("ab1_000031", "ab1_000031_ab1_00003"),  # another id is not this one
        ("a\x00b", "a_b_ab1_00003"),
    ],
)
def test_trial_dirname(raw: Any, expected: str) -> None:
    assert trial_dirname(raw, "ab1_00003") == expected


def test_trial_dirname_is_capped_and_hides_secrets() -> None:
    assert len(trial_dirname("y" * 1000, "ab1_00003")) == MAX_SLUG + len("_ab1_00003")
    name = trial_dirname("key-dirname-6502", "ab1_00003", {"api_key": "dirname-6502"})
    assert "6502" not in name and name.endswith("ab1_00003")


@settings(max_examples=300, deadline=None)
@given(raw=st.text(max_size=400))
def test_any_trial_dirname_stays_inside(raw: str) -> None:
    name = trial_dirname(raw, "ab1_00003")
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name), name
    assert len(name) <= MAX_SLUG + len("_ab1_00003") and name.endswith("ab1_00003")
    base = "/srv/exp"
    assert safe_child(base, os.path.join("trials", name)).startswith("/srv/exp/trials/")
    assert slug(raw) not in (".", "..")


def report_once(config: dict[str, Any]) -> None:
    tune.report({"loss": 1.0})


def test_names_from_a_run_never_escape(storage: str) -> None:
    # an unsafe experiment name fails before anything is created
    for name in ("../../etc", "bad\x00name", "n" * 300):
        with pytest.raises(ValueError, match=r"RunConfig\.name"):
            tune.Tuner(
                report_once, run_config=tune.RunConfig(name=name, storage_path=storage)
            ).fit()
    assert os.listdir(storage) == []

    dirnames = iter(["../x", "/abs/evil", "..", "ok"])
    grid = tune.Tuner(
        lambda config: tune.report({"loss": 1.0}),
        param_space={"i": tune.grid_search([0, 1, 2, 3])},
        tune_config=tune.TuneConfig(
            trial_dirname_creator=lambda t: next(dirnames), max_concurrent_trials=2
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    exp = Path(grid.experiment_path)
    assert exp.parent == Path(storage).resolve() and exp.name.startswith("lambda_")
    assert os.listdir(storage) == [exp.name]  # nothing next to the experiment
    ids = sorted(r.trial_id for r in grid)  # in the order the trials were made
    assert grid.num_terminated == 4
    assert {p.name for p in (exp / "trials").iterdir()} == {
        f"x_{ids[0]}",
        f"abs_evil_{ids[1]}",
        ids[2],
        f"ok_{ids[3]}",
    }
    for result in grid:
        assert Path(result.path).parent == exp / "trials"


def test_records_of_child_loggers_are_redacted_for_the_users_handlers() -> None:
    """A logger's filters only see its own records: each tunefleet module's logger
    carries the filter, so a handler of the user's (on the root logger) never gets a
    secret from, e.g., tunefleet.search._optuna."""
    import tunefleet.search._optuna  # noqa: F401 - creates its logger

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        for name in ("tunefleet.search._optuna", "tunefleet.stoppers._plateau"):
            logging.getLogger(name).warning("cannot reach postgresql://bob:hunter2@db/prod")
    finally:
        root.removeHandler(handler)
    text = stream.getvalue()
    assert text.count("postgresql://bob:***@db/prod") == 2 and "hunter2" not in text


def test_an_exception_name_is_not_a_secret_name() -> None:
    """KeyError: 'learning_rate' names the missing key: it is kept, and not remembered
    as a secret that would blank the word in every later message."""
    text = "KeyError: 'learning_rate'"
    assert redact_text(text) == text
    assert redact_text("lookup of learning_rate failed") == "lookup of learning_rate failed"
    assert redact_text("api_key: 'sk-live-9876'") == "api_key: '***'"
