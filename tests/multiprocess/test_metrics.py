"""The metrics ports (docs/metrics.md): every role answers GET /metrics with Prometheus text
that prometheus_client's parser reads, the counters move by exactly what a job did, the
ports bind under the same rule as every other socket, and no HTTP client can wedge them."""

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster import PS_SERVER, REPO, free_base, require_build, run_job
from tf_ps_ops.common.metrics_text import parse, scrape

pytestmark = pytest.mark.timeout(400)
WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metrics_workers")
KEYLESS = {k: v for k, v in os.environ.items()
           if k not in ("TFPS_AUTH_KEY_FILE", "TFPS_BIND", "TFPS_INSECURE",
                        "TFPS_METRICS_PORT")}
STEPS, ELEMENTS = 6, 1000  # counters_worker.py's
# A loaded machine (2 cores, several jobs) can take minutes to import TensorFlow in two
# workers: the jobs' deadlines are generous, they bound a hang, not the normal run.
JOB_ENV = {"TFPS_HIERARCHICAL": "0", "TFPS_SHM_SERVER": "0", "TFPS_TIMEOUT": "300"}


def delta(report, role, sample):
    return report["after"][role].get(sample, 0.0) - report["before"][role].get(sample, 0.0)


def test_every_role_answers_and_the_counters_count_the_job(tmp_path):
    base = free_base(4)  # scheduler, 1 server, 2 workers
    out = run_job([sys.executable, "-m", "tf_ps_ops.run", "-np", "2", "-ns", "1",
                   "--metrics-port", str(base), "--status-every", "0.5", "--timeout", "340",
                   sys.executable, os.path.join(WORKERS, "counters_worker.py")],
                  timeout=360, env={"OUT_DIR": str(tmp_path), **JOB_ENV})
    nbytes = STEPS * ELEMENTS * 4
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert report["port"] == report["own"] == base + 2 + rank
        # Well formed: prometheus_client's own parser reads it, with the types we declare.
        families = {f.name: f for f in text_string_to_metric_families(report["text"])}
        assert families["tfps_worker_steps"].type == "counter"
        assert families["tfps_worker_push_pull_seconds"].type == "histogram"
        assert families["tfps_worker_partitions_in_flight"].type == "gauge"
        labels = families["tfps_worker_steps"].samples[0].labels
        assert labels == {"role": "worker", "rank": str(rank)}
        # The worker's counters moved by what it did: 6 calls of one 4000-byte tensor.
        assert delta(report, "worker", "tfps_worker_steps_total") == STEPS
        assert delta(report, "worker", "tfps_worker_push_pulls_total") == STEPS
        assert delta(report, "worker", "tfps_worker_push_pull_seconds_count") == STEPS
        assert delta(report, "worker", 'tfps_worker_sent_bytes_total{peer="server"}') == nbytes
        assert delta(report, "worker",
                     'tfps_worker_received_bytes_total{peer="server"}') == nbytes
        assert delta(report, "worker", "tfps_errors_total") == 0
        assert report["after"]["worker"]["tfps_worker_partitions_in_flight"] >= 0
        # The same numbers in-process, read just after.
        assert report["in_process"]["tfps_worker_steps_total"] == \
            report["after"]["worker"]["tfps_worker_steps_total"]
        # The server summed one round per step (each answered only after both pushed).
        assert delta(report, "server", "tfps_server_rounds_total") == STEPS
        assert report["after"]["server"]["tfps_server_pushes_total"] >= 2 * STEPS
        assert report["after"]["server"]['tfps_server_sent_bytes_total{peer="worker"}'] >= \
            2 * nbytes
        assert report["after"]["server"]["tfps_server_push_bytes_limit"] > 0
        assert report["after"]["server"]["process_resident_memory_bytes"] > 0
        # Every role exports the queue depths, budget, memory, errors and stalls (docs'
        # "which role exports what"); nothing failed or stalled in this job.
        for role, names in (("worker", ["tfps_worker_send_queue_partitions",
                                        "tfps_worker_request_queue"]),
                            ("server", ["tfps_server_summation_queue",
                                        "tfps_server_push_bytes_held"]),
                            ("scheduler", [])):
            for name in names + ["tfps_errors_total", "tfps_stalls_total",
                                 "tfps_membership_changes_total",
                                 "process_resident_memory_bytes"]:
                assert name in report["after"][role], (role, name)
            assert report["after"][role]["tfps_errors_total"] == 0, role
            assert report["after"][role]["tfps_stalls_total"] == 0, role
        # Membership as each role saw it: the server both workers connecting; a worker no
        # notice about another member (nobody left).
        assert report["after"]["server"]["tfps_membership_changes_total"] == 2
        assert report["after"]["worker"]["tfps_membership_changes_total"] == 0
        # The scheduler saw one server and two workers register.
        scheduler = report["after"]["scheduler"]
        assert scheduler["tfps_scheduler_registrations_total"] == 3
        assert scheduler["tfps_scheduler_members"] == 3
        assert scheduler["tfps_membership_changes_total"] == 3
    status = re.findall(r"tfps-run status: steps/s (.*?) \| MB/s (.*?) \| slowest (.*)", out)
    assert status, out[-3000:]
    assert any(re.fullmatch(r"[\d.]+ \(rank 0\) [\d.]+ \(rank 1\)", s[0]) for s in status), status


# --- one role alone: the scheduler, waiting for members, serves its port all along.

def start_scheduler(tmp_path, env):
    port_file = tmp_path / "port"
    log = open(tmp_path / "scheduler.log", "w+")
    proc = subprocess.Popen([PS_SERVER, "--role", "scheduler", "--port", "0", "--port-file",
                             str(port_file), "--num-workers", "1", "--num-servers", "1"],
                            stdout=subprocess.DEVNULL, stderr=log, text=True,
                            env={**KEYLESS, "TFPS_METRICS_PORT": "0", **env})
    give_up = time.monotonic() + 30
    while proc.poll() is None and not port_file.exists() and time.monotonic() < give_up:
        time.sleep(0.05)
    log.seek(0)
    found = re.search(r"metrics: http://\S+:(\d+)/metrics", log.read())
    return proc, (int(found.group(1)) if found else None), log


@pytest.fixture
def scheduler(tmp_path):
    require_build()
    proc, port, log = start_scheduler(tmp_path, {"TFPS_BIND": "127.0.0.1"})
    try:
        assert port is not None, open(log.name).read()
        yield port
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()


def request(port, data, read=True):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        if not read:
            return b""
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_answers_only_get_metrics(scheduler):
    reply = request(scheduler, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").decode()
    head, body = reply.split("\r\n\r\n", 1)
    assert head.startswith("HTTP/1.1 200") and "text/plain; version=0.0.4" in head
    assert f"Content-Length: {len(body.encode())}" in head
    samples = parse(body)
    assert samples["tfps_scheduler_registrations_total"] == 0
    assert 'role="scheduler"' in body and "tfps_worker_steps_total" not in body
    assert request(scheduler, b"GET /other HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert request(scheduler, b"POST /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 405")
    # A head beyond 8 KiB is refused at 8 KiB, not buffered.
    assert request(scheduler, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000) \
        .startswith(b"HTTP/1.1 431")


def test_idle_and_slow_clients_cannot_keep_a_scrape_out(scheduler):
    idle = [socket.create_connection(("127.0.0.1", scheduler), timeout=10) for _ in range(100)]
    slow = socket.create_connection(("127.0.0.1", scheduler), timeout=10)
    slow.sendall(b"GET /met")  # and never the rest
    try:
        # 100 idle connections (over the 64 kept), and a scrape still gets its answer.
        assert scrape("127.0.0.1", scheduler).startswith("# HELP")
        # An incomplete request is closed after 5 s (recv sees the end, not a timeout).
        slow.settimeout(15)
        assert slow.recv(1024) == b""
        counted = parse(scrape("127.0.0.1", scheduler))["tfps_metrics_scrapes_total"]
        assert counted == 2
    finally:
        for s in idle + [slow]:
            s.close()


# --- binding: the rule of every other socket (docs/security.md).

def test_a_keyless_scheduler_refuses_a_metrics_port_beyond_loopback(tmp_path):
    require_build()
    proc, port, log = start_scheduler(tmp_path, {"TFPS_BIND": "0.0.0.0"})
    proc.wait(timeout=30)
    err = open(log.name).read()
    assert proc.returncode == 2 and port is None, err
    assert "the scheduler's metrics port (TFPS_METRICS_PORT) would listen on 0.0.0.0" in err
    assert "TFPS_AUTH_KEY_FILE" in err and "TFPS_INSECURE=1" in err


def test_a_keyless_server_refuses_a_metrics_port_beyond_loopback():
    require_build()
    proc = subprocess.run([PS_SERVER, "--role", "server", "--scheduler", "127.0.0.1:9",
                           "--num-workers", "1", "--num-servers", "1"], capture_output=True,
                          text=True, timeout=60, env={**KEYLESS, "TFPS_METRICS_PORT": "0"})
    assert proc.returncode == 1, proc.stderr
    assert "this server's metrics port (TFPS_METRICS_PORT) would listen on every interface" \
        in proc.stderr


def test_a_keyless_worker_refuses_a_metrics_port_beyond_loopback():
    require_build()
    # The worker core without TensorFlow (tests/native.py): the same engine as the op
    # library's, which refuses before it contacts any scheduler.
    code = ("import sys; sys.path.insert(0, 'tests'); from native import load_core\n"
            "try:\n    load_core().init('127.0.0.1', 9, 0, 1, 1)\n"
            "except RuntimeError as e:\n    print(e); sys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO,
                          env={**KEYLESS, "TFPS_TIMEOUT": "5", "TFPS_METRICS_PORT": "0"})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "worker 0's metrics port (TFPS_METRICS_PORT) would listen on every interface" \
        in proc.stdout


@pytest.mark.parametrize("consent", ["insecure", "key"])
def test_with_the_jobs_consent_it_listens_beyond_loopback(tmp_path, consent):
    require_build()
    env = {"TFPS_BIND": "0.0.0.0"}
    if consent == "insecure":
        env["TFPS_INSECURE"] = "1"
    else:
        key = tmp_path / "job.key"
        subprocess.run([PS_SERVER, "--gen-key", str(key)], check=True, timeout=30)
        env["TFPS_AUTH_KEY_FILE"] = str(key)
    proc, port, log = start_scheduler(tmp_path, env)
    try:
        assert port is not None, open(log.name).read()
        assert parse(scrape("127.0.0.1", port))["tfps_metrics_scrapes_total"] == 1
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()


# --- the Keras callback: TensorBoard scalars from the same counters.

@pytest.mark.parametrize("keras", ["keras", "tf_keras"])
def test_keras_callback_writes_throughput_and_bytes_per_step(tmp_path, keras):
    run_job([sys.executable, "-m", "tf_ps_ops.run", "-np", "2", "-ns", "1", "--timeout", "340",
             sys.executable, os.path.join(WORKERS, "keras_worker.py")],
            timeout=360, env={"OUT_DIR": str(tmp_path), "TFPS_TEST_KERAS": keras, **JOB_ENV})
    for rank in (0, 1):
        report = json.loads((tmp_path / f"keras-{rank}.json").read_text())
        assert any(base.startswith(keras) for base in report["base"]), report["base"]
        scalars = report["scalars"]
        writes = 8 // 2  # STEPS // EVERY in keras_worker.py
        for tag in ("tfps/samples_per_sec", "tfps/job_samples_per_sec", "tfps/steps_per_sec",
                    "tfps/comm_seconds_per_step", "tfps/bytes_per_step"):
            assert len(scalars[tag]) == writes, (tag, scalars)
        # Every batch push_pulls each gradient once, float32, the flat path: its bytes go
        # to the server and come back summed.
        assert scalars["tfps/bytes_per_step"] == [2 * 4 * report["parameters"]] * writes
        assert all(v > 0 for v in scalars["tfps/comm_seconds_per_step"])
        for local, job in zip(scalars["tfps/samples_per_sec"], scalars["tfps/job_samples_per_sec"]):
            assert job == pytest.approx(2 * local)
        assert report["last"]["tfps/bytes_per_step"] == 2 * 4 * report["parameters"]
