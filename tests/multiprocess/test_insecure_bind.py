"""A role that would listen beyond loopback without the job key refuses to start (issue 11,
defect 1's last step), unless TFPS_INSECURE=1 / `ps_server --insecure`. Before, it only
warned, and anyone who reached the port could join the job or read its tensors."""

import os
import subprocess
import sys
import time

import pytest

from cluster import PS_SERVER, REPO, require_build

pytestmark = pytest.mark.timeout(120)
KEYLESS = {k: v for k, v in os.environ.items()
           if k not in ("TFPS_AUTH_KEY_FILE", "TFPS_BIND", "TFPS_INSECURE")}


def scheduler(tmp_path, *flags, **env):
    port_file = tmp_path / "port"
    proc = subprocess.Popen([PS_SERVER, "--role", "scheduler", "--port", "0", "--port-file",
                             str(port_file), "--num-workers", "1", "--num-servers", "1", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**KEYLESS, **env})
    give_up = time.monotonic() + 30
    while proc.poll() is None and not port_file.exists() and time.monotonic() < give_up:
        time.sleep(0.05)
    started = port_file.exists()
    proc.kill()
    _, err = proc.communicate(timeout=30)
    return started, proc.returncode, err


@pytest.mark.parametrize("bind", [None, "0.0.0.0"])
def test_a_keyless_scheduler_beyond_loopback_refuses_to_start(tmp_path, bind):
    require_build()
    env = {} if bind is None else {"TFPS_BIND": bind}
    started, code, err = scheduler(tmp_path, **env)
    assert not started and code == 2, err
    assert "the scheduler would listen on" in err and "without authentication" in err, err
    assert "TFPS_AUTH_KEY_FILE" in err and "TFPS_INSECURE=1" in err, err


def test_a_keyless_server_beyond_loopback_refuses_to_start():
    require_build()
    proc = subprocess.run([PS_SERVER, "--role", "server", "--scheduler", "127.0.0.1:9",
                           "--num-workers", "1", "--num-servers", "1"],
                          capture_output=True, text=True, timeout=60, env=KEYLESS)
    assert proc.returncode == 1, proc.stderr
    assert "this server would listen on every interface without authentication" in proc.stderr


def test_a_keyless_worker_beyond_loopback_refuses_to_start():
    require_build()
    code = ("import sys; sys.path.insert(0, 'tests'); from native import load_core\n"
            "try:\n    load_core().init('127.0.0.1', 9, 0, 1, 1)\n"
            "except RuntimeError as e:\n    print(e); sys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={**KEYLESS, "TFPS_TIMEOUT": "5"})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "this worker's peer port would listen on every interface" in proc.stdout


@pytest.mark.parametrize("how", ["flag", "env"])
def test_insecure_lets_it_start_with_a_warning(tmp_path, how):
    require_build()
    started, _, err = (scheduler(tmp_path, "--insecure") if how == "flag"
                       else scheduler(tmp_path, TFPS_INSECURE="1"))
    assert started, err
    assert "without authentication" in err, err  # still said, as a warning


def test_loopback_needs_no_key(tmp_path):
    require_build()
    started, _, err = scheduler(tmp_path, TFPS_BIND="127.0.0.1")
    assert started, err
    assert "without authentication" not in err, err
