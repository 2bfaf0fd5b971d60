"""How long `tfps-run --elastic -H` (over ssh, docs/elastic.md) takes to recover, on two
network-namespace hosts with a throwaway sshd each (tests/multihost/ssh_support.py), next
to the same job on one host without ssh. Timestamps are taken here as each output line
of tfps-run arrives (run inside host 0; every role over ssh).

    python benchmarks/elastic_ssh_recovery.py [--repeats 3] [--out benchmarks/results/elastic_ssh_recovery]

Scenarios (the worker is tests/multiprocess/elastic_workers/loop_worker.py; 3 workers,
hosts h0:1,h1:2, a server per host, TFPS_HEARTBEAT_TIMEOUT=5):
  local_worker_loss   one host, no ssh (`-np 3 -ns 2`): w2 SIGKILLs itself at step 3
  ssh_worker_loss     over ssh: w2 (on h1) SIGKILLs itself at step 3; recovery: the
                      driver's line naming the loss -> both survivors re-initialised
  ssh_host_loss       over ssh: h1's link goes down 3 s after the workers started;
                      detection: link down -> the driver's line naming the loss (ssh
                      keepalive); recovery: that line -> w0 re-initialised alone
Needs root and `ip netns`. Not asserted anywhere; the machine is shared, so compare
within one run.
"""

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests" / "multihost"))
from netns import Hosts  # noqa: E402
from ssh_support import SSH_PORT, SshHosts, sshd_binary  # noqa: E402

WORKER = REPO / "tests" / "multiprocess" / "elastic_workers" / "loop_worker.py"
RUN_PY = REPO / "tf_ps_ops" / "run.py"
ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "TFPS_TIMEOUT": "30",
       "OPENBLAS_NUM_THREADS": "1", "TFPS_HEARTBEAT_TIMEOUT": "5",
       "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}


def _lines(proc, began):
    return [(time.monotonic() - began, line.rstrip("\n")) for line in proc.stdout]


def _end_cut_off(hosts, ssh, limit_s=20.0):
    """SIGTERMs what the lost host still runs (the cut-off wrappers and workers), so that
    each wrapper removes its worker's folder before the next run."""
    for pid in set(hosts.pids(hosts.netns(1))) - ssh.pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    give_up = time.monotonic() + limit_s
    while set(hosts.pids(hosts.netns(1))) - ssh.pids() and time.monotonic() < give_up:
        time.sleep(0.2)


def run_once(name, hosts, ssh):
    with tempfile.TemporaryDirectory(prefix="tfps-essh-bench-") as out:
        host_loss = name == "ssh_host_loss"
        args = [out, "6", "1", "-", "-1"] if host_loss else [out, "6", "2", "w2", "3"]
        command = [sys.executable, str(WORKER), *args]
        began = time.monotonic()
        if name == "local_worker_loss":
            env = {**os.environ, **ENV}
            proc = subprocess.Popen([sys.executable, RUN_PY, "-np", "3", "-ns", "2",
                                     "--elastic", "--timeout", "150", *command],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env)
        else:
            proc = hosts.popen(0, [sys.executable, RUN_PY, "-H",
                                   f"{hosts.address(0)}:1,{hosts.address(1)}:2",
                                   "--ssh-port", str(SSH_PORT), "--ssh-config-file",
                                   ssh.config, "--timeout", "150", "--elastic", *command],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=ENV)
        link_down = []
        if host_loss:
            def cut():
                while len(list(Path(out).glob("initing-*"))) < 3 and proc.poll() is None:
                    time.sleep(0.05)
                time.sleep(3.0)
                link_down.append(time.monotonic() - began)
                subprocess.run(["ip", "-n", hosts.bridge_ns, "link", "set", "v1", "down"],
                               check=True, timeout=30)
            cutter = threading.Thread(target=cut)
            cutter.start()
        lines = _lines(proc, began)
        code = proc.wait()
        if host_loss:
            cutter.join()
            subprocess.run(["ip", "-n", hosts.bridge_ns, "link", "set", "v1", "up"],
                           check=True, timeout=30)
            _end_cut_off(hosts, ssh)
    if code != 0:
        raise RuntimeError(f"{name}: tfps-run exited {code}:\n" +
                           "\n".join(text for _, text in lines[-40:]))
    start_text = "lost its ssh session" if host_loss else "worker w2 (rank 2)"
    end_text = "averages now divide by 1" if host_loss else "averages now divide by 2"
    survivors = 1 if host_loss else 2
    start = next(t for t, text in lines if start_text in text)
    ends = [t for t, text in lines if t > start and end_text in text]
    if len(ends) < survivors:
        raise RuntimeError(f"{name}: {len(ends)} of {survivors} survivors recovered")
    result = {"recovery_s": round(max(ends[:survivors]) - start, 4),
              "job_s": round(lines[-1][0], 2)}
    if host_loss:
        result["detection_s"] = round(start - link_down[0], 4)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" /
                                             "elastic_ssh_recovery"))
    args = parser.parse_args()
    sshd, why = sshd_binary()
    if sshd is None:
        sys.exit(why)
    results = {}
    with Hosts(2, rate="1gbit") as hosts, tempfile.TemporaryDirectory() as keys:
        ssh = SshHosts(hosts, Path(keys), sshd)
        for name in ("local_worker_loss", "ssh_worker_loss", "ssh_host_loss"):
            runs = [run_once(name, hosts, ssh) for _ in range(args.repeats)]
            results[name] = {"runs": runs, "median_recovery_s": statistics.median(
                r["recovery_s"] for r in runs)}
            if name == "ssh_host_loss":
                results[name]["median_detection_s"] = statistics.median(
                    r["detection_s"] for r in runs)
            print(f"{name}: {runs}", flush=True)
    load = os.getloadavg()
    report = {"command": "python benchmarks/elastic_ssh_recovery.py " +
              " ".join(sys.argv[1:]), "loadavg_before_end": load, "results": results}
    Path(args.out + ".json").write_text(json.dumps(report, indent=1) + "\n")
    rows = "\n".join(
        f"| {name} | {r['median_recovery_s']:.3f} | "
        + ", ".join(f"{x['recovery_s']:.3f}" for x in r["runs"]) + " | "
        + (f"{r['median_detection_s']:.2f}" if "median_detection_s" in r else "-") + " | "
        + f"{statistics.median(x['job_s'] for x in r['runs']):.1f} |"
        for name, r in results.items())
    Path(args.out + ".md").write_text(
        "# Elastic recovery over ssh (benchmarks/elastic_ssh_recovery.py)\n\n"
        f"`{report['command']}` on the shared 2-core machine, load average "
        f"{load[0]:.1f}. Recovery: from the driver's line naming the loss to the last "
        "survivor's line saying it re-initialised into the new epoch. Detection (a lost "
        "host): from its link going down to the driver's line (ssh keepalive, "
        "TFPS_HEARTBEAT_TIMEOUT=5: ServerAliveInterval=1, 3 tries).\n\n"
        "| scenario | median recovery (s) | runs (s) | median detection (s) | median job (s) |\n"
        "|---|---|---|---|---|\n" + rows + "\n")


if __name__ == "__main__":
    main()
