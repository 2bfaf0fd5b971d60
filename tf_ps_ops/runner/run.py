"""tfps-run: start a scheduler, M parameter servers and N workers, on this host or on
several hosts over ssh.

    tfps-run -np 4 -ns 2 python3 train.py --epochs 3
    tfps-run -H node1:2,node2:2 python3 train.py        # 2 workers per host, 1 server each
    tfps-run --check-build                              # what the installed build contains

Every child gets its own process group (on a remote host: the ssh session's wrapper puts
it in one, and ends it when the session ends), so teardown (on failure, --timeout, Ctrl-C
or SIGTERM) kills whatever the child started too. Each output line of a child is prefixed
with its role and rank, and with its host in a -H job: `[worker 1] `, `[node2:worker 3] `.
docs/launch.md has every flag and variable; runner/run_flags.py parses them.

This module imports only the standard library, so the launcher starts at once. The
console script, `python -m tf_ps_ops.run` and `bin/tfps-run` (which runs tf_ps_ops/run.py
by path) all enter through tf_ps_ops/run.py, which calls main() here.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

from tf_ps_ops.common.version import BUILD_HINT
from tf_ps_ops.runner import discovery, ssh
from tf_ps_ops.runner.elastic import ElasticJob, _heartbeat_timeout
from tf_ps_ops.runner.elastic_growth import GrowingElasticJob
from tf_ps_ops.runner.elastic_ssh import RelayOutput, keepalive_options
from tf_ps_ops.runner.env import LOCAL_ADDRESS, Place
from tf_ps_ops.runner.env import worker_env as _place_env
from tf_ps_ops.runner.horovodrun import tuning_env
from tf_ps_ops.runner.job import Job, LaunchError, run_to_teardown
from tf_ps_ops.runner.process import LOCAL, Prefixed
from tf_ps_ops.runner.run_flags import DEFAULT_PS_SERVER, PACKAGE_DIR, parse_args  # noqa: F401
from tf_ps_ops.runner.status import ElasticPorts, StatusLine, metrics_ports, with_port

HOST = LOCAL_ADDRESS  # every role of a tfps-run job lives on this host

# The scheduler binds its socket before anything else it does: seconds are plenty.
_PORT_WAIT_S = 30.0
# Servers and the scheduler exit on their own right after the last worker's goodbye;
# with workers that never called init() they never will, so don't wait long.
_SERVER_EXIT_WAIT_S = 2.0
# How long a child has between SIGTERM and SIGKILL.
_KILL_GRACE_S = 3.0


def worker_env(base, rank, size, num_servers, port, host=HOST, local_rank=None,
               local_size=None):
    """The environment of worker `rank`: ours, plus every dialect's names for its place
    (on one host the local rank is the rank)."""
    place = Place(rank, size, num_servers, host, port,
                  rank if local_rank is None else local_rank,
                  size if local_size is None else local_size)
    env = _place_env(place, base)
    # A Python worker writing to a pipe buffers its output in blocks; prefixed lines
    # would then arrive late and out of order with the other ranks'.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def ssh_args(args):
    """Options for every ssh the launcher runs."""
    options = list(getattr(args, "ssh_keepalive", []))
    if args.ssh_port:
        options += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        options += ["-i", args.ssh_identity_file]
    if args.ssh_config_file:
        options += ["-F", args.ssh_config_file]
    return options


def placement(args):
    """(hosts, server hosts, [(host, local_rank, local_size)] per worker rank)."""
    if args.host_slots is None:
        return [LOCAL], [LOCAL] * args.num_servers, [(LOCAL, r, args.num_workers)
                                                     for r in range(args.num_workers)]
    try:
        hosts = ssh.make_hosts(args.host_slots, ssh_args(args),
                                       args.network_interface)
    except (OSError, RuntimeError) as e:
        raise LaunchError(str(e)) from None
    ranks = []
    for host, (_, slots) in zip(hosts, args.host_slots):
        ranks += [host] * slots
    ranks = ranks[:args.num_workers]
    workers = [(host, ranks[:rank].count(host), ranks.count(host))
               for rank, host in enumerate(ranks)]
    servers = [hosts[i % len(hosts)] for i in range(args.num_servers)]
    return hosts, servers, workers


def driver_address(args, remote):
    """This machine's address for processes on host `remote`: --network-interface's, or
    the one on the route there."""
    try:
        if args.network_interface:
            return ssh.interface_address(args.network_interface)
        return ssh.route_address(remote)
    except (OSError, RuntimeError) as e:
        raise LaunchError(f"cannot find this machine's address toward host {remote}: {e}; "
                          "give --network-interface") from None


def job_env(args, tmpdir, local):
    """What tfps-run adds to every role's environment: its roles admit only holders of a
    key made for this job (ZeroMQ CURVE; docs/security.md), so no other process can join
    or read it, and on one host its sockets bind loopback only. Over ssh the key file
    reaches each remote process inside its ssh channel (ssh.py), never on a
    command line, and is removed there when the process ends; here it lives in `tmpdir`,
    removed at teardown. A variable the user set wins."""
    env = {"TFPS_BIND": "127.0.0.1"} if local else {}
    if args.insecure:
        env["TFPS_INSECURE"] = "1"
    elif "TFPS_AUTH_KEY_FILE" not in os.environ:
        key_file = os.path.join(tmpdir, "job.key")
        made = subprocess.run([args.ps_server, "--gen-key", key_file], capture_output=True,
                              text=True, timeout=30)
        if made.returncode != 0:
            raise LaunchError(f"cannot make the job key with {args.ps_server} --gen-key: "
                              f"{made.stderr.strip() or made.stdout.strip()}")
        env["TFPS_AUTH_KEY_FILE"] = key_file
    return {k: v for k, v in env.items() if k not in os.environ}


def run_job(job, args, port_file):
    if not os.access(args.ps_server, os.X_OK):
        raise LaunchError(f"ps_server not built (no executable at {args.ps_server}): "
                          f"{BUILD_HINT}")
    hosts, servers, workers = placement(args)
    base = {**os.environ, **tuning_env(args)}
    base.update(job_env(args, os.path.dirname(port_file), local=args.host_slots is None))
    env = dict(base)
    ports = None
    if args.metrics_port is not None:
        ports = metrics_ports(args.metrics_port, args.num_servers, args.num_workers)
        if args.metrics_port == 0:
            ports = {place: 0 for place in ports}
    port = job.start_scheduler(with_port(env, ports, "scheduler", 0), port_file,
                               host=hosts[0], port=args.port, wait_s=_PORT_WAIT_S)
    for index, host in enumerate(servers):
        job.start_server(index, with_port(env, ports, "server", index), host=host,
                         threads=args.server_threads)
    processes = [job.start_worker(rank, args.command, with_port(worker_env(
                     base, rank, args.num_workers, args.num_servers, port,
                     job.scheduler_host, local_rank, local_size), ports, "worker", rank),
                     host=host)
                 for rank, (host, local_rank, local_size) in enumerate(workers)]
    status = None
    if args.status_every:
        status = StatusLine([(rank, HOST if host.local else host.name, ports[("worker", rank)])
                             for rank, (host, _, _) in enumerate(workers)],
                            args.status_every).start()
    try:
        job.supervise(processes, linger_s=_SERVER_EXIT_WAIT_S)
    finally:
        if status is not None:
            status.stop()
    return 0


def run_elastic_job(job, args, tmpdir):
    if not os.access(args.ps_server, os.X_OK):
        raise LaunchError(f"ps_server not built (no executable at {args.ps_server}): "
                          f"{BUILD_HINT}")
    env = {**os.environ, **tuning_env(args)}
    # A discovery script may name remote hosts later: the roles bind beyond loopback from
    # the start (the job key still admits only this job's processes).
    env.update(job_env(args, tmpdir,
                       local=args.host_slots is None and not args.host_discovery_script))
    job.env.update(env)
    # A host that stops answering ends its ssh sessions within about the heartbeat
    # timeout: its workers are then lost (exit 255) and the job goes on without them.
    args.ssh_keepalive = keepalive_options(_heartbeat_timeout(job.env))
    if args.host_slots is not None:
        hosts, servers, workers = placement(args)
        job.scheduler_host, job.server_hosts = hosts[0], servers
        job.worker_hosts = [host for host, _, _ in workers]
    if args.metrics_port is not None:
        job.metrics_ports = ElasticPorts(args.metrics_port, args.num_servers,
                                         args.metrics_slots)
    status = StatusLine(job.metrics_targets, args.status_every).start() \
        if args.status_every else None
    try:
        return job.run(args.num_workers)
    finally:
        if status is not None:
            status.stop()


def check_build(ps_server):
    """Prints what this installation's build contains; 0 when complete, 1 otherwise."""
    here = PACKAGE_DIR
    info_path = os.path.join(here, "_build_info.json")
    try:
        with open(info_path) as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        info = {"error": str(e)}
    parts = [("op library", os.path.join(here, "_tf_ps_ops.so"), os.path.exists),
             ("ps_server", ps_server, lambda p: os.access(p, os.X_OK))]
    print(f"tf_ps_ops build at {here}:")
    missing = 0
    for name, path, present in parts:
        ok = present(path)
        missing += not ok
        print(f"  [{'X' if ok else ' '}] {name:<11} {path}{'' if ok else '  (missing)'}")
    tf_version = info.get("tensorflow")
    print(f"  [{'X' if tf_version else ' '}] built against TensorFlow "
          f"{tf_version or '?'} ({info_path}"
          + (f": {info['error']})" if "error" in info else ")"))
    print("  launchers: local, ssh (-H/--hostfile); cluster managers: TF_CONFIG, Slurm "
          "(python -m tf_ps_ops.role); BytePS DMLC_*; Open MPI/PMI ranks")
    return 1 if missing or not tf_version else 0


def main(argv=None):
    args = parse_args(argv)
    if args.check_build:
        return check_build(args.ps_server)
    tmpdir = tempfile.mkdtemp(prefix="tfps-run-")
    if args.elastic:
        stamps = args.prefix_output_with_timestamp
        output = Prefixed(args.output_filename, stamps) if \
            args.host_slots is None and not args.host_discovery_script else \
            RelayOutput(tmpdir, stamps, args.output_filename)
        job_class, growth = ElasticJob, {}
        if args.host_discovery_script:
            job_class, growth = GrowingElasticJob, dict(
                discovery=discovery.HostDiscovery(args.host_discovery_script, args.slots,
                                                  tmpdir),
                min_np=args.min_np, max_np=args.max_np,
                elastic_timeout=args.elastic_timeout,
                remote_host=lambda name: ssh.SshHost(name, ssh_args(args)),
                address_toward=lambda name: driver_address(args, name))
        job = job_class(args.ps_server, args.num_servers, output, tmpdir, args.command,
                        {}, min_workers=args.elastic_min_workers,
                        restarts=args.elastic_restarts, timeout=args.timeout,
                        server_threads=args.server_threads,
                        server_restarts=args.elastic_server_restarts, **growth)
        body = lambda: run_elastic_job(job, args, tmpdir)  # noqa: E731
    else:
        job = Job(args.ps_server, args.num_workers, args.num_servers,
                  Prefixed(args.output_filename, args.prefix_output_with_timestamp),
                  timeout=args.timeout)
        body = lambda: run_job(job, args, os.path.join(tmpdir, "port"))  # noqa: E731
    code, message = run_to_teardown(
        job, body, _KILL_GRACE_S, cleanup=lambda: shutil.rmtree(tmpdir, ignore_errors=True))
    # Printed after the teardown, so that it is the last line and "stopped" is true.
    if message:
        print(f"tfps-run: {message}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
