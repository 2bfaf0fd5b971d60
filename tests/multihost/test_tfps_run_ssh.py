"""tfps-run -H over real ssh: two netns hosts, each with a throwaway sshd (port 2222,
keys and configs in a temp folder, tests/multihost/ssh_support.py); tfps-run runs inside
host 0 and reaches both hosts with ssh (`--ssh-config-file`, `--ssh-port`). A job of a
scheduler, a server per host and a TensorFlow-free worker per host push_pulls against
NumPy; a failing worker and a Ctrl-C end the job and every remote process with it; the
namespaces are removed afterwards, also on failure.

Needs root and `ip netns` (skipped otherwise), sshd (installed with apt-get when missing;
skipped with the reason when that fails) and the native build. ~10-30 s.
"""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from netns_support import AVAILABLE, WHY_NOT, namespaces, require_build  # noqa: E402
from netns import Hosts  # noqa: E402
from ssh_support import SSH_PORT, SshHosts, sshd_binary  # noqa: E402
from sigint import default_sigint  # noqa: E402

RUN_PY = REPO / "tf_ps_ops" / "run.py"
WORKER = Path(__file__).parent / "sum_worker.py"
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(180)]

# Both ranks say they started and touch a file (the hosts share this file system); rank 1
# then fails once rank 0's file exists, while rank 0 would sleep for two minutes.
SLEEPING = ("import os, pathlib, sys, time\nr = os.environ['TFPS_RANK']\n"
            "pathlib.Path(os.environ['MARKERS'], r).touch()\n"
            "print('started', r, flush=True)\n")
FAILING = SLEEPING + (
    "while r == '1' and not pathlib.Path(os.environ['MARKERS'], '0').exists():\n"
    "    time.sleep(0.05)\n"
    "sys.exit(3) if r == '1' else time.sleep(120)")
SLEEPING += "time.sleep(120)"


@pytest.fixture
def ssh_hosts(tmp_path):
    require_build("_core*.so")
    sshd, why = sshd_binary()
    if sshd is None:
        pytest.skip(why)
    with Hosts(2, rate="1gbit") as hosts:
        names = set(hosts.names + [hosts.bridge_ns])
        yield hosts, SshHosts(hosts, tmp_path, sshd)
    assert not names & namespaces()


def tfps_run(hosts, ssh, host_list, command, env=None):
    """tfps-run started inside host 0 (stdout and stderr merged); `host_list` is -H's
    value, or a list of flags that say the hosts (--hostfile F)."""
    host_args = ["-H", host_list] if isinstance(host_list, str) else host_list
    argv = [sys.executable, RUN_PY, *host_args, "--ssh-port", str(SSH_PORT),
            "--ssh-config-file", ssh.config, "--timeout", "120", *command]
    full_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "TFPS_TIMEOUT": "30",
                "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    # The ctrl-c case needs SIGINT's default action (sigint.py).
    return hosts.popen(0, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=full_env, preexec_fn=default_sigint)


def job_processes(hosts, ssh):
    """Pids in the hosts other than the sshd daemons (and what tfps-run left)."""
    return {i: set(hosts.pids(hosts.netns(i))) - ssh.pids() for i in range(hosts.n)}


def wait_for_no_job_processes(hosts, ssh, launcher_pid, limit_s=15):
    give_up = time.monotonic() + limit_s
    while True:
        left = job_processes(hosts, ssh)
        left[0].discard(launcher_pid)
        if not any(left.values()) or time.monotonic() > give_up:
            return left
        time.sleep(0.2)


def test_two_host_job_over_ssh_sums_like_numpy(ssh_hosts):
    hosts, ssh = ssh_hosts
    a0, a1 = hosts.address(0), hosts.address(1)
    tx_before = hosts.link_bytes(1)[0]
    launcher = tfps_run(hosts, ssh, f"{a0}:1,{a1}:1", [sys.executable, WORKER])
    out, _ = launcher.communicate(timeout=150)
    assert launcher.returncode == 0, out[-6000:]
    assert f"[{a0}:worker 0] ok" in out and f"[{a1}:worker 1] ok" in out, out[-6000:]
    assert f"[{a0}:scheduler]" in out and f"[{a1}:server 1]" in out
    # Host 1's worker and server were reached through the link, not loopback.
    assert hosts.link_bytes(1)[0] - tx_before > 3 * (4 << 20)
    assert wait_for_no_job_processes(hosts, ssh, launcher.pid) == {0: set(), 1: set()}


def test_hostfile_example_trains_on_two_hosts(ssh_hosts, tmp_path):
    """examples/ssh/README.md's command: examples/ssh/hostfile, with the hosts' addresses
    for node1 and node2 and one slot each (this machine has 2 cores), and
    examples/train_digits.py, which learns."""
    hosts, ssh = ssh_hosts
    a0, a1 = hosts.address(0), hosts.address(1)
    text = (REPO / "examples" / "ssh" / "hostfile").read_text()
    assert "node1 slots=2" in text and "node2 slots=2" in text
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(text.replace("node1 slots=2", f"{a0} slots=1")
                        .replace("node2 slots=2", f"{a1} slots=1"))
    launcher = tfps_run(hosts, ssh, ["--hostfile", str(hostfile)],
                        [sys.executable, REPO / "examples" / "train_digits.py", "--epochs", "2"],
                        env={"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                             "TF_CPP_MIN_LOG_LEVEL": "2",
                             # Importing TensorFlow on a loaded 2-core machine: 30 s is short.
                             "TFPS_TIMEOUT": "120"})
    out, _ = launcher.communicate(timeout=170)
    assert launcher.returncode == 0, out[-6000:]
    accuracy = re.findall(rf"\[{re.escape(a0)}:worker 0\] .*held-out: .*accuracy ([\d.]+)", out)
    assert len(accuracy) == 1 and float(accuracy[0]) > 0.8, out[-6000:]
    assert f"[{a1}:server 1]" in out, out[-6000:]


@pytest.mark.parametrize("interface", [None, "eth0"])
def test_localhost_entry_runs_without_ssh_beside_a_remote_host(ssh_hosts, interface):
    """This host's address for the others: on the route to host 1, or eth0's (asked here
    and, for host 1, over ssh)."""
    hosts, ssh = ssh_hosts
    a1 = hosts.address(1)
    flags = ["--network-interface", interface] if interface else []
    launcher = tfps_run(hosts, ssh, f"localhost:1,{a1}:1", [*flags, sys.executable, WORKER])
    out, _ = launcher.communicate(timeout=150)
    assert launcher.returncode == 0, out[-6000:]
    assert "[localhost:worker 0] ok" in out and f"[{a1}:worker 1] ok" in out, out[-6000:]
    # Host 1's server registered at host 0's address: the scheduler is not on loopback.
    assert f"server 1 registered from {a1}:" in out, out[-6000:]
    assert "registered from 127.0.0.1" not in out, out[-6000:]


@pytest.mark.parametrize("how", ["worker fails", "ctrl-c"])
def test_failure_or_ctrl_c_stops_every_remote_process(ssh_hosts, how, tmp_path):
    hosts, ssh = ssh_hosts
    a0, a1 = hosts.address(0), hosts.address(1)
    code = FAILING if how == "worker fails" else SLEEPING
    markers = tmp_path / "markers"
    markers.mkdir()
    launcher = tfps_run(hosts, ssh, f"{a0}:1,{a1}:1", [sys.executable, "-c", code],
                        env={"MARKERS": str(markers)})
    lines = []
    if how == "ctrl-c":
        while sum("started" in line for line in lines) < 2:
            line = launcher.stdout.readline()
            assert line, "tfps-run ended early:\n" + "".join(lines)
            lines.append(line)
        # Both remote workers run: the ssh sessions are up. Ctrl-C reaches the launcher.
        launcher.send_signal(signal.SIGINT)
    out, _ = launcher.communicate(timeout=60)
    out = "".join(lines) + out
    assert sorted(p.name for p in markers.iterdir()) == ["0", "1"], out[-4000:]
    if how == "worker fails":
        assert launcher.returncode == 3, out[-4000:]
        assert f"tfps-run: {a1}:worker 1 exited with code 3; stopped the others" in out
    else:
        assert launcher.returncode == 128 + signal.SIGINT, out[-4000:]
        assert "tfps-run: interrupted; stopped all processes" in out
    # The sleeping remote worker (and the servers, the scheduler and the ssh sessions)
    # are gone from both hosts: only the sshd daemons are left.
    assert wait_for_no_job_processes(hosts, ssh, launcher.pid) == {0: set(), 1: set()}
