"""Emulated hosts joined by a link with a fixed one-way delay (this kernel has no netem).

    with DelayHosts(4, rate="1gbit", delay_ms=10) as hosts:   # same interface as netns.Hosts
        hosts.popen(0, [...]); hosts.address(1); hosts.relay_stats()

    python3 benchmarks/delay_link.py check [--delay-ms 10] [--rate 1gbit]   # ping + TCP probe
    python3 benchmarks/delay_link.py ping ADDRESS [COUNT]                   # ICMP echo RTTs

Topology: one network namespace per host with loopback and one TUN device `eth0`
(10.x.y.i/24, MTU 65000 by default, so that 1 Gbit/s is only ~2000 packets a second), and a
router namespace in which one relay process (this file, `relay`) runs. The relay opened
every host's TUN (setns into the host's namespace, open /dev/net/tun, back), so packets a
host routes to 10.x.y.0/24 reach the relay; it reads each one, looks up the destination
address and writes the packet to that host's TUN `delay_ms` after it read it. All packets
wait the same time, so one FIFO keeps them in order; the queue is bounded (`queue_mb`)
and what does not fit is dropped and counted, like packets with no host behind their
address. tbf on each host's eth0 limits its egress rate before the relay, as in
netns.Hosts. TCP buffers in each host may grow to `tcp_buffer_mb` (a 1 Gbit/s link with
50 ms RTT holds 6.25 MB in flight; the kernel's default limit would cap the window).

The relay's own counters (packets, bytes, drops, how late it delivered) are in
relay_stats(). Cleanup is netns.Hosts': the relay lives in the router namespace, so it is
killed with everything else there, and its TUN devices vanish with it (they are not
persistent); then the namespaces are deleted. Nothing is created in the root namespace.
"""

import argparse
import collections
import ctypes
import errno
import fcntl
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from netns import Hosts, HostsError, _ip  # noqa: E402

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
READY_TIMEOUT = 20.0


def tun_available():
    """(True, "") when TUN devices can be made here, else (False, why)."""
    if not os.path.exists("/dev/net/tun"):
        return False, "/dev/net/tun does not exist (no TUN support)"
    if not os.access("/dev/net/tun", os.R_OK | os.W_OK):
        return False, "/dev/net/tun is not readable and writable by this user"
    return True, ""


# --- the relay (runs inside the router namespace) -------------------------------------

def _setns(libc, path):
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "setns(%s): %s" % (path, os.strerror(e)))
    finally:
        os.close(fd)


def _open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


class Relay:
    def __init__(self, hosts, delay_s, queue_bytes, stats_path):
        """hosts: [(namespace, IPv4 address)]."""
        libc = ctypes.CDLL(None, use_errno=True)
        self.delay_s, self.queue_bytes, self.stats_path = delay_s, queue_bytes, stats_path
        self.by_address = {}
        self.fds = []
        own = "/proc/self/ns/net"
        home = os.open(own, os.O_RDONLY)
        try:
            for namespace, address in hosts:
                _setns(libc, os.path.join("/run/netns", namespace))
                fd = _open_tun("eth0")
                self.fds.append(fd)
                self.by_address[socket.inet_aton(address)] = fd
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the router namespace")
            os.close(home)
        self.queue = collections.deque()  # (due, fd, packet), due never decreasing
        self.queued = 0
        self.stats = dict(packets=0, bytes=0, dropped_queue_full=0, dropped_unroutable=0,
                          dropped_not_ipv4=0,
                          write_errors=0, max_queue_bytes=0, late_ms_max=0.0,
                          late_ms_sum=0.0, delay_ms=delay_s * 1e3)
        self._written_at = 0.0

    def _read(self, fd):
        stats = self.stats
        for _ in range(64):  # then look at the other devices and the clock again
            try:
                packet = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            now = time.monotonic()
            if len(packet) < 20 or packet[0] >> 4 != 4:
                stats["dropped_not_ipv4"] += 1  # e.g. IPv6 router solicitations
                continue
            target = self.by_address.get(packet[16:20])
            if target is None:
                stats["dropped_unroutable"] += 1
                continue
            if self.queued + len(packet) > self.queue_bytes:
                stats["dropped_queue_full"] += 1
                continue
            self.queue.append((now + self.delay_s, target, packet))
            self.queued += len(packet)
            if self.queued > stats["max_queue_bytes"]:
                stats["max_queue_bytes"] = self.queued

    def _deliver(self):
        queue, stats = self.queue, self.stats
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            due, fd, packet = queue.popleft()
            self.queued -= len(packet)
            try:
                os.write(fd, packet)
            except OSError:
                stats["write_errors"] += 1
                continue
            late = (now - due) * 1e3
            stats["packets"] += 1
            stats["bytes"] += len(packet)
            stats["late_ms_sum"] += late
            if late > stats["late_ms_max"]:
                stats["late_ms_max"] = late

    def _write_stats(self, force=False):
        now = time.monotonic()
        if not force and now - self._written_at < 0.5:
            return
        self._written_at = now
        tmp = self.stats_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(self.stats, written_at=time.time()), f)
        os.rename(tmp, self.stats_path)

    def run(self):
        poller = select.epoll()
        for fd in self.fds:
            poller.register(fd, select.EPOLLIN)
        self._write_stats(force=True)
        while True:
            if self.queue:
                timeout = max(0.0, self.queue[0][0] - time.monotonic())
            else:
                timeout = 0.5
            # epoll rounds the timeout up to whole milliseconds: never early, <1 ms late.
            for fd, _ in poller.poll(timeout):
                self._read(fd)
            self._deliver()
            self._write_stats()


def relay_main(argv):
    parser = argparse.ArgumentParser(prog="delay_link.py relay")
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--queue-mb", type=float, default=64)
    parser.add_argument("--stats", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("hosts", nargs="+", help="NAMESPACE=ADDRESS")
    args = parser.parse_args(argv)
    hosts = [tuple(h.split("=", 1)) for h in args.hosts]
    relay = Relay(hosts, args.delay_ms / 1e3, int(args.queue_mb * 2**20), args.stats)
    with open(args.ready + ".tmp", "w") as f:
        f.write("%d\n" % os.getpid())
    os.rename(args.ready + ".tmp", args.ready)
    relay.run()


# --- the hosts ------------------------------------------------------------------------

class DelayHosts(Hosts):
    """netns.Hosts whose links add `delay_ms` one way (RTT 2 x delay_ms), through the
    relay; `rate` limits each host's egress with tbf as before."""

    def __init__(self, n, rate=None, delay_ms=0.0, burst="256kb", latency="50ms", mtu=65000,
                 queue_mb=64, tcp_buffer_mb=32):
        ok, why = tun_available()
        if not ok:
            raise HostsError(why)
        if delay_ms < 0:
            raise ValueError("delay_ms must be >= 0, got %r" % delay_ms)
        self.delay_ms, self.mtu, self.queue_mb = float(delay_ms), int(mtu), queue_mb
        self.tcp_buffer_mb = tcp_buffer_mb
        self._tmp = tempfile.mkdtemp(prefix="delay_link.")
        self.relay = None
        super().__init__(n, rate=rate, burst=burst, latency=latency)

    def _build(self, burst, latency):
        router = self.bridge_ns
        self._add_namespace(router)
        _ip("ip", "-n", router, "link", "set", "lo", "up")
        for i, name in enumerate(self.names):
            self._add_namespace(name)
            _ip("ip", "-n", name, "link", "set", "lo", "up")
        ready = os.path.join(self._tmp, "ready")
        self._stats_path = os.path.join(self._tmp, "stats.json")
        self._log_path = os.path.join(self._tmp, "relay.log")
        argv = ["ip", "netns", "exec", router, sys.executable, os.path.abspath(__file__),
                "relay", "--delay-ms", str(self.delay_ms), "--queue-mb", str(self.queue_mb),
                "--stats", self._stats_path, "--ready", ready]
        argv += ["%s=%s" % (name, self._hosts[i]) for i, name in enumerate(self.names)]
        with open(self._log_path, "w") as log:
            self.relay = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self._children.append(self.relay)
        deadline = time.monotonic() + READY_TIMEOUT
        while not os.path.exists(ready):
            if self.relay.poll() is not None or time.monotonic() > deadline:
                with open(self._log_path) as f:
                    raise HostsError("the delay relay did not start (exit %s): %s"
                                     % (self.relay.poll(), f.read()[-2000:]))
            time.sleep(0.02)
        buffers = str(int(self.tcp_buffer_mb * 2**20))
        for i, name in enumerate(self.names):
            _ip("ip", "-n", name, "addr", "add", "%s/%d" % (self._hosts[i],
                                                            self.subnet.prefixlen), "dev", "eth0")
            _ip("ip", "-n", name, "link", "set", "eth0", "mtu", str(self.mtu), "up")
            if self.rate:
                _ip("tc", "-n", name, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate",
                    self.rate, "burst", burst, "latency", latency)
            if self.tcp_buffer_mb:
                _ip("ip", "netns", "exec", name, "sysctl", "-q", "-w",
                    "net.ipv4.tcp_rmem=4096 131072 " + buffers,
                    "net.ipv4.tcp_wmem=4096 16384 " + buffers)

    def relay_stats(self, timeout=5.0):
        """The relay's counters: packets, bytes, drops, lateness. The relay writes them every
        0.5 s; this waits for a copy written after the call, so every packet the relay
        delivered before it is counted."""
        asked = time.time()
        deadline = time.monotonic() + timeout
        while True:
            with open(self._stats_path) as f:
                stats = json.load(f)
            if stats["written_at"] >= asked:
                break
            if self.relay.poll() is not None or time.monotonic() > deadline:
                with open(self._log_path) as f:
                    log = f.read()[-2000:]
                raise HostsError("the delay relay wrote no counters for %.1f s (exit %s): %s"
                                 % (timeout, self.relay.poll(), log))
            time.sleep(0.05)
        if stats["packets"]:
            stats["late_ms_mean"] = stats["late_ms_sum"] / stats["packets"]
        return stats

    def close(self):
        try:
            super().close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)


# --- measuring the link ---------------------------------------------------------------

def _checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def ping(address, count=5, interval=0.2, timeout=5.0):
    """ICMP echo RTTs in ms to `address` (raw socket: root); a lost reply raises."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    rtts = []
    try:
        for seq in range(count):
            body = struct.pack("!HHd", ident, seq, time.monotonic())
            header = struct.pack("!BBH", 8, 0, 0)
            packet = struct.pack("!BBH", 8, 0, _checksum(header + body)) + body
            sent = time.monotonic()
            sock.sendto(packet, (address, 0))
            deadline = sent + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no echo reply from %s for seq %d in %.0f s"
                                       % (address, seq, timeout))
                sock.settimeout(left)
                reply, _ = sock.recvfrom(65536)
                now = time.monotonic()
                icmp = reply[(reply[0] & 0x0F) * 4:]
                if len(icmp) >= 8 and icmp[0] == 0 and struct.unpack("!HH", icmp[4:8]) == (
                        ident, seq):
                    rtts.append((now - sent) * 1e3)
                    break
            time.sleep(interval)
    finally:
        sock.close()
    return rtts


def tcp_throughput(hosts, src, dst, seconds=3.0):
    """Gbit/s of one TCP stream from host src to host dst (benchmarks/tcp_probe.py)."""
    probe = os.path.join(HERE, "tcp_probe.py")
    port_file = os.path.join(hosts._tmp, "probe_port")
    server = hosts.popen(dst, [sys.executable, probe, "serve", hosts.address(dst), port_file],
                         stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or server.poll() is not None:
                raise HostsError("tcp_probe server did not start")
            time.sleep(0.02)
        with open(port_file) as f:
            port = f.read().strip()
        sender = hosts.run(src, [sys.executable, probe, "send",
                                 "%s:%s" % (hosts.address(dst), port), str(seconds)],
                           timeout=seconds + 60, capture_output=True, text=True)
        if sender.returncode != 0:
            raise HostsError("tcp_probe send failed: %s" % sender.stderr[-1000:])
        out, _ = server.communicate(timeout=60)
        return json.loads(out)["gbit_s"]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if os.path.exists(port_file):
            os.unlink(port_file)


def check_main(argv):
    parser = argparse.ArgumentParser(prog="delay_link.py check")
    parser.add_argument("--delay-ms", type=float, default=10)
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args(argv)
    with DelayHosts(2, rate=args.rate, delay_ms=args.delay_ms) as hosts:
        out = hosts.run(0, [sys.executable, os.path.abspath(__file__), "ping",
                            hosts.address(1), "10"], timeout=60, capture_output=True,
                        text=True)
        if out.returncode != 0:
            sys.exit(out.stderr)
        rtts = json.loads(out.stdout)
        gbit = tcp_throughput(hosts, 0, 1, args.seconds)
        stats = hosts.relay_stats()
    print(json.dumps(dict(delay_ms=args.delay_ms, rate=args.rate,
                          rtt_ms=dict(min=min(rtts), median=sorted(rtts)[len(rtts) // 2],
                                      max=max(rtts)),
                          tcp_gbit_s=round(gbit, 3),
                          relay=dict((k, stats.get(k)) for k in (
                              "packets", "dropped_queue_full", "dropped_unroutable",
                              "dropped_not_ipv4",
                              "late_ms_mean", "late_ms_max")))))


def main(argv):
    if argv and argv[0] == "relay":
        relay_main(argv[1:])
    elif argv and argv[0] == "ping":
        count = int(argv[2]) if len(argv) > 2 else 5
        print(json.dumps(ping(argv[1], count)))
    elif argv and argv[0] == "check":
        check_main(argv[1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
