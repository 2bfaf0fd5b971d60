"""tfps-run's host list (-H, --hostfile), placement of roles on hosts, what an ssh host
forwards and sends, and --check-build; no process is started on another host."""

import json
import subprocess
import sys

import pytest

from cluster import REPO
from tf_ps_ops.runner import run
from tf_ps_ops.runner import ssh as _launch_ssh
from tf_ps_ops.runner.env import LOCAL_ADDRESS


def test_parse_hosts_and_hostfile(tmp_path):
    assert _launch_ssh.parse_hosts("h1:2,h2:2") == [("h1", 2), ("h2", 2)]
    assert _launch_ssh.parse_hosts("h1,[::1]:3, h3 ") == [("h1", 1), ("::1", 3), ("h3", 1)]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=4\nnode2:2  # two\n\nnode3\n")
    assert _launch_ssh.parse_hostfile(hostfile) == [("node1", 4), ("node2", 2), ("node3", 1)]


@pytest.mark.parametrize("text,message", [("h1:0", "slots must be"), ("h1:x", "slots must"),
                                          ("h1,h1", "listed twice"), (",", "no hosts")])
def test_bad_host_lists(text, message):
    with pytest.raises(ValueError, match=message):
        _launch_ssh.parse_hosts(text)


def test_bad_hostfile_line_names_file_and_line(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=2\nnode2 cpus=4\n")
    with pytest.raises(ValueError, match="hosts:2"):
        _launch_ssh.parse_hostfile(hostfile)


def test_placement_fills_slots_in_order_and_spreads_servers():
    args = run.parse_args(["-H", "a:2,b:3", "true"])
    assert (args.num_workers, args.num_servers) == (5, 2)
    hosts, servers, workers = run.placement(args)
    assert [h.name for h in hosts] == ["a", "b"] and all(h.remote for h in hosts)
    assert [s.name for s in servers] == ["a", "b"]
    assert [(h.name, lr, ls) for h, lr, ls in workers] == [
        ("a", 0, 2), ("a", 1, 2), ("b", 0, 3), ("b", 1, 3), ("b", 2, 3)]
    args = run.parse_args(["-H", "a:2,b:3", "-np", "3", "-ns", "3", "true"])
    _, servers, workers = run.placement(args)
    assert [s.name for s in servers] == ["a", "b", "a"]
    assert [(h.name, lr, ls) for h, lr, ls in workers] == [("a", 0, 2), ("a", 1, 2),
                                                          ("b", 0, 1)]


def test_local_only_host_list_stays_on_loopback():
    hosts, _, _ = run.placement(run.parse_args(["-H", "localhost:2", "true"]))
    assert hosts[0].local and hosts[0].address == LOCAL_ADDRESS and hosts[0].tagged


@pytest.mark.parametrize("argv,message", [
    (["-H", "a:2", "-np", "3", "true"], "more than the 2 slots"),
    (["-H", "a:2", "--hostfile", "f", "true"], "not both"),
    (["--hostfile", "/nonexistent/hosts", "true"], "No such file"),
])
def test_bad_host_arguments_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_ssh_options_and_what_a_remote_process_receives(monkeypatch, tmp_path):
    args = run.parse_args(["-H", "a,b", "--ssh-port", "2222", "--ssh-identity-file", "k",
                           "--ssh-config-file", "c", "true"])
    assert run.ssh_args(args) == ["-p", "2222", "-i", "k", "-F", "c"]
    host = _launch_ssh.SshHost("node2", run.ssh_args(args))
    env = {"PATH": "/x", "TFPS_RANK": "1", "HOME": "/root", "SSH_AUTH_SOCK": "s",
           "SECRET_JOB_KEY": "k"}
    argv, ssh_env = host.command(["python3", "train.py"], env)
    assert argv[:2] == ["ssh", "-T"] and "node2" in argv
    assert "-p" in argv and "TFPS_RANK" not in argv[-1] and "SECRET" not in argv[-1]
    monkeypatch.chdir(tmp_path)
    spec = json.loads(host.stdin_payload(["python3", "train.py"], env))
    assert spec == {"argv": ["python3", "train.py"], "cwd": str(tmp_path),
                    "env": {"PATH": "/x", "TFPS_RANK": "1", "SECRET_JOB_KEY": "k"}}


def test_remote_wrapper_runs_the_command_and_stops_it_when_stdin_ends(tmp_path):
    """The far end of ssh, run here: exit code passed back; stdin's end kills the group."""
    source = (REPO / "tf_ps_ops" / "runner" / "remote.py").read_text()
    spec = {"argv": [sys.executable, "-c", "import os,sys; sys.exit(int(os.environ['C']))"],
            "env": {"C": "7"}, "cwd": str(tmp_path)}
    wrapper = subprocess.Popen([sys.executable, "-c", source], stdin=subprocess.PIPE)
    wrapper.stdin.write((json.dumps(spec) + "\n").encode())
    wrapper.stdin.flush()  # and it stays open, as ssh keeps it
    assert wrapper.wait(timeout=30) == 7
    wrapper.stdin.close()
    marker = tmp_path / "started"
    spec = {"argv": ["sh", "-c", f"touch {marker}; sleep 60 & sleep 60"], "env": {},
            "cwd": str(tmp_path)}
    wrapper = subprocess.Popen([sys.executable, "-c", source], stdin=subprocess.PIPE)
    wrapper.stdin.write((json.dumps(spec) + "\n").encode())
    wrapper.stdin.flush()
    for _ in range(200):
        if marker.exists():
            break
        subprocess.run(["sleep", "0.05"])
    wrapper.stdin.close()  # what a closed ssh session looks like
    assert wrapper.wait(timeout=10) == 128 + 15  # sh killed by SIGTERM


def test_check_build_lists_the_parts():
    done = subprocess.run([sys.executable, REPO / "tf_ps_ops" / "run.py", "--check-build"],
                          capture_output=True, text=True, timeout=60)
    assert "op library" in done.stdout and "ps_server" in done.stdout
    assert "built against TensorFlow" in done.stdout
