"""tfps-run -H makes a key per job and hands it to every host over the ssh channel
(issue 11): each remote process finds it in a private file (mode 600) named by
TFPS_AUTH_KEY_FILE, the same key everywhere, never on a command line, and the file is
gone when the job ends. Two netns hosts with throwaway sshds, as test_tfps_run_ssh.py.
Before, a job over ssh ran without a key (every role listening on every interface,
unauthenticated)."""

import re
import sys
from pathlib import Path

import pytest

from test_tfps_run_ssh import ssh_hosts, tfps_run, wait_for_no_job_processes  # noqa: F401
from netns_support import AVAILABLE, WHY_NOT

WORKER = Path(__file__).parent / "key_worker.py"
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(180)]


def test_every_host_gets_the_job_key_over_ssh_and_loses_it_after(ssh_hosts):  # noqa: F811
    hosts, ssh = ssh_hosts
    a0, a1 = hosts.address(0), hosts.address(1)
    launcher = tfps_run(hosts, ssh, f"{a0}:1,{a1}:1", [sys.executable, WORKER])
    out, _ = launcher.communicate(timeout=150)
    assert launcher.returncode == 0, out[-6000:]
    keys = re.findall(r"\[(\S+):worker (\d)\] key (\S+) mode (\d+) digest (\w+) cmdline (\d+)",
                      out)
    assert len(keys) == 2, out[-6000:]
    assert {mode for *_, mode, _, _ in keys} == {"600"}, keys
    assert len({digest for *_, digest, _ in keys}) == 1, keys  # one key for the job
    assert {count for *_, count in keys} == {"0"}, keys  # on no command line
    assert f"[{a0}:worker 0] ok" in out and f"[{a1}:worker 1] ok" in out, out[-6000:]
    assert "without authentication" not in out, out[-6000:]
    assert wait_for_no_job_processes(hosts, ssh, launcher.pid) == {0: set(), 1: set()}
    for _, _, path, *_ in keys:  # the hosts share this file system: check from here
        assert not Path(path).exists(), f"{path} left behind"
