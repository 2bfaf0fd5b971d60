"""horovodrun's flags and its --config-file, for tfps-run.

The flags that mean something here set the roles' environment (`tuning_env`) or how
tfps-run prints their output; the others are accepted so that a horovodrun command line
runs unchanged, and each prints a one-line note saying why it changes nothing. A YAML
file given with --config-file uses horovodrun's keys (`params`, `timeline`, `logging`,
...); a flag given on the command line wins over the file, as with horovodrun.

Imports only the standard library (PyYAML, only when --config-file is given).
"""

import argparse
import os

from tf_ps_ops.runner.flag_types import non_negative_float, positive_float

_LOG_LEVELS = {"trace": "debug", "debug": "debug", "info": "info", "warning": "warning",
               "error": "error", "fatal": "error"}


def _log_level(text):
    try:
        return _LOG_LEVELS[str(text).lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one of {', '.join(name.upper() for name in _LOG_LEVELS)}") from None


# Flags accepted without effect: (flags, dest, kind, why). kind: "flag" (store_true),
# "off" (store_false into dest, the --no- spelling), or a type for a value.
_IGNORED = [
    (["--timeline-mark-cycles"], "timeline_mark_cycles", "flag",
     "the engine has no cycles to mark"),
    (["--no-timeline-mark-cycles"], "timeline_mark_cycles", "off", None),
    (["--cache-capacity"], "cache_capacity", int,
     "there is no response cache: servers need no negotiation round"),
    (["--hierarchical-allgather"], "hierarchical_allgather", "flag",
     "allgather goes through the servers"),
    (["--no-hierarchical-allgather"], "hierarchical_allgather", "off", None),
    (["--torus-allreduce"], "torus_allreduce", "flag", "there is no ring to arrange"),
    (["--no-torus-allreduce"], "torus_allreduce", "off", None),
    (["--autotune-bayes-opt-max-samples"], "autotune_bayes_opt_max_samples", int,
     "the autotuner's search is a bounded grid (at most 11 samples), not Bayesian"),
    (["--autotune-gaussian-process-noise"], "autotune_gaussian_process_noise", float,
     "the autotuner's search is a bounded grid, not Bayesian"),
    (["--mpi-threads-disable"], "mpi_threads_disable", "flag", "there is no MPI"),
    (["--no-mpi-threads-disable"], "mpi_threads_disable", "off", None),
    (["--num-nccl-streams"], "num_nccl_streams", int,
     "NCCL is used only for the local sum of one host's GPUs, on one stream"),
    (["--thread-affinity"], "thread_affinity", int, "threads are not pinned"),
    (["--gloo-timeout-seconds"], "gloo_timeout_seconds", int,
     "there is no Gloo: use --start-timeout"),
    (["--disable-cache"], "disable_cache", "flag", "tfps-run runs no cached checks"),
    (["--gloo"], "use_gloo", "flag", "the controller is always the scheduler"),
    (["--mpi"], "use_mpi", "flag", "the controller is always the scheduler; start roles "
     "with mpirun and `python -m tf_ps_ops.role` instead (docs/launch.md)"),
    (["--jsrun"], "use_jsrun", "flag", "the controller is always the scheduler"),
]


def add_flags(parser):
    """horovodrun's flags: those with a meaning here, then those accepted without one."""
    group = parser.add_argument_group("horovodrun's flags")
    group.add_argument("--config-file", metavar="F",
                       help="a YAML file of horovodrun's keys (params, timeline, logging, "
                            "autotune, stall_check, library_options); a flag given on the "
                            "command line wins")
    group.add_argument("--start-timeout", type=positive_float, metavar="S",
                       help="seconds the rendezvous (and connecting) may take before it "
                            "fails naming who is missing (TFPS_TIMEOUT)")
    group.add_argument("--no-stall-check", dest="no_stall_check", action="store_true",
                       default=None,
                       help="no stall warnings for waits on live workers "
                            "(TFPS_STALL_WARNING=0, TFPS_STALL_SHUTDOWN=0)")
    group.add_argument("--stall-check", dest="no_stall_check", action="store_false",
                       help="stall warnings (the default)")
    group.add_argument("--stall-check-warning-time-seconds", type=non_negative_float,
                       metavar="S", help="a stall warning every S seconds while a collective "
                                         "waits on live workers (TFPS_STALL_WARNING; 60)")
    group.add_argument("--stall-check-shutdown-time-seconds", type=non_negative_float,
                       metavar="S", help="such a wait ends the job after S seconds "
                                         "(TFPS_STALL_SHUTDOWN; 0, the default: never)")
    group.add_argument("--verbose", action="store_true",
                       help="debug logs from every role (TFPS_LOG_LEVEL=debug)")
    group.add_argument("--log-level", type=_log_level, metavar="LEVEL",
                       help="TRACE, DEBUG, INFO, WARNING, ERROR or FATAL (TFPS_LOG_LEVEL; "
                            "TRACE is debug, FATAL error)")
    group.add_argument("--log-with-timestamp", dest="log_with_timestamp",
                       action="store_true", default=None,
                       help="the roles' own log lines start with the UTC time "
                            "(TFPS_LOG_TIMESTAMP=1, the default)")
    group.add_argument("--log-without-timestamp", dest="log_with_timestamp",
                       action="store_false", help="they do not (TFPS_LOG_TIMESTAMP=0)")
    group.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp",
                       dest="prefix_output_with_timestamp", action="store_true",
                       help="every line tfps-run prints of a role's output starts with the "
                            "time it arrived")
    group.add_argument("--timeline-filename", metavar="F",
                       help="each worker writes a Chrome-trace timeline at shutdown "
                            "(TFPS_TIMELINE): F with .%%r (its rank) before the extension, "
                            "unless F holds %%r itself")
    group.add_argument("--output-filename", metavar="DIR",
                       help="also write each worker's output to DIR/rank.N/stdout and "
                            "DIR/rank.N/stderr")
    group.add_argument("--fusion-threshold-mb", type=non_negative_float, metavar="MB",
                       help="payload of one fused batch of small partitions "
                            "(TFPS_FUSION_BYTES; 0 turns fusion off)")
    group.add_argument("--cycle-time-ms", type=non_negative_float, metavar="MS",
                       help="how long a fusion batch may wait for more small partitions "
                            "before it leaves (TFPS_CYCLE_US; 0: no wait)")
    group.add_argument("--autotune", dest="autotune", action="store_true", default=None,
                       help="tune each worker's fusion threshold and scheduling credit while "
                            "Keras trains (TFPS_AUTOTUNE=1; the run's "
                            "BroadcastGlobalVariablesCallback does it, docs/plan.md)")
    group.add_argument("--no-autotune", dest="autotune", action="store_false",
                       help="no autotuning (the default)")
    group.add_argument("--autotune-log-file", metavar="F",
                       help="rank 0 writes each sample (fusion, credit, median step) to F as "
                            "CSV (TFPS_AUTOTUNE_LOG)")
    group.add_argument("--autotune-warmup-samples", type=int, metavar="N",
                       help="samples' worth of steps left untimed first "
                            "(TFPS_AUTOTUNE_WARMUP_STEPS = N × steps per sample; 1)")
    group.add_argument("--autotune-steps-per-sample", type=int, metavar="N",
                       help="steps timed per setting (TFPS_AUTOTUNE_STEPS_PER_SAMPLE; 10)")
    group.add_argument("--hierarchical-allreduce", dest="hierarchical_allreduce",
                       action="store_true", default=None,
                       help="sum one host's workers locally first (TFPS_HIERARCHICAL=1, "
                            "the default here)")
    group.add_argument("--no-hierarchical-allreduce", dest="hierarchical_allreduce",
                       action="store_false", help="every worker talks to the servers itself "
                                                  "(TFPS_HIERARCHICAL=0)")
    ignored = parser.add_argument_group(
        "horovodrun's flags without a meaning here (accepted, each with a one-line note)")
    for flags, dest, kind, why in _IGNORED:
        help_text = f"no effect: {why}" if why else "no effect"
        if kind == "flag":
            ignored.add_argument(*flags, dest=dest, action="store_true", default=None,
                                 help=help_text)
        elif kind == "off":
            ignored.add_argument(*flags, dest=dest, action="store_false", default=None,
                                 help=help_text)
        else:
            ignored.add_argument(*flags, dest=dest, type=kind, metavar="V", help=help_text)


# --config-file: section -> {key: dest}; horovodrun's keys (its config_parser).
_CONFIG_KEYS = {
    "params": {"fusion_threshold_mb": "fusion_threshold_mb", "cycle_time_ms": "cycle_time_ms",
               "cache_capacity": "cache_capacity",
               "hierarchical_allreduce": "hierarchical_allreduce",
               "hierarchical_allgather": "hierarchical_allgather",
               "torus_allreduce": "torus_allreduce"},
    "autotune": {"enabled": "autotune", "log_file": "autotune_log_file",
                 "warmup_samples": "autotune_warmup_samples",
                 "steps_per_sample": "autotune_steps_per_sample",
                 "bayes_opt_max_samples": "autotune_bayes_opt_max_samples",
                 "gaussian_process_noise": "autotune_gaussian_process_noise"},
    "timeline": {"filename": "timeline_filename", "mark_cycles": "timeline_mark_cycles"},
    "stall_check": {"enabled": "no_stall_check",
                    "warning_time_seconds": "stall_check_warning_time_seconds",
                    "shutdown_time_seconds": "stall_check_shutdown_time_seconds"},
    "library_options": {"mpi_threads_disable": "mpi_threads_disable",
                        "num_nccl_streams": "num_nccl_streams",
                        "thread_affinity": "thread_affinity",
                        "gloo_timeout_seconds": "gloo_timeout_seconds"},
    "logging": {"level": "log_level", "with_timestamp": "log_with_timestamp"},
}
_CONTROLLERS = {"gloo": "use_gloo", "mpi": "use_mpi"}


class _Unset:
    def __repr__(self):
        return "<unset>"


def given_on_command_line(parser, argv):
    """The dests of the flags given on the command line (not left at their default)."""
    unset = _Unset()
    namespace = argparse.Namespace(**{action.dest: unset for action in parser._actions
                                      if action.dest != argparse.SUPPRESS})
    parsed = parser.parse_args(argv, namespace=namespace)
    return {dest for dest, value in vars(parsed).items() if value is not unset}


def _action_for(parser, dest):
    # The first flag of that dest that takes a value, else the first at all.
    actions = [a for a in parser._actions if a.dest == dest]
    with_value = [a for a in actions if a.nargs != 0]
    return (with_value or actions)[0]


def _config_value(parser, dest, value, where):
    action = _action_for(parser, dest)
    if action.nargs == 0:  # a switch: horovodrun's YAML gives a boolean
        if not isinstance(value, bool):
            parser.error(f"{where} must be true or false, got {value!r}")
        return value
    try:
        return action.type(str(value)) if action.type else str(value)
    except (argparse.ArgumentTypeError, ValueError) as e:
        parser.error(f"{where}: {e}")


def apply_config_file(parser, args, argv):
    """Sets from args.config_file every key whose flag was not given on the command line."""
    try:
        import yaml
    except ImportError:
        parser.error("--config-file needs PyYAML: pip install pyyaml")
    try:
        with open(args.config_file) as f:
            config = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        parser.error(f"--config-file {args.config_file}: {e}")
    if not isinstance(config, dict):
        parser.error(f"--config-file {args.config_file}: expected a mapping of horovodrun's "
                     f"sections (params, timeline, logging, ...), got {type(config).__name__}")
    given = given_on_command_line(parser, argv)
    for section, values in config.items():
        if section == "controller":
            dest = _CONTROLLERS.get(str(values).lower())
            if dest is None:
                parser.error(f"--config-file {args.config_file}: controller: {values!r} is "
                             f"not gloo or mpi")
            if dest not in given:
                setattr(args, dest, True)
            continue
        keys = _CONFIG_KEYS.get(section)
        if keys is None or not isinstance(values, dict):
            parser.error(f"--config-file {args.config_file}: {section!r} is not one of "
                         f"horovodrun's sections ({', '.join(['controller', *_CONFIG_KEYS])}), "
                         f"each a mapping of keys")
        for key, value in values.items():
            dest = keys.get(key)
            where = f"--config-file {args.config_file}: {section}.{key}"
            if dest is None:
                parser.error(f"{where} is not one of horovodrun's keys of {section} "
                             f"({', '.join(keys)})")
            if dest in given or value is None:
                continue
            value = _config_value(parser, dest, value, where)
            if dest == "no_stall_check":  # the file says enabled; the flag says disabled
                value = not value
            setattr(args, dest, value)


def ignored_notes(parser, args):
    """One line per flag without a meaning that was set (on the command line or in the
    config file) to something other than its default."""
    notes, seen = [], set()
    for flags, dest, kind, why in _IGNORED:
        if why is None or dest in seen or getattr(args, dest, None) in (None, False):
            continue
        seen.add(dest)
        notes.append(f"tfps-run: {flags[0]} has no meaning here ({why}); ignored")
    return notes


def _timeline_path(path):
    if "%r" in path:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.%r{ext}"


def tuning_env(args):
    """What the flags set in every role's environment."""
    env = {}
    if args.consistency:
        env["TFPS_CONSISTENCY"] = args.consistency
    if args.start_timeout:
        env["TFPS_TIMEOUT"] = repr(args.start_timeout)
    if args.log_level or args.verbose:
        env["TFPS_LOG_LEVEL"] = args.log_level or "debug"
    if args.log_with_timestamp is not None:
        env["TFPS_LOG_TIMESTAMP"] = "1" if args.log_with_timestamp else "0"
    if args.timeline_filename:
        env["TFPS_TIMELINE"] = os.path.abspath(_timeline_path(args.timeline_filename))
    if args.fusion_threshold_mb is not None:
        env["TFPS_FUSION_BYTES"] = str(int(args.fusion_threshold_mb * (1 << 20)))
    if args.cycle_time_ms is not None:
        env["TFPS_CYCLE_US"] = str(int(round(args.cycle_time_ms * 1000)))
    if args.hierarchical_allreduce is not None:
        env["TFPS_HIERARCHICAL"] = "1" if args.hierarchical_allreduce else "0"
    if args.autotune:
        env["TFPS_AUTOTUNE"] = "1"
        steps = args.autotune_steps_per_sample
        if steps is not None:
            env["TFPS_AUTOTUNE_STEPS_PER_SAMPLE"] = str(steps)
        if args.autotune_warmup_samples is not None:
            env["TFPS_AUTOTUNE_WARMUP_STEPS"] = str(args.autotune_warmup_samples *
                                                    (steps or 10))
        if args.autotune_log_file:
            env["TFPS_AUTOTUNE_LOG"] = os.path.abspath(args.autotune_log_file)
    if args.no_stall_check:
        env["TFPS_STALL_WARNING"] = env["TFPS_STALL_SHUTDOWN"] = "0"
    else:
        if args.stall_check_warning_time_seconds is not None:
            env["TFPS_STALL_WARNING"] = repr(float(args.stall_check_warning_time_seconds))
        if args.stall_check_shutdown_time_seconds is not None:
            env["TFPS_STALL_SHUTDOWN"] = repr(float(args.stall_check_shutdown_time_seconds))
    return env
