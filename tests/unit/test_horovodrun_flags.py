"""tfps-run speaks horovodrun: its flag spellings parse to the same settings, the flags that
tune the job land in every role's environment under their TFPS_* names, and the usage
line is generated from the parser, so it names every flag."""

import pytest

from tf_ps_ops.runner import run


def parse(*argv):
    return run.parse_args(list(argv) + ["python3", "train.py"])


def test_horovodrun_spellings_mean_the_same():
    args = parse("--num-proc", "3", "-H", "a:2,b:2", "-p", "2222", "-i", "/k",
                 "--network-interfaces", "eth1,eth2")
    assert (args.num_workers, args.ssh_port, args.ssh_identity_file, args.network_interface) \
        == (3, 2222, "/k", "eth1")
    assert parse("-np", "2").num_workers == parse("--num-workers", "2").num_workers == 2


@pytest.mark.parametrize("argv,env", [
    ([], {}),
    (["--start-timeout", "300"], {"TFPS_TIMEOUT": "300.0"}),
    (["--verbose"], {"TFPS_LOG_LEVEL": "debug"}),
    (["--verbose", "--log-level", "WARNING"], {"TFPS_LOG_LEVEL": "warning"}),
    (["--log-level", "TRACE"], {"TFPS_LOG_LEVEL": "debug"}),
    (["--log-level", "fatal"], {"TFPS_LOG_LEVEL": "error"}),
    (["--fusion-threshold-mb", "64"], {"TFPS_FUSION_BYTES": str(64 << 20)}),
    (["--fusion-threshold-mb", "0"], {"TFPS_FUSION_BYTES": "0"}),
    (["--hierarchical-allreduce"], {"TFPS_HIERARCHICAL": "1"}),
    (["--no-hierarchical-allreduce"], {"TFPS_HIERARCHICAL": "0"}),
    (["--log-with-timestamp"], {"TFPS_LOG_TIMESTAMP": "1"}),
    (["--log-without-timestamp"], {"TFPS_LOG_TIMESTAMP": "0"}),
    (["--consistency", "ssp:2"], {"TFPS_CONSISTENCY": "ssp:2"}),
    (["--stall-check-warning-time-seconds", "30"], {"TFPS_STALL_WARNING": "30.0"}),
    (["--stall-check-shutdown-time-seconds", "600"], {"TFPS_STALL_SHUTDOWN": "600.0"}),
    (["--no-stall-check", "--stall-check-shutdown-time-seconds", "600"],
     {"TFPS_STALL_WARNING": "0", "TFPS_STALL_SHUTDOWN": "0"}),
    (["--no-stall-check", "--stall-check"], {}),
])
def test_tuning_flags_set_the_roles_environment(argv, env):
    assert run.tuning_env(parse("-np", "2", *argv)) == env


@pytest.mark.parametrize("given,written", [("/t/timeline.json", "/t/timeline.%r.json"),
                                           ("/t/tl_%r.json", "/t/tl_%r.json"),
                                           ("/t/trace", "/t/trace.%r")])
def test_timeline_filename_gets_one_file_per_worker(given, written):
    env = run.tuning_env(parse("-np", "2", "--timeline-filename", given))
    assert env == {"TFPS_TIMELINE": written}


def test_mark_cycles_is_accepted_with_a_note(capsys):
    args = parse("-np", "2", "--timeline-mark-cycles")
    assert args.timeline_mark_cycles
    assert "no meaning here" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--log-level", "LOUD"], "'LOUD' is not one of TRACE, DEBUG"),
    (["--fusion-threshold-mb", "-1"], "argument --fusion-threshold-mb: must be at least 0"),
    (["--network-interfaces", ","], "expected an interface name"),
])
def test_bad_values_are_refused_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse("-np", "2", *argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_usage_names_every_flag(capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--help"])
    usage = capsys.readouterr().out
    for flag in ("--num-proc", "--ssh-port", "--ssh-identity-file", "--ssh-config-file",
                 "--network-interface", "--insecure", "--elastic", "--elastic-min-workers",
                 "--elastic-restarts", "--elastic-server-restarts", "--start-timeout",
                 "--verbose", "--log-level", "--timeline-filename", "--timeline-mark-cycles",
                 "--output-filename", "--fusion-threshold-mb", "--hierarchical-allreduce",
                 "--version", "--check-build", "--config-file", "--log-with-timestamp",
                 "--prefix-output-with-timestamp", "--cycle-time-ms", "--autotune",
                 "--stall-check-warning-time-seconds", "--gloo", "--mpi",
                 "--host-discovery-script", "--min-np", "--max-np", "--slots",
                 "--slots-per-host", "--elastic-timeout", "--min-num-proc", "--max-num-proc"):
        assert flag in usage, flag


@pytest.mark.parametrize("flag", ["--gloo", "--mpi", "--autotune-bayes-opt-max-samples=5",
                                  "--disable-cache", "--mpi-threads-disable",
                                  "--torus-allreduce"])
def test_flags_without_a_meaning_are_accepted_with_a_note(flag, capsys):
    args = parse("-np", "2", flag)
    assert run.tuning_env(args) == {}
    notes = capsys.readouterr().err.splitlines()
    name = flag.split("=")[0]
    assert len(notes) == 1 and notes[0].startswith(f"tfps-run: {name} has no meaning here")


def test_autotune_flags_set_the_autotuners_environment(tmp_path):
    args = parse("-np", "2", "--autotune", "--autotune-steps-per-sample", "4",
                 "--autotune-warmup-samples", "2", "--autotune-log-file",
                 str(tmp_path / "tune.csv"))
    assert run.tuning_env(args) == {"TFPS_AUTOTUNE": "1", "TFPS_AUTOTUNE_STEPS_PER_SAMPLE": "4",
                                    "TFPS_AUTOTUNE_WARMUP_STEPS": "8",
                                    "TFPS_AUTOTUNE_LOG": str(tmp_path / "tune.csv")}
    assert run.tuning_env(parse("-np", "2", "--no-autotune")) == {}


def test_short_spellings_of_version_and_check_build(capsys):
    assert run.parse_args(["-cb"]).check_build
    with pytest.raises(SystemExit) as exited:
        run.parse_args(["-v"])
    assert exited.value.code == 0 and "tf_ps_ops" in capsys.readouterr().out


def write_config(tmp_path, text):
    path = tmp_path / "horovod.yaml"
    path.write_text(text)
    return str(path)


def test_config_file_takes_horovodrun_keys(tmp_path, capsys):
    config = write_config(tmp_path, """
params:
  fusion_threshold_mb: 32
  hierarchical_allreduce: false
  cycle_time_ms: 3.5
timeline:
  filename: /t/tl.json
logging:
  level: DEBUG
  with_timestamp: true
stall_check:
  enabled: false
  warning_time_seconds: 30
controller: gloo
""")
    args = parse("-np", "2", "--config-file", config)
    assert run.tuning_env(args) == {
        "TFPS_FUSION_BYTES": str(32 << 20), "TFPS_HIERARCHICAL": "0",
        "TFPS_TIMELINE": "/t/tl.%r.json", "TFPS_LOG_LEVEL": "debug", "TFPS_LOG_TIMESTAMP": "1",
        "TFPS_STALL_WARNING": "0", "TFPS_STALL_SHUTDOWN": "0", "TFPS_CYCLE_US": "3500"}
    err = capsys.readouterr().err
    assert "tfps-run: --gloo has no meaning here" in err
    assert "--cycle-time-ms" not in err


def test_command_line_flags_win_over_the_config_file(tmp_path):
    config = write_config(tmp_path, "params:\n  fusion_threshold_mb: 32\n"
                                    "logging:\n  level: ERROR\n")
    # Given before and after the file: the command line wins either way, as in horovodrun.
    for argv in (["--fusion-threshold-mb", "8", "--config-file", config],
                 ["--config-file", config, "--fusion-threshold-mb", "8"]):
        env = run.tuning_env(parse("-np", "2", *argv))
        assert env == {"TFPS_FUSION_BYTES": str(8 << 20), "TFPS_LOG_LEVEL": "error"}


@pytest.mark.parametrize("text,message", [
    ("params:\n  fusion_threshold_mb: -1\n",
     "params.fusion_threshold_mb: must be at least 0"),
    ("logging:\n  level: LOUD\n", "logging.level: 'LOUD' is not one of TRACE"),
    ("params:\n  hierarchical_allreduce: maybe\n",
     "params.hierarchical_allreduce must be true or false"),
    ("params:\n  fusion_mb: 3\n", "params.fusion_mb is not one of horovodrun's keys"),
    ("tuning:\n  x: 1\n", "'tuning' is not one of horovodrun's sections"),
    ("controller: nccl\n", "controller: 'nccl' is not gloo or mpi"),
    ("- a list\n", "expected a mapping of horovodrun's sections"),
    ("params: [\n", "--config-file"),
])
def test_bad_config_files_are_refused_naming_the_key(tmp_path, text, message, capsys):
    config = write_config(tmp_path, text)
    with pytest.raises(SystemExit) as exited:
        parse("-np", "2", "--config-file", config)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_config_file_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse("-np", "2", "--config-file", str(tmp_path / "absent.yaml"))
    assert "absent.yaml" in capsys.readouterr().err


def test_the_cycle_time_becomes_microseconds():
    assert run.tuning_env(parse("-np", "2", "--cycle-time-ms", "0.25")) == {
        "TFPS_CYCLE_US": "250"}
    assert run.tuning_env(parse("-np", "2", "--cycle-time-ms", "0")) == {"TFPS_CYCLE_US": "0"}
    with pytest.raises(SystemExit):
        parse("-np", "2", "--cycle-time-ms", "-1")
