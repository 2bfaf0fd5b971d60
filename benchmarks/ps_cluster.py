"""A tf_ps_ops cluster on emulated hosts: the scheduler on host 0, and on every host one
ps_server and one worker (BytePS's colocated mode: a worker's own partition never crosses
the link).

    with Hosts(2, rate="1gbit") as hosts:
        cluster = NetnsCluster(hosts, workdir, timeout=60)
        cluster.start(lambda rank: [sys.executable, "worker.py"])
        cluster.wait()
        cluster.check()          # raises ClusterError quoting every failed process

Workers learn their place from TFPS_SCHEDULER, TFPS_RANK, TFPS_SIZE and TFPS_NUM_SERVERS
(and NETNS_SERVER_PID: the pid of the ps_server on their host, for CPU accounting).
Every process writes stdout/stderr to a file (no pipe can fill up), lives under one
deadline, and is reaped with os.wait4 so its CPU time is known (`cpu_s` of a result):
the machinery is tfps_harness/launch_cluster.py, shared with the tests and tfps-run; a
host here is a command wrapped in `ip netns exec`.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PS_SERVER = REPO / "tf_ps_ops" / "bin" / "ps_server"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # benchmarks run by path, from a checkout
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402
from tf_ps_ops.runner.process import Host  # noqa: E402


class ClusterError(RuntimeError):
    pass


def netns_host(hosts, i):
    """Emulated host `i` of `hosts` (netns.Hosts) as the launch library sees it."""
    return Host(hosts.address(i), name=hosts.netns(i),
                wrap=lambda argv: hosts.command(i, argv))


class NetnsCluster(LoggedCluster):
    error = ClusterError

    def __init__(self, hosts, workdir, timeout, env=None, server_grace=20):
        """`timeout` bounds everything from start() until the last worker exits; servers
        and scheduler then get `server_grace` seconds to exit on their own."""
        if not PS_SERVER.exists():
            raise ClusterError("%s is not built: run `python3 setup.py build_tfps`" % PS_SERVER)
        # The emulated hosts reach nothing but each other: a trusted network, where roles
        # may listen without a job key (TFPS_INSECURE=1), so that the measurements are of
        # plain TCP; `env` can set TFPS_AUTH_KEY_FILE to measure CURVE instead.
        super().__init__(PS_SERVER, workdir, hosts.n, hosts.n, timeout, env=env,
                         server_grace=server_grace, cwd=REPO,
                         defaults={"TFPS_INSECURE": "1"})
        self.hosts = hosts
        self.n = hosts.n
        self._hosts = [netns_host(hosts, i) for i in range(hosts.n)]

    def host(self, role, index):
        return self._hosts[0 if role == "scheduler" else index]

    def worker_env(self, rank):
        env = super().worker_env(rank)
        env["NETNS_SERVER_PID"] = str(self.process("server", rank).pid)
        return env

    def check(self):
        """Raises ClusterError with the output of every process that failed or timed out.
        A process still running counts as failed."""
        failed = self.failures()
        if failed:
            raise ClusterError("%d of %d processes failed (logs in %s):\n%s" % (
                len(failed), len(self.processes()), self.workdir,
                "\n".join(r.describe() for r in failed)))

    def close(self):
        """Kills whatever still runs (Hosts.close() sweeps the namespaces too); those are
        marked timed out: a benchmark's processes all end on their own."""
        for process in self.processes():
            if process.poll() is None:
                process.timed_out = True
        super().close()
