"""tfps-role: run this task's role of a job that a cluster manager started.

    python -m tf_ps_ops.role [--dry-run] [--ps-server PATH] [-- COMMAND...]

Under TF_CONFIG (Kubeflow TFJob) or Slurm (srun) every task runs the same line; this
helper reads the job's layout through TensorFlow's resolvers (tf_ps_ops/common/resolvers.py)
and becomes what the task is:
- a "ps" task execs `ps_server --role server` with the flags its place implies; ps task 0
  also starts the scheduler and supervises both (the first to fail ends the other);
- a "chief"/"worker" task execs COMMAND (its `tf_ps_ops.init()` reads the same layout);
- any other task (an evaluator) execs COMMAND if given, else exits 0.
`--dry-run` prints what it would run. With TFPS_*/DMLC_* variables there is nothing to
resolve: start `ps_server` with its flags (or DMLC_ROLE) yourself.
"""

import argparse
import json
import os
import sys

from tf_ps_ops.common import config as _config
from tf_ps_ops.runner.job import Job, run_to_teardown
from tf_ps_ops.runner.process import Prefixed
from tf_ps_ops.runner.server_main import BINARY

_KILL_GRACE_S = 3.0


def server_commands(layout, ps_server):
    """[(role, argv), ...] the ps task of `layout` runs: its server, and the scheduler
    first when it is ps task 0 (or the scheduler task)."""
    counts = ["--num-workers", str(len(layout.workers)),
              "--num-servers", str(len(layout.servers))]
    host, port = layout.scheduler
    commands = []
    if layout.runs_scheduler:
        commands.append(("scheduler", [ps_server, "--role", "scheduler", "--port", str(port),
                                       *counts]))
    if layout.role == "server":
        server_port = layout.servers[layout.index][1] if layout.server_port_fixed else 0
        # The scheduler's public address, also from its own host: the scheduler tells the
        # workers the address it saw us come from, which must not be loopback.
        commands.append(("server", [ps_server, "--role", "server", "--scheduler",
                                    f"{host}:{port}", "--port", str(server_port), *counts]))
    return commands


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="tfps-role", description="Run this task's role of a TF_CONFIG or Slurm job.")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the role and the command lines, run nothing")
    parser.add_argument("--ps-server", default=BINARY, metavar="PATH",
                        help="ps_server binary (default: the one built into the package)")
    # Internal: the re-executed supervisor of ps task 0 (see main).
    parser.add_argument("--supervise", metavar="JSON", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                        help="what a worker task runs, e.g. python3 train.py")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def _supervise(commands, index):
    """Runs scheduler and server side by side until both exit; the first failure (or a
    SIGTERM, as Kubernetes sends) stops the other."""
    job = Job(None, 0, 0, Prefixed())

    def run():
        processes = [job.spawn(role, index if role == "server" else 0, argv,
                               dict(os.environ)) for role, argv in commands]
        job.supervise(processes, linger_s=0)
        return 0
    code, message = run_to_teardown(job, run, _KILL_GRACE_S)
    if message:
        print(f"tfps-role: {message}", file=sys.stderr, flush=True)
    return code


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.supervise:
        plan = json.loads(args.supervise)
        return _supervise([tuple(c) for c in plan["commands"]], plan["index"])
    try:
        layout = _config.read_layout()
    except ValueError as e:
        sys.exit(f"tfps-role: {e}")
    if layout is None:
        sys.exit("tfps-role: neither TF_CONFIG nor Slurm's SLURM_PROCID/SLURM_STEP_NUM_TASKS "
                 "is set (with TFPS_SCHEDULER or DMLC_* variables, start ps_server with its "
                 "flags, or use tfps-run)")
    commands = server_commands(layout, args.ps_server)
    if not commands:  # a worker, or a task outside training
        if not args.command:
            if layout.role == "worker":
                sys.exit(f"tfps-role: this task is {layout.task} (rank {layout.index}): give "
                         "the training command after --")
            return 0
        commands = [(layout.role, args.command)]
    print(f"tfps-role: {layout.source} makes this task {layout.task}: "
          + "; ".join(f"{role}: {' '.join(argv)}" for role, argv in commands),
          file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    if len(commands) == 1:
        argv = commands[0][1]
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            sys.exit(f"tfps-role: cannot run {argv[0]}: {e}")
    # Resolving imported TensorFlow (~600 MB resident): the supervisor that lives as long
    # as the job is a fresh interpreter without it.
    plan = json.dumps({"commands": commands, "index": layout.index})
    os.execv(sys.executable, [sys.executable, "-m", "tf_ps_ops.role", "--supervise", plan])


if __name__ == "__main__":
    sys.exit(main())
