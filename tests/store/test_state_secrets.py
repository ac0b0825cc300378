"""Algorithms' saved states read back exactly, and still hold no secret."""

from __future__ import annotations

from pathlib import Path

import tunefleet as tune
from tunefleet._redact import redact
from tunefleet.store import ExperimentStore, StoreReader


def test_a_state_keeps_values_under_keys_that_look_secret(tmp_path: Path) -> None:
    # Ax's snapshot names its generation step "generator_key: Sobol"; hiding it as a
    # secret made a resumed AxSearch restart its Sobol' sequence.
    state = {"generator_key": "Sobol", "auth_mode": ["basic", "oauth"], "token_budget": "12"}
    with ExperimentStore(tmp_path / "exp") as store:
        store.save_state("searcher", state)
    with StoreReader(tmp_path / "exp") as reader:
        assert reader.state("searcher") == state


def test_a_state_hides_secrets_and_secrets_known_from_configs(tmp_path: Path) -> None:
    redact({"api_key": "sk-live-123456"})  # as when the trial's config was recorded
    state = {
        "space": {"api_key": "sk-live-123456", "lr": [0.1, 0.2]},
        "wrapped": tune.Secret("hunter2-password"),
        "url": "postgresql://user:pw1234567@db/x",
    }
    with ExperimentStore(tmp_path / "exp") as store:
        store.save_state("searcher", state)
    with StoreReader(tmp_path / "exp") as reader:
        saved = reader.state("searcher")
    assert saved == {
        "space": {"api_key": "***", "lr": [0.1, 0.2]},
        "wrapped": "***",
        "url": "postgresql://user:***@db/x",
    }
    for path in (tmp_path / "exp").glob("experiment.db*"):  # the WAL too, if any
        text = path.read_bytes()
        for secret in (b"sk-live-123456", b"hunter2-password", b"pw1234567"):
            assert secret not in text, (path, secret)
