"""tfps-run's command line: its flags (horovodrun's among them, and host discovery's), their
checks, and the defaults they need. parse_args() returns the parsed, checked arguments;
runner/run.py starts the job from them.

Like runner/run.py, this module imports only the standard library and the launcher's own
modules.
"""

import argparse
import os
import sys

from tf_ps_ops.common import config as _config
from tf_ps_ops.common.version import __version__
from tf_ps_ops.runner import discovery, horovodrun, ssh
from tf_ps_ops.runner.flag_types import int_at_least, positive_float
from tf_ps_ops.runner.status import check_ports

# The package folder: the build's artifacts (bin/ps_server, _tf_ps_ops.so) live there.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PS_SERVER = os.path.join(PACKAGE_DIR, "bin", "ps_server")


def _consistency(text):
    try:
        return _config.check_consistency(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _first_interface(text):
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected an interface name, e.g. eth0")
    return names[0]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="tfps-run",
        description="Run COMMAND as N workers of a parameter-server job, on this host or "
                    "over ssh on the hosts of -H/--hostfile. horovodrun's flags are "
                    "accepted with its meaning; the few without one here say so and are "
                    "ignored.")
    parser.add_argument("-np", "--num-workers", "--num-proc", dest="num_workers",
                        type=int_at_least(1), metavar="N",
                        help="number of worker processes running COMMAND (with -H: "
                             "default every slot)")
    parser.add_argument("-ns", "--num-servers", type=int_at_least(1), metavar="M",
                        help="number of ps_server processes (default 1; with -H one per "
                             "host, spread over the hosts in turn)")
    parser.add_argument("-H", "--hosts", metavar="HOSTS",
                        help="host1:slots,host2:slots: the scheduler runs on the first host, "
                             "workers fill the slots in order; localhost/127.0.0.1 run here "
                             "without ssh")
    parser.add_argument("--insecure", action="store_true",
                        help="no job key: plain, unauthenticated TCP (TFPS_INSECURE=1), e.g. to "
                             "measure on a trusted network; the default is a key per job")
    parser.add_argument("--hostfile", metavar="F",
                        help="a file of `host slots=N` (or host:N) lines, instead of -H")
    parser.add_argument("-p", "--ssh-port", type=int_at_least(1), metavar="P",
                        help="ssh port of the remote hosts (default: ssh's own)")
    parser.add_argument("-i", "--ssh-identity-file", metavar="FILE",
                        help="private key for ssh (ssh -i)")
    parser.add_argument("--ssh-config-file", metavar="FILE",
                        help="ssh configuration file (ssh -F)")
    parser.add_argument("--network-interface", "--network-interfaces", metavar="IF",
                        type=_first_interface,
                        help="the hosts reach each other at their address on interface IF "
                             "(default: at the names given in -H); horovodrun's list "
                             "IF1,IF2 takes the first")
    parser.add_argument("--port", type=int_at_least(0), default=0, metavar="P",
                        help="scheduler port (default 0: any free port)")
    parser.add_argument("--timeout", type=positive_float, metavar="S",
                        help="kill the whole job after S seconds and exit 124")
    parser.add_argument("--server-threads", type=int_at_least(1), metavar="T",
                        help="threads per ps_server (default: TFPS_SERVER_THREADS, else the "
                             "server's own)")
    parser.add_argument("--consistency", type=_consistency, metavar="MODEL",
                        help="the job's consistency model: bsp, ssp:S or asp (sets "
                             "TFPS_CONSISTENCY for every worker; docs/consistency.md)")
    parser.add_argument("--ps-server", default=DEFAULT_PS_SERVER, metavar="PATH",
                        help="ps_server binary (default: the one built into the package; "
                             "the same path on every host)")
    parser.add_argument("--elastic", action="store_true",
                        help="elastic membership: a worker that dies does not end the job, "
                             "the others go on (docs/elastic.md; with -H over ssh too)")
    parser.add_argument("--elastic-min-workers", type=int_at_least(1), default=1,
                        metavar="N", help="with --elastic: end the job when fewer than N "
                                          "workers are left (default 1)")
    parser.add_argument("--elastic-restarts", type=int_at_least(0), default=0, metavar="R",
                        help="with --elastic: replace up to R dead workers by new ones, "
                             "which join at the others' next commit (default 0)")
    parser.add_argument("--elastic-server-restarts", type=int_at_least(0), default=3,
                        metavar="S", help="with --elastic: a server (or the scheduler) that "
                             "dies starts a new epoch with new servers and the same workers, "
                             "who go on from their last commit, up to S times; then it ends "
                             "the job (default 3)")
    parser.add_argument("--metrics-port", type=int_at_least(0), metavar="BASE",
                        help="each role answers GET /metrics (Prometheus) on a port of its "
                             "own: scheduler BASE, server i BASE+1+i, worker r "
                             "BASE+1+servers+r (--elastic: worker slot r, and a second set "
                             "for the scheduler and servers after the workers'); 0: each "
                             "a free port, logged (TFPS_METRICS_PORT; docs/metrics.md)")
    parser.add_argument("--status-every", type=positive_float, metavar="S",
                        help="print a status line every S seconds: steps/s per rank, MB/s "
                             "per host, the slowest rank (needs --metrics-port BASE > 0)")
    discovery.add_flags(parser)
    horovodrun.add_flags(parser)
    parser.add_argument("-v", "--version", action="version",
                        version=f"%(prog)s (tf_ps_ops) {__version__}")
    parser.add_argument("-cb", "--check-build", action="store_true",
                        help="print what the build contains and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                        help="the worker command line, e.g. python3 train.py")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if args.check_build:
        return args
    if args.config_file:
        horovodrun.apply_config_file(parser, args, argv)
    for note in horovodrun.ignored_notes(parser, args):
        print(note, file=sys.stderr)
    if args.hosts and args.hostfile:
        parser.error("give -H or --hostfile, not both")
    args.host_slots = None
    try:
        if args.hosts:
            args.host_slots = ssh.parse_hosts(args.hosts)
        elif args.hostfile:
            args.host_slots = ssh.parse_hostfile(args.hostfile)
    except (ValueError, OSError) as e:
        parser.error(str(e))
    discovery.check_args(parser, args)
    if args.host_slots is None:
        if args.num_workers is None:
            parser.error("the following arguments are required: -np/--num-workers "
                         "(or -H/--hostfile)")
        if args.num_servers is None:
            args.num_servers = 1
    else:
        slots = sum(n for _, n in args.host_slots)
        if args.num_workers is None:
            args.num_workers = slots
        elif args.num_workers > slots:
            parser.error(f"-np {args.num_workers} is more than the {slots} slots of the hosts")
        if args.num_servers is None:
            args.num_servers = len(args.host_slots)
    if not args.command:
        parser.error("no COMMAND given: e.g. tfps-run -np 2 python3 train.py")
    if args.port > 65535:
        parser.error(f"--port must be at most 65535, got {args.port}")
    _check_metrics_args(parser, args)
    return args


def _check_metrics_args(parser, args):
    if args.metrics_port is None:
        if args.status_every:
            parser.error("--status-every reads the workers' metrics ports: give "
                         "--metrics-port BASE too (e.g. --metrics-port 9400)")
        return
    if args.status_every and args.metrics_port == 0:
        parser.error("--status-every needs the workers' ports: give --metrics-port a "
                     "base port, not 0")
    args.metrics_slots = args.num_workers
    if args.host_discovery_script and args.metrics_port:
        if args.max_np is None:
            parser.error("--metrics-port BASE with --host-discovery-script needs --max-np: "
                         "the workers' ports are BASE+1+servers+slot for slots below "
                         "--max-np (or give --metrics-port 0: each process picks a port "
                         "and logs it)")
        args.metrics_slots = args.max_np
    too_many = check_ports(args.metrics_port, args.num_servers, args.metrics_slots,
                           elastic=args.elastic)
    if too_many:
        parser.error(too_many)
