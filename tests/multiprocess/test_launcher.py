"""tfps-run end to end: real scheduler and servers, stand-in workers without TensorFlow.

Every launcher run has a hard timeout and its exit code checked, and every process it
started (seen in /proc while it ran) must be gone once it has exited.
"""

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster import PS_SERVER, REPO
from sigint import default_sigint

RUN_PY = REPO / "tf_ps_ops" / "run.py"
SCRIPTS = Path(__file__).resolve().parent / "launcher_scripts"
WORKER = [sys.executable, str(SCRIPTS / "worker.py")]

pytestmark = pytest.mark.timeout(120)


def _load_run_module():
    # By path, as the launcher runs below: no need for the checkout on sys.path. That file
    # enters the launcher's module (tf_ps_ops/runner/run.py), which the tests look into.
    spec = importlib.util.spec_from_file_location("tfps_launcher", RUN_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sys.modules[module.main.__module__]


run = _load_run_module()


@pytest.fixture
def real_ps_server():
    if not os.access(PS_SERVER, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{PS_SERVER} missing: `make build` should have built it")
        pytest.skip("ps_server not built: run `make build`")


@pytest.fixture
def fake_ps_server(tmp_path):
    """--ps-server arguments selecting launcher_scripts/fake_ps_server.py."""
    shim = tmp_path / "ps_server"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" '
                    f'"{SCRIPTS / "fake_ps_server.py"}" "$@"\n')
    shim.chmod(0o755)
    return ["--ps-server", str(shim)]


def _stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The command name may hold spaces and parentheses: split after the last ')'.
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _children_of(pid):
    return {int(p) for p in os.listdir("/proc")
            if p.isdigit() and (_stat(p) or [None, None])[1] == str(pid)}


def _alive(pid):
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"  # a zombie runs nothing any more


def assert_gone(pids, wait_s=5.0):
    give_up = time.monotonic() + wait_s
    while any(_alive(p) for p in pids) and time.monotonic() < give_up:
        time.sleep(0.05)
    left = [p for p in pids if _alive(p)]
    for pid in left:  # so that one failing test does not leave them to the next
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


def launch(*args, env=None, timeout=60, signal_after_children=None):
    """Runs tfps-run ARGS; returns (returncode, stdout, stderr, elapsed seconds).

    signal_after_children=(SIG, K): send SIG to the launcher once it has K children.
    """
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(RUN_PY), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, preexec_fn=default_sigint)
    seen = set()
    while True:
        children = _children_of(proc.pid)
        seen |= children
        if signal_after_children and len(children) >= signal_after_children[1]:
            time.sleep(1.0)  # let the workers get past Python's start-up
            proc.send_signal(signal_after_children[0])
            signal_after_children = None
        try:
            out, err = proc.communicate(timeout=0.05)  # keeps partial output on timeout
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() - start > timeout:
                proc.kill()
                proc.communicate()
                pytest.fail(f"tfps-run {args} still running after {timeout} s")
    assert_gone(seen)
    return proc.returncode, out, err, time.monotonic() - start


def _pids(text, what):
    return [int(p) for p in re.findall(rf"{what} pid=(\d+)", text)]


# Argument handling, in process.

def test_parse_args_takes_everything_after_the_command():
    args = run.parse_args(["-np", "2", "python3", "train.py", "-np", "3", "--timeout", "1"])
    assert (args.num_workers, args.num_servers, args.port) == (2, 1, 0)
    assert args.timeout is None and args.server_threads is None
    assert args.command == ["python3", "train.py", "-np", "3", "--timeout", "1"]
    assert run.parse_args(["-np", "1", "--", "a", "-b"]).command == ["a", "-b"]
    assert str(PS_SERVER) == run.DEFAULT_PS_SERVER


def test_worker_env_speaks_every_dialect():
    env = run.worker_env({"TFPS_RANK": "9", "PATH": "/bin"}, 2, 4, 3, 1234)
    assert env["PATH"] == "/bin"
    assert env["TFPS_SCHEDULER"] == "127.0.0.1:1234"
    for name in ["TFPS_RANK", "TFPS_LOCAL_RANK", "DMLC_WORKER_ID", "HOROVOD_RANK",
                 "HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"]:
        assert env[name] == "2", name
    for name in ["TFPS_SIZE", "DMLC_NUM_WORKER", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE"]:
        assert env[name] == "4", name
    assert env["DMLC_NUM_SERVER"] == env["TFPS_NUM_SERVERS"] == "3"
    assert (env["DMLC_PS_ROOT_URI"], env["DMLC_PS_ROOT_PORT"]) == ("127.0.0.1", "1234")


@pytest.mark.parametrize("args, message", [
    (["-np", "2", "-ns", "0", "true"], "-ns/--num-servers: must be at least 1, got 0"),
    (["-np", "0", "true"], "-np/--num-workers/--num-proc: must be at least 1, got 0"),
    (["-np", "2"], "no COMMAND given"),
    (["true"], "required: -np/--num-workers"),
    (["-np", "1", "--timeout", "0", "true"], "--timeout: must be positive"),
])
def test_bad_arguments_exit_2(args, message):
    code, _, err, _ = launch(*args, timeout=30)
    assert code == 2 and message in err


def test_missing_ps_server_says_how_to_build_it(tmp_path):
    code, _, err, _ = launch("--ps-server", str(tmp_path / "nope"), "-np", "1", "true",
                             timeout=30)
    assert code == 1 and "ps_server not built (no executable at" in err
    # What to do, for a checkout and for a pip install.
    assert "run `make build`" in err and "pip install --force-reinstall" in err


def test_command_that_cannot_start_is_reported(fake_ps_server):
    code, _, err, _ = launch(*fake_ps_server, "-np", "2", "no-such-command-tfps", timeout=30)
    assert code == 127
    assert "tfps-run: cannot start worker 0: [Errno 2] No such file or directory" in err


# Faults of the scheduler and servers, injected with the stand-in ps_server.

def test_scheduler_failing_before_its_port_is_reported(fake_ps_server):
    code, _, err, _ = launch(*fake_ps_server, "-np", "2", *WORKER, "--sleep",
                             env={"FAKE_PS_SERVER_EXIT": "scheduler:7"}, timeout=30)
    assert code == 7
    assert "[scheduler] fake scheduler failing with code 7" in err
    assert err.rstrip().endswith(
        "tfps-run: scheduler exited with code 7 before publishing its port")


def test_server_failure_stops_the_workers(fake_ps_server):
    code, _, err, elapsed = launch(*fake_ps_server, "-np", "2", "-ns", "2", *WORKER,
                                     "--sleep", env={"FAKE_PS_SERVER_EXIT": "server:5"},
                                     timeout=30)
    assert code == 5
    assert re.search(r"tfps-run: server [01] exited with code 5; stopped the others\n$", err)
    assert elapsed < 20


# With the real ps_server.

def test_workers_get_their_place_and_output_is_prefixed(real_ps_server):
    code, out, err, elapsed = launch("-np", "3", "-ns", "2", "--server-threads", "2", *WORKER,
                                     "--print-env", "--connect", "--odd-output")
    assert code == 0, err
    port = re.search(r"\[worker 0\] DMLC_PS_ROOT_PORT=(\d+)\n", out).group(1)
    for rank in range(3):
        expected = {
            "TFPS_SCHEDULER": f"127.0.0.1:{port}", "TFPS_RANK": rank, "TFPS_SIZE": 3,
            "TFPS_LOCAL_RANK": rank, "TFPS_LOCAL_SIZE": 3, "TFPS_NUM_SERVERS": 2,
            "DMLC_ROLE": "worker", "DMLC_WORKER_ID": rank, "DMLC_NUM_WORKER": 3,
            "DMLC_NUM_SERVER": 2, "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": port,
            "HOROVOD_RANK": rank, "HOROVOD_SIZE": 3, "HOROVOD_LOCAL_RANK": rank,
            "HOROVOD_LOCAL_SIZE": 3, "OMPI_COMM_WORLD_RANK": rank,
            "OMPI_COMM_WORLD_SIZE": 3, "OMPI_COMM_WORLD_LOCAL_RANK": rank,
        }
        for name, value in expected.items():
            assert f"[worker {rank}] {name}={value}\n" in out
        assert f"[worker {rank}] connected to the scheduler\n" in out
        assert f"[worker {rank}] no newline at the end\n" in out
        assert f"[worker {rank}] to stderr from {rank}\n" in err
    # Every line, of every child, carries a prefix.
    for line in (out + err).splitlines():
        assert re.match(r"\[(worker [0-2]|server [01]|scheduler)\] ", line), line
    # The C++ roles' own log lines start with the UTC time by default (TFPS_LOG_TIMESTAMP).
    assert re.search(r"^\[(server [01]|scheduler)\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} "
                     r"\[tfps ", err, re.M), err
    # Stand-in workers never say goodbye: the servers are stopped after a short wait.
    assert elapsed < 20


def test_output_filename_writes_each_workers_output_as_horovodrun(real_ps_server, tmp_path):
    """--output-filename DIR: DIR/rank.N/stdout and stderr hold worker N's lines as it
    printed them (unprefixed), and the terminal still gets them prefixed; tuning flags
    (--log-level, --fusion-threshold-mb) reach every worker's environment."""
    logs = tmp_path / "logs"
    code, out, err, _ = launch("-np", "2", "--output-filename", str(logs), "--log-level",
                               "WARNING", "--fusion-threshold-mb", "1", *WORKER,
                               "--print-env", "--odd-output")
    assert code == 0, err
    for rank in range(2):
        stdout = (logs / f"rank.{rank}" / "stdout").read_text()
        stderr = (logs / f"rank.{rank}" / "stderr").read_text()
        assert f"TFPS_RANK={rank}\n" in stdout and "[worker" not in stdout
        assert "TFPS_LOG_LEVEL=warning\n" in stdout
        assert f"TFPS_FUSION_BYTES={1 << 20}\n" in stdout
        assert stderr == f"to stderr from {rank}\n"
        assert f"[worker {rank}] TFPS_RANK={rank}\n" in out
    assert sorted(p.name for p in logs.iterdir()) == ["rank.0", "rank.1"]


def test_a_local_job_listens_on_loopback_with_a_key_of_its_own(real_ps_server):
    code, out, err, _ = launch("-np", "2", *WORKER, "--print-security", "--connect")
    assert code == 0, err
    for rank in range(2):
        assert f"[worker {rank}] bind=127.0.0.1 key_mode=0o600\n" in out, out
        assert f"[worker {rank}] scheduler listens on 127.0.0.1\n" in out, out
    assert "without authentication" not in err, err


@pytest.mark.parametrize("fail, code, how", [
    ("1:3", 3, "exited with code 3"),
    ("1:-9", 137, "was killed by signal 9 (SIGKILL)"),
])
def test_worker_failure_stops_the_others(real_ps_server, fail, code, how):
    got, out, err, elapsed = launch("-np", "3", *WORKER, "--fail", fail, "--sleep")
    assert got == code
    assert err.endswith(f"tfps-run: worker 1 {how}; stopped the others\n")
    assert len(_pids(out, "ready")) == 2  # ranks 0 and 2, gone now (checked by launch)
    assert elapsed < 20


def test_timeout_kills_everything_even_what_ignores_sigterm(real_ps_server):
    code, out, err, elapsed = launch("-np", "2", "--timeout", "3", *WORKER, "--sleep",
                                     "--ignore-sigterm", "--spawn-grandchild")
    assert code == 124
    assert err.endswith("tfps-run: timed out after 3 s; stopped all processes\n")
    grandchildren = _pids(out, "grandchild")
    assert len(grandchildren) == 2
    assert_gone(grandchildren)
    assert 3 + run._KILL_GRACE_S <= elapsed < 20  # SIGTERM was ignored: SIGKILL did it


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"),
                                             (signal.SIGTERM, 143, "terminated")])
def test_signal_to_the_launcher_leaves_nothing_behind(real_ps_server, sig, code, word):
    # scheduler + 2 servers + 2 workers = 5 children
    got, out, err, _ = launch("-np", "2", "-ns", "2", *WORKER, "--sleep",
                              "--spawn-grandchild", signal_after_children=(sig, 5))
    assert got == code
    assert err.endswith(f"tfps-run: {word}; stopped all processes\n")
    assert_gone(_pids(out, "grandchild"))


def test_config_file_and_timestamps_as_horovodrun(real_ps_server, tmp_path):
    """--config-file with horovodrun's keys reaches every worker's environment (a flag on
    the command line wins over it); --prefix-output-with-timestamp stamps every printed
    line, and logging.with_timestamp: false takes the UTC time off the roles' own lines."""
    config = tmp_path / "horovod.yaml"
    config.write_text("params:\n  fusion_threshold_mb: 2\n"
                      "logging:\n  level: DEBUG\n  with_timestamp: false\n")
    code, out, err, _ = launch("-np", "2", "--config-file", str(config), "--log-level", "INFO",
                               "--prefix-output-with-timestamp", *WORKER, "--print-env",
                               "--connect")
    assert code == 0, err
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} "
    for rank in range(2):
        assert re.search(rf"^{stamp}\[worker {rank}\] TFPS_FUSION_BYTES={2 << 20}$", out, re.M)
        assert re.search(rf"^{stamp}\[worker {rank}\] TFPS_LOG_LEVEL=info$", out, re.M)
        assert re.search(rf"^{stamp}\[worker {rank}\] TFPS_LOG_TIMESTAMP=0$", out, re.M)
    for line in (out + err).splitlines():
        if not line.startswith("tfps-run: "):
            assert re.match(rf"{stamp}\[(worker [01]|server 0|scheduler)\] ", line), line
    # The C++ roles' own lines: the arrival stamp, the prefix, then theirs, untimed.
    assert re.search(rf"^{stamp}\[(server 0|scheduler)\] \[tfps ", err, re.M), err
