"""examples/kubernetes: the TFJob manifest, read as Kubeflow's training operator reads
it, gives every replica a TF_CONFIG; fed to tf_ps_ops' resolver, it makes a consistent
job (ps replicas serve, ps 0 also schedules on a port the manifest declares, chief and
worker are ranks 0..N-1), and the Dockerfile copies what the commands run."""

import json

import pytest

from cluster import REPO
from tf_ps_ops.common import config as _config
from tf_ps_ops.runner import role

yaml = pytest.importorskip("yaml")
pytest.importorskip("tensorflow")

EXAMPLE = REPO / "examples" / "kubernetes"


def replica_tf_configs(manifest):
    """{(type, index): (TF_CONFIG dict, container)} as the training operator sets them:
    host <job>-<type>-<index>.<namespace>.svc, port of the container's tfjob-port."""
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    cluster, containers = {}, {}
    for replica_type, spec in manifest["spec"]["tfReplicaSpecs"].items():
        container = spec["template"]["spec"]["containers"][0]
        port = next(p["containerPort"] for p in container["ports"]
                    if p["name"] == "tfjob-port")
        kind = replica_type.lower()
        cluster[kind] = [f"{name}-{kind}-{i}.{namespace}.svc:{port}"
                         for i in range(spec["replicas"])]
        containers[kind] = container
    return {(kind, i): ({"cluster": cluster, "task": {"type": kind, "index": i},
                         "environment": "cloud"}, containers[kind])
            for kind, addresses in cluster.items() for i in range(len(addresses))}


def test_manifest_makes_a_consistent_job():
    manifest = yaml.safe_load((EXAMPLE / "tfjob.yaml").read_text())
    assert manifest["kind"] == "TFJob"
    replicas = replica_tf_configs(manifest)
    assert sorted(replicas) == [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0)]
    layouts = {key: _config.read_layout({"TF_CONFIG": json.dumps(tf_config)})
               for key, (tf_config, _) in replicas.items()}
    scheduler = ("tfps-digits-ps-0.default.svc", 2223)
    assert {layout.scheduler for layout in layouts.values()} == {scheduler}
    ranks = {key: _config.read_cluster({"TF_CONFIG": json.dumps(tf_config)}).rank
             for key, (tf_config, _) in replicas.items() if key[0] != "ps"}
    assert ranks == {("chief", 0): 0, ("worker", 0): 1}
    for key, (_, container) in replicas.items():
        # Roles listen beyond loopback: each holds the job key (a refusal to start otherwise).
        env = {e["name"]: e["value"] for e in container["env"]}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert env["TFPS_AUTH_KEY_FILE"].startswith(mounts["job-key"] + "/"), key
        command = container["command"]
        if key[0] == "ps":
            assert command[:3] == ["python3", "-m", "tf_ps_ops.role"]
            roles = [r for r, _ in role.server_commands(layouts[key], "ps_server")]
            assert roles == (["scheduler", "server"] if key == ("ps", 0) else ["server"])
            # The scheduler's port is declared on the ps pods.
            assert scheduler[1] in [p["containerPort"] for p in container["ports"]]
        else:
            assert "examples/train_digits.py" in command
            assert (REPO / command[command.index("examples/train_digits.py")]).exists()


def test_dockerfile_installs_the_package_and_the_demo():
    text = (EXAMPLE / "Dockerfile").read_text()
    assert "COPY . /app" in text and "pip install" in text
    assert "examples/requirements.txt" in text and (REPO / "examples/requirements.txt").exists()
