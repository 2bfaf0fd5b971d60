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
    (["--consistency", "ssp:2"], {"TFPS_CONSISTENCY": "ssp:2"}),
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
    (["--fusion-threshold-mb", "-1"], "--fusion-threshold-mb must be at least 0"),
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
                 "--version", "--check-build"):
        assert flag in usage, flag
