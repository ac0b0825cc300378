"""The cluster configs in examples/clusters/ are valid for the Ray they are written for.

aws.yaml and gcp.yaml are checked against the schema that ships with Ray
(``ray/autoscaler/ray-schema.json``: every key, at the top level and in each node type),
then through the launcher's own preparation and checks, as `ray up` does before it
starts anything. kuberay.yaml is a RayCluster whose shape is checked here (there is no
CRD schema without a Kubernetes cluster).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import EXAMPLES

yaml = pytest.importorskip("yaml")
CLUSTERS = EXAMPLES / "clusters"


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((CLUSTERS / name).read_text())
    assert isinstance(data, dict)
    return data


def _ray_schema() -> dict[str, Any]:
    pytest.importorskip("ray")
    pytest.importorskip("jsonschema")
    import ray.autoscaler

    path = Path(ray.autoscaler.__file__).with_name("ray-schema.json")
    if not path.is_file():
        pytest.skip(f"this Ray has no {path.name}")
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml"])
def test_launcher_config_follows_rays_schema(name: str) -> None:
    schema = _ray_schema()
    import jsonschema

    config = _load(name)
    jsonschema.validate(config, schema)
    assert schema.get("additionalProperties") is False  # so a misspelt key fails above
    assert config["head_node_type"] in config["available_node_types"]
    assert config["available_node_types"][config["head_node_type"]]["resources"] == {"CPU": 0}
    setup = " ".join(config["setup_commands"] + config["head_setup_commands"])
    # with the storage extra, from the wheel the launcher copies to every node
    wheel = "tunefleet-0.1.0-py3-none-any.whl"
    assert (
        f'] @ file:///tmp/tunefleet-wheels/{wheel}"' in setup
        and 'pip install -U "tunefleet[ray,' in setup
    )
    assert config["file_mounts"] == {f"/tmp/tunefleet-wheels/{wheel}": f"dist/{wheel}"}
    workers = [t for n, t in config["available_node_types"].items() if n != "head"]
    assert workers and all(t["min_workers"] == 0 for t in workers)


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml"])
def test_launcher_config_passes_rays_own_checks(name: str) -> None:
    _ray_schema()
    try:  # the launcher's internals: skipped, not failed, if a Ray release moves them
        from ray.autoscaler._private.util import prepare_config, validate_config
    except ImportError as exc:
        pytest.skip(f"Ray's launcher checks moved: {exc}")
    validate_config(prepare_config(_load(name)))


def test_kuberay_manifest_is_a_raycluster_with_tunefleet() -> None:
    manifest = _load("kuberay.yaml")
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayCluster"
    spec = manifest["spec"]
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    images = [c["image"] for c in spec["headGroupSpec"]["template"]["spec"]["containers"]]
    for group in spec["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        images += [c["image"] for c in group["template"]["spec"]["containers"]]
    assert len(set(images)) == 1  # one image, with the same Ray everywhere
    text = (CLUSTERS / "kuberay.yaml").read_text()
    assert f"FROM rayproject/ray:{spec['rayVersion']}" in text
    assert 'pip install --no-cache-dir "tunefleet[ray,s3] @ file:///tmp/tunefleet-' in text
