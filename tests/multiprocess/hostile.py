"""A hostile client for tests: a real scheduler and ps_server, and pyzmq sockets that
register as a worker and then send what a real worker never would.

Everything binds or connects on loopback only.
"""

import os
import re
import subprocess
import time

import zmq

from native import PS_SERVER, load_core

core = load_core()
T = core.MSG_TYPES


def wait_port_file(proc, port_file, timeout=30):
    deadline = time.monotonic() + timeout
    while not port_file.exists() or not port_file.read_text().strip():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no port file"
        time.sleep(0.05)
    return int(port_file.read_text())


def served_ports(log):
    """The ports a ps_server's log says it serves on: "serving on port A" with, given more
    than one I/O thread, " (and B,C: one port per I/O thread)"; [] before that line."""
    found = re.search(r"serving on port (\d+)(?: \(and ([\d,]+): one port per I/O "
                      r"thread\))? with", log)
    if not found:
        return []
    return [int(found.group(1))] + [int(p) for p in (found.group(2) or "").split(",") if p]


def rss_kib(pid):
    """Resident set size of process `pid` in KiB (/proc/PID/status, VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


class Job:
    """A scheduler and one ps_server for `num_workers` workers; the test plays the workers."""

    def __init__(self, tmp_path, num_workers=1, env=None, log_name="server.log", server=True,
                 server_port=0, preexec_fn=None):
        # The test plays some workers by hand: they cannot take part in hierarchical
        # aggregation's token exchange at init, so real workers here stay flat.
        self.env = {**os.environ, "TFPS_TIMEOUT": "30", "TFPS_HIERARCHICAL": "0",
                    "TFPS_BIND": "127.0.0.1", **(env or {})}
        self.context = zmq.Context()
        self.procs = []
        self.preexec_fn = preexec_fn  # run in each role's process before it starts
        port_file = tmp_path / "scheduler.port"
        self.scheduler_log = open(tmp_path / "scheduler.log", "w+")
        self.scheduler = self._spawn(
            ["--role", "scheduler", "--port", "0", "--port-file", str(port_file),
             "--num-workers", str(num_workers), "--num-servers", "1"], self.scheduler_log)
        self.scheduler_port = wait_port_file(self.scheduler, port_file)
        self.num_workers = num_workers
        self.server_port = server_port  # 0: any free port
        self.server_log_path = tmp_path / log_name
        self.server_log = open(self.server_log_path, "w+")
        self.server = self.start_server() if server else None
        self.registrants = []

    def start_server(self):
        self.server = self._spawn(
            ["--role", "server", "--scheduler", f"127.0.0.1:{self.scheduler_port}",
             "--host", "127.0.0.1", "--port", str(self.server_port),
             "--num-workers", str(self.num_workers),
             "--num-servers", "1"], self.server_log)
        return self.server

    def _spawn(self, args, log):
        proc = subprocess.Popen([PS_SERVER] + args, stdout=subprocess.DEVNULL, stderr=log,
                                env=self.env, preexec_fn=self.preexec_fn)
        self.procs.append(proc)
        return proc

    def socket(self, kind, routing_id=None):
        s = self.context.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        if routing_id is not None:
            s.setsockopt(zmq.ROUTING_ID, routing_id)
        return s

    def register_workers(self, num_workers, consistency=None, hosts=None):
        """Registers ranks 0..num_workers-1 with the scheduler (with the workers'
        consistency model when given; each from hosts[rank] when given, else 127.0.0.1:
        a host's lowest rank is its local leader); returns the server address."""
        extra = () if consistency is None else (consistency,)
        for rank in range(num_workers):
            s = self.socket(zmq.DEALER)
            s.connect(f"tcp://127.0.0.1:{self.scheduler_port}")
            s.send_multipart([core.encode_head(dict(type=T["REGISTER"])),
                              core.format_register("worker",
                                                   hosts[rank] if hosts else "127.0.0.1", 1, rank,
                                                   num_workers, *extra).encode()])
            self.registrants.append(s)
        view = None
        for s in self.registrants:
            ready = False
            while not ready:
                assert s.poll(30000), "the scheduler never answered"
                head, text = s.recv_multipart()
                err, fields = core.decode_head(head, len(text))
                assert err is None and fields["type"] == T["REGISTER_REPLY"], (err, text)
                view = core.parse_register_reply(text.decode())
                ready = view["ready"]
        return view["servers"][0]

    def connect_worker(self, address, rank):
        """A DEALER on the server's port that says hello as worker `rank`."""
        s = self.socket(zmq.DEALER, f"w{rank}".encode())
        s.connect(address if address.startswith("tcp://") else "tcp://" + address)
        s.send_multipart([core.encode_head(dict(type=T["HELLO"], sender=rank))])
        assert s.poll(30000), "the server never answered the hello"
        head = s.recv_multipart()[0]
        err, fields = core.decode_head(head, 0)
        assert err is None and fields["type"] == T["HELLO_REPLY"], (err, fields)
        return s

    def server_log_text(self):
        if not self.server_log.closed:
            self.server_log.flush()
        return self.server_log_path.read_text(errors="replace")

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.context.destroy(linger=0)
        self.server_log.close()
        self.scheduler_log.close()
