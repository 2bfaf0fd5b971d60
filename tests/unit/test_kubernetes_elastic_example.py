"""examples/kubernetes/elastic: the discovery script keeps exactly the worker pods that can
take a worker now (Running, Ready, not being deleted, with an IP), in a stable order, as
`host:slots` lines tfps-run's parser reads back; the manifests agree with each other
(the selector, the ssh port, the launcher's command as tfps-run parses it, the Role)."""

import importlib.util
import shlex

import pytest

from cluster import REPO
from tf_ps_ops.runner import discovery, run

yaml = pytest.importorskip("yaml")
EXAMPLE = REPO / "examples" / "kubernetes" / "elastic"
_spec = importlib.util.spec_from_file_location("discover_hosts", EXAMPLE / "discover_hosts.py")
discover_hosts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(discover_hosts)


def pod(name, phase="Running", ready="True", ip="10.1.0.5", deleting=False):
    metadata = {"name": name, "labels": {"tfps-job": "digits"}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    status = {"phase": phase, "conditions": [{"type": "PodScheduled", "status": "True"},
                                             {"type": "Ready", "status": ready}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": metadata, "status": status}


def test_only_running_ready_pods_not_being_deleted_are_hosts():
    pods = {"kind": "List", "items": [
        pod("w-3", ip="10.1.0.8"),
        pod("w-1", ip="10.1.0.6"),
        pod("w-2", phase="Pending", ip=None),              # not scheduled yet
        pod("w-4", ready="False", ip="10.1.0.9"),          # sshd not listening yet
        pod("w-5", deleting=True, ip="10.1.0.10"),         # scaled away, terminating
        pod("w-6", phase="Succeeded", ip="10.1.0.11"),
        pod("w-0", ip="fd00::5"),
    ]}
    hosts = discover_hosts.ready_hosts(pods, 2)
    assert hosts == [("fd00::5", 2), ("10.1.0.6", 2), ("10.1.0.8", 2)]  # by pod name
    assert discover_hosts.ready_hosts({"items": []}, 1) == []


def test_its_output_reads_back_as_the_driver_reads_it():
    pods = {"items": [pod("w-0", ip="fd00::5"), pod("w-1", ip="10.1.0.6")]}
    out = discover_hosts.format_hosts(discover_hosts.ready_hosts(pods, 3))
    assert out == "[fd00::5]:3\n10.1.0.6:3\n"
    assert discovery.parse_hosts_output(out, 1, "test") == [("fd00::5", 3), ("10.1.0.6", 3)]
    assert discover_hosts.kubectl_command("tfps-job=digits", "ml") == [
        "kubectl", "get", "pods", "-l", "tfps-job=digits", "-o", "json", "-n", "ml"]


def test_a_kubectl_failure_is_an_exit_code_with_its_stderr(capsys):
    code = discover_hosts.main(["--selector", "a=b", "--kubectl", str(EXAMPLE / "missing")])
    assert code == 2
    assert "discover_hosts: cannot run kubectl" in capsys.readouterr().err


def test_the_manifests_agree():
    docs = {d["kind"]: d for d in yaml.safe_load_all((EXAMPLE / "elastic.yaml").read_text())}
    workers, launcher = docs["StatefulSet"], docs["Pod"]
    labels = workers["spec"]["template"]["metadata"]["labels"]
    assert workers["spec"]["selector"]["matchLabels"] == labels
    worker = workers["spec"]["template"]["spec"]["containers"][0]
    ssh_port = worker["readinessProbe"]["tcpSocket"]["port"]
    assert f"-p {ssh_port}" in " ".join(worker["command"])
    command = launcher["spec"]["containers"][0]["command"]
    assert command[0] == "tfps-run"
    args = run.parse_args(command[1:])
    script = shlex.split(args.host_discovery_script)
    assert script[:2] == ["python3", "/app/examples/kubernetes/elastic/discover_hosts.py"]
    selector = script[script.index("--selector") + 1]
    assert dict([selector.split("=")]) == labels
    assert args.elastic and (args.min_np, args.max_np) == (2, 8)
    assert args.ssh_port == ssh_port
    assert args.command[-1] == "/app/examples/train_digits_elastic.py"
    assert (REPO / "examples" / "train_digits_elastic.py").exists()
    # The launcher's service account may list the pods.
    assert launcher["spec"]["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    assert docs["RoleBinding"]["roleRef"]["name"] == docs["Role"]["metadata"]["name"]
    assert {"list"} <= set(docs["Role"]["rules"][0]["verbs"])
    assert "pods" in docs["Role"]["rules"][0]["resources"]
