"""Remote storage (`storage_path="s3://..."`) against a real S3-compatible server.

The server is moto's (from PyPI) on loopback, in this process; trials and drivers
are real processes talking to it over HTTP. Interrupted uploads are real: a TCP
proxy between a process and the server SIGKILLs that process once part of a big
checkpoint has gone through, so the upload is cut in the middle of a request.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import tunefleet as tune
from tests.helpers.paths import REPO
from tests.helpers.processes import meet, meeting
from tunefleet.storage.checkpoint import (
    MANIFEST_FILE,
    delete_checkpoints,
    latest_valid,
    persist_checkpoint,
    remove_temporaries,
    verify_checkpoint,
)
from tunefleet.store import StoreReader
from tunefleet.trial import FailureKind, TrialStatus

KEY = {"key": "testing", "secret": "testing"}
BIG = 24 << 20  # a checkpoint file big enough to be cut in the middle of its upload


# -- the server, buckets, a cutting proxy -------------------------------------------------


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def s3fs_for(endpoint: str) -> Any:
    """An fsspec filesystem for the test server (it travels to trials with the launch)."""
    import s3fs

    return s3fs.S3FileSystem(
        endpoint_url=endpoint, client_kwargs={"region_name": "us-east-1"}, **KEY
    )


@pytest.fixture
def bucket(endpoint: str) -> str:
    import boto3

    name = f"tf-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY["key"],
        aws_secret_access_key=KEY["secret"],
        region_name="us-east-1",
    ).create_bucket(Bucket=name)
    return name


@pytest.fixture
def staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The local staging folder (the default storage path) of this test."""
    path = tmp_path / "staging"
    monkeypatch.setenv("TUNEFLEET_STORAGE", str(path))
    return path


class CuttingProxy:
    """A TCP proxy to the server; armed, it SIGKILLs a process mid-request.

    Once `limit` bytes of requests have passed since `arm`, the process whose pid
    is in `pid_file` is killed and that connection is closed before the rest of
    the request is forwarded: an upload that needs more bytes never completes.
    """

    def __init__(self, target: str) -> None:
        self.target = int(target.rsplit(":", 1)[1])
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.killed: int | None = None
        self._pid_file: Path | None = None
        self._left = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, pid_file: Path, limit: int) -> None:
        with self._lock:
            self._pid_file, self._left = pid_file, limit

    def close(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, request: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                if request and self._cut(len(data)):
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _cut(self, n: int) -> bool:
        with self._lock:
            if self._pid_file is None:
                return False
            self._left -= n
            if self._left > 0:
                return False
            pid = int(self._pid_file.read_text())
            os.kill(pid, signal.SIGKILL)
            self.killed, self._pid_file = pid, None
            return True


@pytest.fixture
def proxy(endpoint: str) -> Iterator[CuttingProxy]:
    cutter = CuttingProxy(endpoint)
    yield cutter
    cutter.close()


def keys(endpoint: str, prefix: str) -> list[str]:
    fs = s3fs_for(endpoint)
    fs.invalidate_cache()
    try:
        return sorted(k[len(prefix) + 1 :] for k in fs.find(prefix))
    except FileNotFoundError:
        return []


def make_source(root: Path, files: dict[str, bytes]) -> str:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return str(root)


def remote_db(endpoint: str, url: str, into: Path) -> Path:
    """Download the remote copy of an experiment's database into `into`; return that folder."""
    into.mkdir(parents=True, exist_ok=True)
    remote = url.removeprefix("s3://") + "/experiment.db"
    s3fs_for(endpoint).get_file(remote, str(into / "experiment.db"))
    return into


# -- trainables (module level: workers import this module) ---------------------------------


def counter(config: dict[str, Any]) -> None:
    """Checkpoints every iteration to storage; resumes from its checkpoint.

    `fail_at`: fails once at that iteration (a flag file per trial). `big_at`: the
    checkpoint of that iteration holds a big file, and the pid is written first.
    """
    start = 0
    if (ckpt := tune.get_checkpoint()) is not None:
        assert ckpt.path.startswith("s3://"), ckpt.path
        with ckpt.as_directory() as d:
            start = int(Path(d, "i").read_text())
    flag = Path(config.get("flags", "/nonexistent"), str(config["x"]))
    for i in range(start, config["iterations"]):
        time.sleep(config.get("pause", 0.0))
        if i == config.get("fail_at") and not flag.exists():
            flag.touch()
            raise RuntimeError(f"planned failure at iteration {i}")
        with tempfile.TemporaryDirectory() as d:
            Path(d, "i").write_text(str(i + 1))
            if i + 1 == config.get("big_at"):
                Path(d, "big.bin").write_bytes(os.urandom(BIG))
                Path(config["pid_file"]).write_text(str(os.getpid()))
            tune.report(
                {"score": config["x"] * (i + 1), "i": i + 1, "restored_from": start},
                checkpoint=tune.Checkpoint.from_directory(d),
            )


def drifting(config: dict[str, Any]) -> None:
    """For PBT: the score grows with lr; state travels in the checkpoint. The population
    meets at its first step, and the leader (lr 1.0) goes past step 4 only once the other
    trial has exploited it: events, so a busy machine cannot let it finish first."""
    score, start = 0.0, 0
    if (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            score, start = json.loads(Path(d, "s.json").read_text())
        Path(config["meet"], "exploited").touch()
    else:
        meet(config, tune.get_context().get_trial_id())
    for it in range(start + 1, 9):
        score += config["lr"]
        if it == 5 and ckpt is None and config["lr"] == 1.0:
            deadline = time.monotonic() + 120
            while not Path(config["meet"], "exploited").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        with tempfile.TemporaryDirectory() as d:
            Path(d, "s.json").write_text(json.dumps([score, it]))
            tune.report({"score": score}, checkpoint=tune.Checkpoint.from_directory(d))


def run_config(endpoint: str, url: str, **kwargs: Any) -> tune.RunConfig:
    args: dict[str, Any] = {
        "name": "exp",
        "storage_path": url,
        "storage_filesystem": s3fs_for(endpoint),
        "verbose": 0,
    }
    return tune.RunConfig(**{**args, **kwargs})


# -- checkpoints in a bucket -----------------------------------------------------------------


def test_checkpoint_upload_verify_download_and_delete(
    endpoint: str, bucket: str, tmp_path: Path
) -> None:
    from tunefleet.storage.remote import register_filesystem

    register_filesystem(f"s3://{bucket}", s3fs_for(endpoint))
    trial = f"s3://{bucket}/root/exp/trials/t1"
    src = make_source(tmp_path / "src", {"model.pt": os.urandom(300_000), "opt/s.bin": b"abc"})
    url = persist_checkpoint(src, trial, 3)

    assert url == f"{trial}/checkpoints/checkpoint_000003"
    prefix = url.removeprefix("s3://")
    assert keys(endpoint, prefix) == [MANIFEST_FILE, "model.pt", "opt/s.bin"]
    assert verify_checkpoint(url) is None
    with tune.Checkpoint(url).as_directory() as d:
        assert Path(d, "model.pt").read_bytes() == Path(src, "model.pt").read_bytes()
        assert Path(d, "opt", "s.bin").read_bytes() == b"abc"
    ckpt = tune.Checkpoint(url)
    ckpt.set_metadata({"epoch": 3})
    assert ckpt.get_metadata() == {"epoch": 3}
    assert verify_checkpoint(url) is None  # the metadata file is not in the manifest

    fs = s3fs_for(endpoint)
    fs.pipe_file(f"{prefix}/opt/s.bin", b"abd")  # same size, other bytes
    assert verify_checkpoint(url) is None  # sizes only, here...
    with pytest.raises(ValueError, match=r"sha256 mismatch in opt/s\.bin"):
        ckpt.to_directory(str(tmp_path / "copy"))  # ...the checksum when it is downloaded
    fs.pipe_file(f"{prefix}/opt/s.bin", b"abcd")
    assert verify_checkpoint(url) == "file opt/s.bin: size 4 != 3"

    older = persist_checkpoint(src, trial, 2)
    fs.rm_file(f"{prefix}/{MANIFEST_FILE}")  # as an upload cut before its manifest leaves it
    assert verify_checkpoint(url) == "missing manifest (half-written?)"
    assert latest_valid([url, older]) == (older, [(url, "missing manifest (half-written?)")])
    assert remove_temporaries(trial) == [url]
    assert keys(endpoint, prefix) == []
    assert verify_checkpoint(url) == "directory missing"

    assert delete_checkpoints([older]) == []
    assert keys(endpoint, f"{bucket}/root/exp/trials/t1") == []
    assert delete_checkpoints([older]) == []  # already gone: not a failure


def test_upload_cut_midway_leaves_the_previous_checkpoint_the_latest_valid(
    endpoint: str, bucket: str, proxy: CuttingProxy, tmp_path: Path
) -> None:
    trial = f"s3://{bucket}/root/exp/trials/t1"
    small = make_source(tmp_path / "small", {"i": b"1"})
    big = make_source(tmp_path / "big", {"i": b"2", "big.bin": os.urandom(BIG)})
    pid_file = tmp_path / "pid"
    script = textwrap.dedent(
        """
        import os, sys
        import s3fs
        from tunefleet.storage.remote import register_filesystem
        from tunefleet.storage.checkpoint import persist_checkpoint

        endpoint, trial, source, iteration, pid_file = sys.argv[1:]
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing",
                               client_kwargs={"region_name": "us-east-1"})
        register_filesystem(trial, fs)
        open(pid_file, "w").write(str(os.getpid()))
        print(persist_checkpoint(source, trial, int(iteration)))
        """
    )

    def upload(source: str, iteration: int) -> subprocess.CompletedProcess[str]:
        args = [proxy.endpoint, trial, source, str(iteration), str(pid_file)]
        return subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60
        )

    first = upload(small, 1)
    assert first.returncode == 0, first.stderr
    previous = first.stdout.strip()
    proxy.arm(pid_file, limit=4 << 20)  # killed after 4 MiB of the 24 MiB file went through
    cut = upload(big, 2)

    assert cut.returncode == -signal.SIGKILL and proxy.killed is not None
    url = f"{trial}/checkpoints/checkpoint_000002"
    assert "big.bin" not in keys(endpoint, url.removeprefix("s3://"))
    assert MANIFEST_FILE not in keys(endpoint, url.removeprefix("s3://"))
    from tunefleet.storage.remote import register_filesystem

    register_filesystem(f"s3://{bucket}", s3fs_for(endpoint))
    chosen, skipped = latest_valid([url, previous])
    assert chosen == previous and [p for p, _ in skipped] == [url]
    assert skipped[0][1] in ("missing manifest (half-written?)", "directory missing")
    with tune.Checkpoint(previous, filesystem=s3fs_for(endpoint)).as_directory() as d:
        assert Path(d, "i").read_text() == "1"


# -- whole experiments -------------------------------------------------------------------------


def test_tuner_keeps_checkpoints_and_the_experiment_in_the_bucket(
    endpoint: str, bucket: str, staging: Path, tmp_path: Path
) -> None:
    (tmp_path / "flags").mkdir()
    url = f"s3://{bucket}/root"
    grid = tune.Tuner(
        counter,
        param_space={
            "x": tune.grid_search([1, 2]),
            "iterations": 4,
            "fail_at": 2,
            "flags": str(tmp_path / "flags"),
        },
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=run_config(
            endpoint,
            url,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    ).fit()

    assert grid.num_errors == 0 and grid.num_terminated == 2
    assert Path(grid.experiment_path) == staging / "exp"  # the local staging copy
    with StoreReader(grid.experiment_path) as reader:
        assert reader.meta()["storage_url"] == f"{url}/exp"
        for trial in reader.trials():
            results = reader.results(trial.trial_id)
            assert [r["i"] for r in results] == [1, 2, 3, 4]  # rewound to the checkpoint
            assert [r["restored_from"] for r in results] == [0, 0, 2, 2]  # retried from S3
            retry = reader.events(trial.trial_id, kinds="started")[-1]["data"]
            assert retry["checkpoint"] == (
                f"{url}/exp/trials/{Path(trial.path).name}/checkpoints/checkpoint_000002"
            )
            remote = f"{bucket}/root/exp/trials/{Path(trial.path).name}"
            stored = keys(endpoint, remote)
            assert [k for k in stored if k.endswith(MANIFEST_FILE)] == [
                f"checkpoints/checkpoint_00000{i}/{MANIFEST_FILE}" for i in (3, 4)
            ]  # num_to_keep=2: the others were deleted, after the database said so
            assert "stdout.log" in stored and "stderr.log" in stored
            assert not Path(trial.path, "checkpoints").exists()  # nothing local

    best = grid.get_best_result()
    assert best.checkpoint is not None and best.checkpoint.path.startswith(f"{url}/exp/")
    with best.checkpoint.as_directory() as d:
        assert Path(d, "i").read_text() == "4"
    with StoreReader(remote_db(endpoint, f"{url}/exp", tmp_path / "remote")) as reader:
        assert reader.meta()["status"] == "finished"
        assert {t.status for t in reader.trials()} == {TrialStatus.TERMINATED}


@pytest.mark.slow
def test_trial_killed_mid_upload_resumes_from_the_previous_checkpoint(
    endpoint: str, bucket: str, staging: Path, proxy: CuttingProxy, tmp_path: Path
) -> None:
    url = f"s3://{bucket}/root"
    pid_file = tmp_path / "pid"
    proxy.arm(pid_file, limit=8 << 20)  # small uploads before the big one stay far below
    grid = tune.Tuner(
        counter,
        param_space={"x": 1, "iterations": 4, "big_at": 3, "pid_file": str(pid_file)},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(
            name="exp",
            storage_path=url,
            storage_filesystem=s3fs_for(proxy.endpoint),
            failure_config=tune.FailureConfig(max_failures=1),
            verbose=0,
        ),
    ).fit()

    assert proxy.killed is not None
    assert grid.num_errors == 0 and grid.num_terminated == 1
    with StoreReader(grid.experiment_path) as reader:
        (trial,) = reader.trials()
        (failed,) = reader.events(trial.trial_id, kinds="failed")
        assert failed["data"]["kind"] == FailureKind.CRASH.value
        previous = f"{url}/exp/trials/{trial.trial_id}/checkpoints/checkpoint_000002"
        assert reader.events(trial.trial_id, kinds="started")[-1]["data"]["checkpoint"] == previous
        results = reader.results(trial.trial_id)
        assert [r["i"] for r in results] == [1, 2, 3, 4]
        assert [r["restored_from"] for r in results] == [0, 0, 2, 2]
    assert verify_checkpoint(trial.latest_checkpoint or "") is None
    big = f"{bucket}/root/exp/trials/{trial.trial_id}/checkpoints/checkpoint_000003"
    assert "big.bin" in keys(endpoint, big)  # written again, whole, by the retry


@pytest.mark.slow
def test_pbt_exploits_copy_checkpoints_within_the_bucket(
    endpoint: str, bucket: str, staging: Path, tmp_path: Path
) -> None:
    from tunefleet.schedulers import PopulationBasedTraining

    url = f"s3://{bucket}/root"
    grid = tune.Tuner(
        drifting,
        param_space={"lr": tune.grid_search([1.0, 0.01]), **meeting(tmp_path, population=2)},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=PopulationBasedTraining(
                time_attr="training_iteration",
                perturbation_interval=2,
                hyperparam_mutations={"lr": [1.0, 0.5, 0.01]},
                seed=0,
            ),
        ),
        run_config=run_config(endpoint, url),
    ).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 2
    with StoreReader(grid.experiment_path) as reader:
        exploits = reader.events(kinds="exploit")
        assert exploits, "no trial exploited the other"
        for event in exploits:
            target = reader.trial(event["trial_id"])
            copies = [p for _, p, _ in reader.checkpoints(target.trial_id, include_deleted=True)]
            assert event["data"]["source_checkpoint"].startswith(f"{url}/exp/trials/")
            copied = (
                f"{url}/exp/trials/{Path(target.path).name}/checkpoints/"
                f"checkpoint_{event['data']['iteration']:06d}"
            )
            assert copied in copies
        for trial in reader.trials():
            assert trial.latest_checkpoint is not None
            assert verify_checkpoint(trial.latest_checkpoint) is None


DRIVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tunefleet as tune
    from tests.storage.test_storage_remote import counter, s3fs_for

    if __name__ == "__main__":
        endpoint, url = sys.argv[1:]
        tune.Tuner(
            counter,
            param_space={{"x": tune.grid_search([1, 2]), "iterations": 14, "pause": 0.12}},
            tune_config=tune.TuneConfig(metric="score", mode="max"),
            run_config=tune.RunConfig(
                name="exp",
                storage_path=url,
                storage_filesystem=s3fs_for(endpoint),
                sync_config=tune.SyncConfig(sync_period=0.2),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                verbose=0,
            ),
        ).fit()
    """
)


def workers_of(experiment: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(experiment) in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.slow
def test_driver_lost_experiment_resumes_from_the_bucket_on_a_fresh_machine(
    endpoint: str, bucket: str, staging: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{bucket}/root"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(repo=str(REPO)))
    driver = subprocess.Popen(
        [sys.executable, str(script), endpoint, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "TUNEFLEET_STORAGE": str(staging)},
    )
    try:  # until the bucket's copy of the database shows 3 results of each trial
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
            try:
                db = remote_db(endpoint, f"{url}/exp", tmp_path / "probe")
                conn = sqlite3.connect(db / "experiment.db")
                try:
                    sql = "SELECT trial_id, COUNT(*) FROM results GROUP BY trial_id"
                    per_trial = dict(conn.execute(sql).fetchall())
                finally:
                    conn.close()
            except (FileNotFoundError, sqlite3.DatabaseError):
                continue
            if len(per_trial) == 2 and min(per_trial.values()) >= 3:
                break
        else:
            pytest.fail(f"the driver did not get far enough: {driver.communicate()[0]}")
        os.killpg(driver.pid, signal.SIGKILL)  # the driver's machine is gone
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.communicate()
    deadline = time.monotonic() + 10
    while (left := workers_of(staging / "exp")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, "workers outlived their driver"
    shutil.rmtree(staging)  # another machine: nothing local is left
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("TUNEFLEET_STORAGE", str(fresh))

    fs = s3fs_for(endpoint)
    assert tune.Tuner.can_restore(f"{url}/exp", storage_filesystem=fs)
    grid = tune.Tuner.restore(f"{url}/exp", counter, storage_filesystem=fs).fit()

    assert Path(grid.experiment_path) == fresh / "exp"
    assert grid.num_errors == 0 and grid.num_terminated == 2
    with StoreReader(grid.experiment_path) as reader:
        for trial in reader.trials():
            results = reader.results(trial.trial_id)
            assert [r["i"] for r in results] == list(range(1, 15))  # each iteration once
            resumed = reader.events(trial.trial_id, kinds="started")[-1]["data"]["checkpoint"]
            assert resumed is not None and resumed.startswith(f"{url}/exp/trials/")
            assert results[-1]["restored_from"] == int(resumed[-6:])
            assert Path(trial.path).parent == fresh / "exp" / "trials"
    with StoreReader(remote_db(endpoint, f"{url}/exp", tmp_path / "after")) as reader:
        assert reader.meta()["status"] == "finished"


def test_fsspec_defaults_from_the_environment_and_tune_run_resume(
    endpoint: str, bucket: str, staging: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    # No storage_filesystem: the driver and the trials reach the bucket as configured
    # by the environment (here botocore's AWS_* variables).
    for name, value in (
        ("AWS_ACCESS_KEY_ID", KEY["key"]),
        ("AWS_SECRET_ACCESS_KEY", KEY["secret"]),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", endpoint),
    ):
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()  # none made before these settings is reused
    url = f"s3://{bucket}/root"
    try:
        for _ in range(2):  # the second run finds the experiment in the bucket: resumed, done
            analysis = tune.run(
                counter,
                config={"x": 1, "iterations": 2},
                storage_path=url,
                name="exp",
                resume="AUTO",
                keep_checkpoints_num=1,
                verbose=0,
            )
            assert [t.status for t in analysis.trials] == [TrialStatus.TERMINATED]
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert keys(endpoint, f"{bucket}/root") == [
        "exp/experiment.db",
        f"exp/trials/{analysis.trials[0].trial_id}/checkpoints/checkpoint_000002/{MANIFEST_FILE}",
        f"exp/trials/{analysis.trials[0].trial_id}/checkpoints/checkpoint_000002/i",
        f"exp/trials/{analysis.trials[0].trial_id}/stderr.log",
        f"exp/trials/{analysis.trials[0].trial_id}/stdout.log",
    ]
    with StoreReader(analysis.experiment_path) as reader:
        assert [e["data"]["action"] for e in reader.events(kinds="resume")] == []  # finished
        assert reader.meta()["status"] == "finished" and "resumed_at" in reader.meta()


# -- errors name the value -----------------------------------------------------------------------


def test_bad_storage_values_are_named(endpoint: str) -> None:
    with pytest.raises(ValueError, match=r"storage_path='s3://' is not valid: .*no bucket"):
        tune.RunConfig(storage_path="s3://").validate()
    with pytest.raises(ValueError, match=r"'nosuchproto://b/x'.*'nosuchproto' is not a protocol"):
        tune.RunConfig(storage_path="nosuchproto://b/x").validate()
    with pytest.raises(ValueError, match="storage_filesystem is given but"):
        tune.RunConfig(storage_filesystem=s3fs_for(endpoint)).validate()
    with pytest.raises(TypeError, match="is not an fsspec filesystem"):
        tune.RunConfig(storage_path="s3://b/x", storage_filesystem=object()).validate()
    with pytest.raises(ValueError, match=r"'gs://b/x' does not match .*S3FileSystem"):
        tune.RunConfig(storage_path="gs://b/x", storage_filesystem=s3fs_for(endpoint)).validate()
    with pytest.raises(ValueError, match=r"SyncConfig.sync_period=0 is not valid"):
        tune.RunConfig(sync_config=tune.SyncConfig(sync_period=0)).validate()
    with pytest.raises(ValueError, match="takes a local directory"):
        tune.Checkpoint.from_directory("s3://b/x/checkpoint_000001")
    with pytest.raises(ValueError, match=r"'s3:/b/x' .* did you mean 's3://b/x'\?"):
        tune.RunConfig(storage_path="s3:/b/x").validate()
    tune.RunConfig(storage_path="file:///tmp/x").validate()  # a local path


def test_missing_libraries_name_the_extra_to_install() -> None:
    # A real missing package: the import of fsspec (or gcsfs) is made to fail.
    script = textwrap.dedent(
        """
        import sys
        sys.modules[sys.argv[1]] = None
        import tunefleet as tune
        try:
            tune.RunConfig(storage_path=sys.argv[2]).validate()
        except ImportError as exc:
            print(exc)
        """
    )
    for module, value, extra in (("fsspec", "s3://b/x", "s3"), ("gcsfs", "gs://b/x", "gcs")):
        out = subprocess.run(
            [sys.executable, "-c", script, module, value], capture_output=True, text=True
        )
        assert f"{value!r} needs" in out.stdout, out.stdout + out.stderr
        assert f'pip install "tunefleet[{extra}]"' in out.stdout


def test_unreachable_bucket_fails_before_any_trial_runs(
    endpoint: str, staging: Path, tmp_path: Path
) -> None:
    with pytest.raises(OSError, match=r"Could not write the experiment to s3://no-such-bucket/"):
        tune.Tuner(
            counter,
            param_space={"x": 1, "iterations": 1},
            run_config=run_config(endpoint, "s3://no-such-bucket/root"),
        ).fit()
    fs = s3fs_for(endpoint)
    with pytest.raises(FileNotFoundError, match=r"No tunefleet experiment at s3://"):
        tune.Tuner.restore(
            "s3://no-such-bucket/root/exp", counter, storage_filesystem=s3fs_for(endpoint)
        )
    assert not tune.Tuner.can_restore("s3://no-such-bucket/root/exp", fs)
