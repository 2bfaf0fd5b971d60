"""IPv6: TFPS_BIND / ps_server --bind and the scheduler's address take IPv6 literals
([::1]:port), sockets get ZMQ_IPV6 for them, and ::1 counts as loopback (no key needed).

A scheduler and a server on [::1] only, and two real workers (the core engine, sums checked
against NumPy by loop_worker.py) that reach them through TFPS_SCHEDULER=[::1]:port. On main
TFPS_BIND refused anything with a colon.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile import wait_port_file
from native import PS_SERVER

pytestmark = pytest.mark.timeout(120)

WORKER = Path(__file__).parent / "core_workers" / "loop_worker.py"


def ipv6_loopback():
    """Why ::1 cannot be used here, or None."""
    if not socket.has_ipv6:
        return "Python was built without IPv6"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as e:
        return f"the kernel has no IPv6 loopback (::1): {e}"
    return None


@pytest.fixture
def need_ipv6():
    why = ipv6_loopback()
    if why:
        pytest.skip(why)


def test_two_workers_sum_over_ipv6_loopback(tmp_path, need_ipv6):
    env = {**os.environ, "TFPS_TIMEOUT": "30", "TFPS_HIERARCHICAL": "0"}
    env.pop("TFPS_AUTH_KEY_FILE", None)  # ::1 is loopback: no key needed
    procs, logs = [], []

    def spawn(args, name, extra):
        log = open(tmp_path / f"{name}.log", "w+")
        logs.append(log)
        procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                      env={**env, **extra}))
        return procs[-1]

    try:
        port_file = tmp_path / "scheduler.port"
        scheduler = spawn([PS_SERVER, "--role", "scheduler", "--port", "0", "--port-file",
                           str(port_file), "--num-workers", "2", "--num-servers", "1"],
                          "scheduler", {"TFPS_BIND": "[::1]"})
        port = wait_port_file(scheduler, port_file)
        server = spawn([PS_SERVER, "--role", "server", "--scheduler", f"[::1]:{port}",
                        "--host", "::1", "--bind", "::1", "--num-workers", "2",
                        "--num-servers", "1"], "server", {})
        workers = [spawn([sys.executable, str(WORKER), "5"], f"worker{rank}",
                         {"TFPS_SCHEDULER": f"[::1]:{port}", "TFPS_RANK": str(rank),
                          "TFPS_SIZE": "2", "TFPS_NUM_SERVERS": "1", "TFPS_BIND": "::1"})
                   for rank in range(2)]
        deadline = time.monotonic() + 90
        for p in workers + [server, scheduler]:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        text = {Path(log.name).stem: Path(log.name).read_text() for log in logs}
        for rank in range(2):
            assert workers[rank].returncode == 0, text
            assert "step 4 ok" in text[f"worker{rank}"], text
        assert server.returncode == 0 and scheduler.returncode == 0, text
        assert "serving on port" in text["server"], text
        assert "server 0 registered from ::1:" in text["scheduler"], text
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for log in logs:
            log.close()


def test_the_scheduler_listens_on_ipv6_loopback_only(tmp_path, need_ipv6):
    port_file = tmp_path / "scheduler.port"
    env = {**os.environ, "TFPS_BIND": "::1"}
    env.pop("TFPS_AUTH_KEY_FILE", None)
    proc = subprocess.Popen([PS_SERVER, "--role", "scheduler", "--port", "0", "--port-file",
                             str(port_file), "--num-workers", "1", "--num-servers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        port = wait_port_file(proc, port_file)
        socket.create_connection(("::1", port), timeout=5).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize("bind", ["2001:db8::1", "[::]"])
def test_an_ipv6_address_beyond_loopback_needs_a_key(bind):
    env = {**os.environ, "TFPS_BIND": bind}
    for name in ("TFPS_AUTH_KEY_FILE", "TFPS_INSECURE"):
        env.pop(name, None)
    result = subprocess.run([PS_SERVER, "--role", "scheduler", "--port", "0", "--num-workers",
                             "1", "--num-servers", "1"], capture_output=True, text=True,
                            env=env, timeout=30)
    assert result.returncode != 0
    assert "without authentication" in result.stderr, result.stderr
    assert bind.strip("[]") in result.stderr, result.stderr


def test_a_malformed_bind_address_is_refused():
    env = {**os.environ, "TFPS_BIND": "::1::2"}
    result = subprocess.run([PS_SERVER, "--role", "scheduler", "--port", "0", "--num-workers",
                             "1", "--num-servers", "1"], capture_output=True, text=True,
                            env=env, timeout=30)
    assert result.returncode != 0
    assert "TFPS_BIND='::1::2' is not *, an IPv4 address, an IPv6 address" in result.stderr, \
        result.stderr
