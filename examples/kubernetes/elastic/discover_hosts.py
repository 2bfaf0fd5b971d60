#!/usr/bin/env python3
"""Host discovery for `tfps-run --host-discovery-script` on Kubernetes: prints the job's
worker pods that can take a worker now, `podIP:slots` one a line (docs/elastic.md).

    tfps-run --host-discovery-script \
        "python3 examples/kubernetes/elastic/discover_hosts.py --selector tfps-job=digits" \
        --min-np 2 --max-np 8 --ssh-port 2222 python3 examples/train_digits_elastic.py

It runs `kubectl get pods -l SELECTOR -o json` (in the launcher pod: its service
account needs `list` on pods, elastic.yaml) and keeps the pods that are Running, Ready
and not being deleted, with an IP. A pod scaled away, evicted or failing its readiness
probe drops out of the list, and the driver stops its workers; a new replica appears
once it is ready (its sshd listens), and gets workers at the members' next commit.
Standard library only; a kubectl failure is an exit code the driver reports.
"""

import argparse
import json
import subprocess
import sys


def ready_hosts(pods, slots):
    """[(ip, slots)] of the pods (a `kubectl get pods -o json` document) that can run
    workers now, in the order of their names (stable across runs)."""
    hosts = []
    for pod in sorted(pods.get("items", []), key=lambda p: p["metadata"]["name"]):
        status = pod.get("status", {})
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions", []))
        if (pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running"
                or not ready or not status.get("podIP")):
            continue
        hosts.append((status["podIP"], slots))
    return hosts


def format_hosts(hosts):
    """The script's output: `ip:slots` lines (`[ip]:slots` for IPv6), as horovodrun's."""
    return "".join(f"[{ip}]:{slots}\n" if ":" in ip else f"{ip}:{slots}\n"
                   for ip, slots in hosts)


def kubectl_command(selector, namespace=None, kubectl="kubectl"):
    command = [kubectl, "get", "pods", "-l", selector, "-o", "json"]
    if namespace:
        command += ["-n", namespace]
    return command


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--selector", required=True,
                        help="label selector of the worker pods, e.g. tfps-job=digits")
    parser.add_argument("--namespace", help="default: kubectl's (the pod's own)")
    parser.add_argument("--slots", type=int, default=1, help="workers per pod (default 1)")
    parser.add_argument("--kubectl", default="kubectl")
    args = parser.parse_args(argv)
    try:
        result = subprocess.run(kubectl_command(args.selector, args.namespace, args.kubectl),
                                capture_output=True, text=True, timeout=8)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"discover_hosts: cannot run kubectl: {e}", file=sys.stderr)
        return 2
    if result.returncode != 0:
        print(f"discover_hosts: kubectl exited with code {result.returncode}: "
              f"{result.stderr.strip()[-1000:]}", file=sys.stderr)
        return 2
    sys.stdout.write(format_hosts(ready_hosts(json.loads(result.stdout), args.slots)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
