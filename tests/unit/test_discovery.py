"""The host discovery script's output (`tfps-run --host-discovery-script`), as horovodrun
reads it, and the flags that go with it; the script itself runs in
tests/multiprocess/test_elastic_growth.py."""

import pytest

from tf_ps_ops.runner import run
from tf_ps_ops.runner.discovery import DiscoveryError, describe, parse_hosts_output


@pytest.mark.parametrize("text,default,hosts", [
    ("localhost:2\n", 1, [("localhost", 2)]),
    ("node1\nnode2:3\n", 4, [("node1", 4), ("node2", 3)]),
    ("\n# a comment\n  node1:1  # inline\n\n", 1, [("node1", 1)]),
    ("", 1, []),                                       # no host right now: valid
    ("node1:0\nnode2\n", 2, [("node2", 2)]),           # a host without slots counts nothing
    ("10.0.0.1:2\n[fe80::1]:3\n", 1, [("10.0.0.1", 2), ("fe80::1", 3)]),
])
def test_output_is_read_as_horovodrun_reads_it(text, default, hosts):
    assert parse_hosts_output(text, default, "S") == hosts


@pytest.mark.parametrize("text,message", [
    ("node1:x\n", "S: output line 1 'node1:x': slots must be a whole number"),
    ("node1:-1\n", "output line 1 'node1:-1': slots must be a whole number"),
    ("ok:1\nnode 1\n", "output line 2 'node 1': expected `host` or `host:slots`"),
    (":2\n", "output line 1 ':2': expected `host` or `host:slots`"),
    ("a:1\na:2\n", "output line 2 'a:2': host a is listed twice"),
    ("[::1]:2\n::1\n", "output line 2 '::1': host ::1 is listed twice"),
])
def test_bad_output_is_refused_naming_the_line(text, message):
    with pytest.raises(DiscoveryError) as refused:
        parse_hosts_output(text, 1, "S")
    assert message in str(refused.value)


def test_describe_names_hosts_and_slots():
    assert describe([]) == "no host"
    assert describe([("a", 2), ("b", 1)]) == "a:2, b:1 (3 slot(s))"


def parse(*argv):
    return run.parse_args(list(argv) + ["python3", "train.py"])


def test_a_script_implies_elastic_and_np_is_the_minimum():
    args = parse("-np", "2", "--host-discovery-script", "./hosts.sh")
    assert (args.elastic, args.min_np, args.max_np, args.num_workers, args.slots) == \
        (True, 2, None, 2, 1)
    args = parse("--min-num-proc", "3", "--max-num-proc", "5", "--slots-per-host", "4",
                 "--host-discovery-script", "./hosts.sh", "--elastic-timeout", "20")
    assert (args.min_np, args.max_np, args.num_workers, args.slots, args.elastic_timeout) == \
        (3, 5, 3, 4, 20.0)


@pytest.mark.parametrize("argv,message", [
    (["--host-discovery-script", "s"], "--host-discovery-script needs -np N or --min-np N"),
    (["-np", "3", "--max-np", "2", "--host-discovery-script", "s"],
     "--max-np 2 is less than --min-np/-np 3"),
    (["-H", "a:2", "--host-discovery-script", "s"],
     "give --host-discovery-script or -H/--hostfile, not both"),
    (["-np", "2", "--min-np", "2"], "--min-np needs --host-discovery-script"),
    (["-np", "2", "--slots", "2"], "--slots needs --host-discovery-script"),
    (["-np", "2", "--host-discovery-script", "s", "--elastic-timeout", "0"],
     "argument --elastic-timeout: must be positive"),
])
def test_bad_combinations_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
