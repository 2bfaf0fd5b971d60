"""The process library behind tfps-run, the test fixture and the benchmarks
(tf_ps_ops/_launch_*.py): the worker environment table, teardown of whole process
groups, naming the first failure, deadlines. No ps_server: stand-in scripts play it.
"""

import os
import signal
import sys
import textwrap
import time

import pytest

from tf_ps_ops.common import config as _config
from tf_ps_ops.runner.env import (DIALECTS, WORKER_VARIABLES, Place, place_variables,
                                   without_cluster_variables, worker_env)
from tf_ps_ops.runner.job import Job, LaunchError
from tf_ps_ops.runner.process import Host, LogFiles

pytestmark = pytest.mark.timeout(60)
PLACE = Place(rank=2, size=4, num_servers=3, scheduler_host="10.1.2.3",
              scheduler_port=1234, local_rank=1, local_size=2)


def python(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pid, limit_s=5.0):
    give_up = time.monotonic() + limit_s
    while alive(pid) and time.monotonic() < give_up:
        time.sleep(0.02)
    return not alive(pid)


@pytest.fixture
def job(tmp_path):
    made = []

    def make(timeout=None, ps_server="unused", num_workers=2, num_servers=1):
        made.append(Job(ps_server, num_workers, num_servers, LogFiles(tmp_path),
                        timeout=timeout))
        return made[-1]

    yield make
    for j in made:
        j.teardown()


# --- the environment table -----------------------------------------------------------

def test_every_dialect_carries_the_place():
    env = place_variables(PLACE)
    assert set(env) == {name for name, _, _ in WORKER_VARIABLES}
    assert env["TFPS_SCHEDULER"] == "10.1.2.3:1234" and env["DMLC_ROLE"] == "worker"
    for name in ("TFPS_RANK", "DMLC_WORKER_ID", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"):
        assert env[name] == "2", name
    for name in ("TFPS_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"):
        assert env[name] == "1", name
    assert (env["DMLC_PS_ROOT_URI"], env["DMLC_PS_ROOT_PORT"]) == ("10.1.2.3", "1234")
    assert env["DMLC_NUM_SERVER"] == env["TFPS_NUM_SERVERS"] == "3"


@pytest.mark.parametrize("dialects, local", [
    (DIALECTS, True), (("tfps",), False), (("dmlc",), False), (("tfps", "tfps_local"), True)])
def test_what_the_launcher_writes_the_worker_reads_back(dialects, local):
    # The writer's table (_launch_env) and the reader's (_config) must agree.
    cluster = _config.read_cluster(place_variables(PLACE, dialects))
    assert (cluster.scheduler_host, cluster.scheduler_port) == ("10.1.2.3", 1234)
    assert (cluster.rank, cluster.size, cluster.num_servers) == (2, 4, 3)
    expected = (1, 2) if local else (None, None)
    assert (cluster.local_rank, cluster.local_size) == expected


def test_only_the_chosen_dialect_is_set_and_it_wins_over_the_base():
    env = worker_env(PLACE, {"TFPS_RANK": "9", "PATH": "/bin", "N": 5}, ("tfps",))
    assert env["TFPS_RANK"] == "2" and env["PATH"] == "/bin" and env["N"] == "5"
    assert not any(name.startswith(("DMLC_", "HOROVOD_", "OMPI_")) for name in env)
    assert "TFPS_LOCAL_RANK" not in env
    with pytest.raises(ValueError, match="unknown dialects"):
        place_variables(PLACE, ("mpich",))


def test_inherited_cluster_variables_are_dropped():
    env = without_cluster_variables({"TFPS_TIMEOUT": "1", "DMLC_ROLE": "server",
                                     "HOROVOD_RANK": "3", "HOME": "/root"})
    assert env == {"HOME": "/root"}


# --- processes, teardown, failures, deadlines ----------------------------------------

GRANDCHILD = """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(child.pid, flush=True)
    time.sleep(600)
"""


def started_grandchild(process, limit_s=10.0):
    give_up = time.monotonic() + limit_s
    while time.monotonic() < give_up:
        text = process.result().stdout
        if text.endswith("\n"):
            return int(text)
        time.sleep(0.02)
    pytest.fail("the child never started its own child:\n" + process.result().describe())


@pytest.mark.parametrize("grace_s", [0.0, 0.5])
def test_teardown_kills_the_whole_group_even_what_ignores_sigterm(job, grace_s):
    j = job()
    worker = j.start_worker(0, python(GRANDCHILD), dict(os.environ))
    grandchild = started_grandchild(worker)
    started = time.monotonic()
    j.teardown(grace_s)
    assert grace_s <= time.monotonic() - started < grace_s + 5
    assert worker.returncode == -signal.SIGKILL  # SIGTERM was ignored
    assert wait_gone(grandchild), "the grandchild outlived the teardown"
    j.teardown(grace_s)  # a second teardown is harmless


def test_teardown_reaches_a_group_whose_leader_has_exited(job):
    j = job()
    leader = j.start_worker(0, python("""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(child.pid, flush=True)
    """), dict(os.environ))
    grandchild = started_grandchild(leader)
    j.wait([leader], time.monotonic() + 10)
    assert leader.returncode == 0 and alive(grandchild)
    j.teardown()
    assert wait_gone(grandchild)


def test_supervise_names_the_first_failure(job):
    j = job(num_workers=3)
    env = dict(os.environ)
    workers = [j.start_worker(0, python("import time; time.sleep(600)"), env),
               j.start_worker(1, python("import time, sys; time.sleep(0.2); sys.exit(3)"), env),
               j.start_worker(2, python("import time, sys; time.sleep(1.5); sys.exit(5)"), env)]
    with pytest.raises(LaunchError) as raised:
        j.supervise(workers, linger_s=1)
    assert str(raised.value) == "worker 1 exited with code 3; stopped the others"
    assert raised.value.code == 3 and raised.value.process is workers[1]
    time.sleep(1.5)  # worker 2 fails too, later: still worker 1 is the first
    assert j.first_failure() is workers[1]


def test_a_worker_killed_by_a_signal_is_named_with_the_shell_code(job):
    j = job(num_workers=1)
    worker = j.start_worker(0, python("import os, signal; os.kill(os.getpid(), 9)"),
                            dict(os.environ))
    with pytest.raises(LaunchError, match=r"^worker 0 was killed by signal 9 \(SIGKILL\); ") as e:
        j.supervise([worker], linger_s=1)
    assert e.value.code == 137


def test_supervise_returns_when_every_worker_exited_0(job):
    j = job(num_workers=2)
    workers = [j.start_worker(r, python("pass"), dict(os.environ)) for r in range(2)]
    j.supervise(workers, linger_s=0.1)
    assert [w.result().ok for w in workers] == [True, True]


def test_the_job_deadline_ends_supervise_with_124(job):
    j = job(timeout=0.5, num_workers=1)
    worker = j.start_worker(0, python("import time; time.sleep(600)"), dict(os.environ))
    started = time.monotonic()
    with pytest.raises(LaunchError, match=r"^timed out after 0.5 s; stopped all processes$") as e:
        j.supervise([worker], linger_s=1)
    assert e.value.code == 124 and time.monotonic() - started < 5


def test_wait_kills_at_the_deadline_and_marks_timed_out(job):
    j = job()
    slow = j.start_worker(0, python("import time; time.sleep(600)"), dict(os.environ))
    busy = j.start_worker(1, python("""
        import time
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        print("done")
    """), dict(os.environ))
    j.wait([slow, busy], time.monotonic() + 3)
    slow_result, busy_result = slow.result(), busy.result()
    assert slow_result.timed_out and not slow_result.ok
    assert slow_result.returncode == -signal.SIGKILL
    assert "TIMED OUT" in slow_result.describe()
    assert busy_result.ok and busy_result.stdout == "done\n"
    assert busy_result.cpu_s >= 0.25  # reaped with wait4: its CPU time is known


def test_a_command_that_cannot_start_is_a_launch_error_127(job):
    with pytest.raises(LaunchError, match="^cannot start worker 1: ") as e:
        job().start_worker(1, ["/no/such/program-tfps"], dict(os.environ))
    assert e.value.code == 127


# --- the scheduler and servers, played by a stand-in ---------------------------------

FAKE_PS_SERVER = """#!{python}
import os, sys
args = sys.argv[1:]
print(" ".join(args), flush=True)
if os.environ.get("FAKE_EXIT"):
    sys.exit(int(os.environ["FAKE_EXIT"]))
if "--port-file" in args:
    import time
    time.sleep(float(os.environ.get("FAKE_DELAY", "0")))
    path = args[args.index("--port-file") + 1]
    with open(path + ".tmp", "w") as f:
        f.write("4321\\n")
    os.rename(path + ".tmp", path)
"""


@pytest.fixture
def fake_ps_server(tmp_path):
    path = tmp_path / "fake_ps_server"
    path.write_text(FAKE_PS_SERVER.format(python=sys.executable))
    path.chmod(0o755)
    return path


def test_scheduler_port_and_server_flags(job, fake_ps_server, tmp_path):
    j = job(ps_server=fake_ps_server, num_workers=2, num_servers=2)
    assert j.start_scheduler(dict(os.environ), tmp_path / "port") == 4321
    assert j.place(1).scheduler == "127.0.0.1:4321"
    local = j.start_server(0, dict(os.environ), threads=3)
    # An emulated host: the command is wrapped, and the server says where it is.
    wrapped = Host("10.9.8.7", wrap=lambda argv: ["env", "WRAPPED=1", *argv])
    remote = j.start_server(1, dict(os.environ), host=wrapped)
    j.wait([local, remote], time.monotonic() + 10)
    assert local.result().stdout.split() == [
        "--role", "server", "--scheduler", "127.0.0.1:4321", "--num-workers", "2",
        "--num-servers", "2", "--threads", "3"]
    assert remote.result().stdout.split()[-2:] == ["--host", "10.9.8.7"]


def test_a_port_file_left_by_an_earlier_job_is_not_read(job, fake_ps_server, tmp_path):
    # Found at 64 workers: the stale file was read before the scheduler wrote its own, and
    # every process waited out TFPS_TIMEOUT on a dead port.
    (tmp_path / "port").write_text("1111\n")
    j = job(ps_server=fake_ps_server, num_workers=1, num_servers=1)
    assert j.start_scheduler(dict(os.environ, FAKE_DELAY="0.3"), tmp_path / "port") == 4321


def test_scheduler_failing_before_its_port_is_named(job, fake_ps_server, tmp_path):
    j = job(ps_server=fake_ps_server)
    with pytest.raises(LaunchError) as e:
        j.start_scheduler(dict(os.environ, FAKE_EXIT="7"), tmp_path / "port")
    assert str(e.value) == "scheduler exited with code 7 before publishing its port"
    assert e.value.code == 7 and e.value.process.name == "scheduler"
