"""Authentication with a job key (TFPS_AUTH_KEY_FILE): ZeroMQ CURVE, admitted by ZAP.

Without it any process that reached the ports could register as a worker (taking a rank)
or as a server (both workers got 42 instead of 3), or say hello on a server's port as a
worker. With a key, a peer without it gets nothing and changes nothing: its registration
and hello go unanswered, the job keeps its ranks and servers and trains.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from hostile import Job, T, core, served_ports
from native import PS_SERVER

WORKER = Path(__file__).parent / "core_workers" / "loop_worker.py"


def make_key(tmp_path, name="job.key"):
    path = tmp_path / name
    subprocess.run([PS_SERVER, "--gen-key", str(path)], check=True, timeout=30)
    return path


def keyed_env(key):
    return {"TFPS_AUTH_KEY_FILE": str(key), "TFPS_BIND": "127.0.0.1"}


def unanswered(job, port, frames, curve=None, routing_id=None, wait_s=2.0):
    """Sends `frames` from a socket without the job key; True if nothing came back."""
    s = job.socket(zmq.DEALER, routing_id)
    if curve is not None:  # its own key pair, and the job's public key (say it leaked)
        public, secret = zmq.curve_keypair()
        s.curve_serverkey = curve
        s.curve_publickey, s.curve_secretkey = public, secret
    s.connect(f"tcp://127.0.0.1:{port}")
    s.send_multipart(frames, zmq.NOBLOCK)
    got = s.poll(int(wait_s * 1000))
    s.close(linger=0)
    return not got


def job_public_key(key):
    return zmq.curve_public(key.read_text().strip().encode())


def run_worker(job, key, steps=3):
    env = dict(os.environ, TFPS_SCHEDULER=f"127.0.0.1:{job.scheduler_port}", TFPS_RANK="0",
               TFPS_SIZE="1", TFPS_NUM_SERVERS="1", TFPS_TIMEOUT="30", **keyed_env(key))
    return subprocess.run([sys.executable, str(WORKER), str(steps)], env=env,
                          capture_output=True, text=True, timeout=60)


def register(role, rank=0):
    return [core.encode_head(dict(type=T["REGISTER"])),
            core.format_register(role, "127.0.0.1", 1, rank, 1).encode()]


def test_a_keyed_job_trains_and_warns_about_nothing(make_cluster, tmp_path):
    key = make_key(tmp_path)
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    cluster = make_cluster(2, 1, timeout=60, env=keyed_env(key))
    cluster.start([sys.executable, WORKER, "5"])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        assert "step 4 ok" in cluster.result("worker", rank).stdout
        assert "without authentication" not in cluster.result("worker", rank).stderr
    assert "without authentication" not in cluster.result("server", 0).stderr


def test_an_impostor_worker_is_refused_and_the_job_keeps_its_rank(tmp_path):
    key = make_key(tmp_path)
    job = Job(tmp_path, env=keyed_env(key))
    try:
        # Without any key, and with a key pair of its own that knows the job's public key.
        assert unanswered(job, job.scheduler_port, register("worker"))
        assert unanswered(job, job.scheduler_port, register("worker"),
                          curve=job_public_key(key))
        done = run_worker(job, key)
        assert done.returncode == 0, (done.stdout, done.stderr, job.server_log_text())
        assert "step 2 ok" in done.stdout
    finally:
        job.close()
    assert "does not hold this job's key" in (tmp_path / "scheduler.log").read_text()


def test_an_impostor_server_is_refused_and_the_real_one_serves(tmp_path):
    key = make_key(tmp_path)
    job = Job(tmp_path, env=keyed_env(key), server=False)
    try:
        assert unanswered(job, job.scheduler_port, register("server"))
        assert unanswered(job, job.scheduler_port, register("server"),
                          curve=job_public_key(key))
        job.start_server()
        done = run_worker(job, key)
        assert done.returncode == 0, (done.stdout, done.stderr, job.server_log_text())
        assert "step 2 ok" in done.stdout
    finally:
        job.close()


@pytest.mark.parametrize("io_threads", [1, 2])
def test_a_hello_without_the_key_on_a_server_port_gets_nothing(tmp_path, io_threads):
    key = make_key(tmp_path)
    job = Job(tmp_path, env={**keyed_env(key), "TFPS_IO_THREADS": str(io_threads)})
    worker = None
    try:
        env = dict(os.environ, TFPS_SCHEDULER=f"127.0.0.1:{job.scheduler_port}",
                   TFPS_RANK="0", TFPS_SIZE="1", TFPS_NUM_SERVERS="1", **keyed_env(key))
        go = tmp_path / "go"
        worker = subprocess.Popen([sys.executable, str(WORKER), "3", "--wait-for", str(go)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        deadline = time.monotonic() + 30
        log = ""
        while not served_ports(log):
            assert time.monotonic() < deadline, log
            time.sleep(0.1)
            log = job.server_log_text()
        ports = served_ports(log)
        assert len(ports) == io_threads, log  # one per I/O thread, each the same CURVE socket
        hello = [core.encode_head(dict(type=T["HELLO"], sender=0))]
        for port in ports:
            assert unanswered(job, port, hello, routing_id=b"w0")
            assert unanswered(job, port, hello, routing_id=b"w0", curve=job_public_key(key))
        go.touch()
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0 and "step 2 ok" in out, (out, err)
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        job.close()


def test_a_key_file_others_can_read_or_not_a_key_is_refused(tmp_path):
    key = make_key(tmp_path)
    key.chmod(0o644)
    bad = tmp_path / "bad.key"
    bad.write_text("not a key\n")
    bad.chmod(0o600)
    for path, says in ((key, "chmod 600"), (bad, "does not hold a CURVE secret key")):
        done = subprocess.run([PS_SERVER, "--role", "scheduler", "--num-workers", "1",
                               "--num-servers", "1", "--auth-key-file", str(path)],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and says in done.stderr, done
