"""Several "hosts" on one machine: one network namespace each, joined by a bridge.

    with Hosts(3, rate="1gbit") as hosts:
        server = hosts.popen(0, ["ps_server", ...], stdout=f)   # runs inside host 0
        print(hosts.address(1))                                   # 10.x.y.2

Topology (see shared/notes/NETWORK_TESTS.md for what was measured on this machine):

    [<prefix>-h0] eth0 10.x.y.1 --veth-- v0 \
    [<prefix>-h1] eth0 10.x.y.2 --veth-- v1 -- br0   [<prefix>-br]
    ...

Every host has loopback and one veth; the other ends hang on a bridge that lives in a
namespace of its own, not the root one. No host has a default route, so a host reaches
only the other hosts: anything else is "Network is unreachable", decided locally, with no
packet sent. `rate` shapes each host's egress with tbf (netem does not exist on this
kernel). Nothing is ever created in, or read from, the root namespace's interfaces.

Cleanup kills the processes that `ip netns pids` lists for each namespace this object
created (checked against the namespace's inode through a pidfd, so a recycled pid is never
hit), then deletes the namespaces: veths, bridge and qdiscs go with them. It runs on
leaving the `with` block (also on an exception), on SIGINT/SIGTERM and at exit. Nothing is
killed by name and no namespace this object did not create is touched.
"""

import atexit
import ipaddress
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time

PREFIX = "tfps"
_IP_TIMEOUT = 20  # seconds for one `ip`/`tc` command

_live = set()  # Hosts objects not yet closed
_lock = threading.RLock()
_previous_handlers = {}  # signum -> handler we replaced


class HostsError(RuntimeError):
    pass


def available():
    """(True, "") when this process can create namespaces, else (False, why)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root (euid is %d)" % os.geteuid()
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True,
                       timeout=_IP_TIMEOUT)
        subprocess.run(["tc", "-V"], check=True, capture_output=True, timeout=_IP_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as e:
        return False, "`ip netns` / `tc` unavailable: %s" % e
    return True, ""


def _ip(*args, check=True):
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=_IP_TIMEOUT)
    if check and result.returncode != 0:
        raise HostsError("`%s` failed (exit %d): %s" % (" ".join(args), result.returncode,
                                                        result.stderr.strip()))
    return result


def _used_subnets():
    """The /24s of the root namespace's own addresses: ours never looks like one of them
    (a host could not reach them anyway)."""
    result = _ip("ip", "-o", "-4", "addr", "show", check=False)
    used = set()
    for line in result.stdout.splitlines():
        words = line.split()
        for word, following in zip(words, words[1:]):
            if word == "inet":
                address = ipaddress.ip_interface(following).ip
                used.add(ipaddress.ip_network("%s/24" % address, strict=False))
    return used


def _pick_subnet():
    used = _used_subnets()
    rng = random.Random(secrets.randbits(64))
    for _ in range(1000):
        net = ipaddress.ip_network("10.%d.%d.0/24" % (rng.randrange(64, 250),
                                                       rng.randrange(0, 256)))
        if not any(net.overlaps(u) for u in used):
            return net
    raise HostsError("no free private /24 under 10.64.0.0/10")


class Hosts:
    """`n` hosts on a private bridge; `rate` (a tc rate such as "1gbit") limits each
    host's egress, None leaves the links unlimited."""

    def __init__(self, n, rate=None, burst="256kb", latency="50ms"):
        if n < 1 or n > 250:
            raise ValueError("1 <= n <= 250 hosts")
        self.n, self.rate = n, rate
        self.prefix = "%s-%d-%s" % (PREFIX, os.getpid(), secrets.token_hex(2))
        self.names = ["%s-h%d" % (self.prefix, i) for i in range(n)]
        self.bridge_ns = self.prefix + "-br"
        self.subnet = _pick_subnet()
        self._hosts = list(self.subnet.hosts())[:n]
        self._created = []  # namespaces that exist and are ours, in creation order
        self._inodes = {}  # namespace -> inode of its nsfs file
        self._children = []  # Popen objects we started, reaped on close
        self._closed = False
        with _lock:
            _live.add(self)
            _install_handlers()
        try:
            self._build(burst, latency)
        except BaseException:
            self.close()
            raise

    # --- building -------------------------------------------------------------------

    def _add_namespace(self, name):
        _ip("ip", "netns", "add", name)
        self._created.append(name)
        self._inodes[name] = os.stat(os.path.join("/run/netns", name)).st_ino

    def _build(self, burst, latency):
        br = self.bridge_ns
        self._add_namespace(br)
        _ip("ip", "-n", br, "link", "set", "lo", "up")
        _ip("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        _ip("ip", "-n", br, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            self._add_namespace(name)
            # Both ends are created straight in their namespaces: nothing appears in the
            # root namespace, even for a moment.
            _ip("ip", "-n", br, "link", "add", "v%d" % i, "type", "veth", "peer", "name",
                "eth0", "netns", name)
            _ip("ip", "-n", br, "link", "set", "v%d" % i, "master", "br0", "up")
            _ip("ip", "-n", name, "link", "set", "lo", "up")
            _ip("ip", "-n", name, "addr", "add", "%s/%d" % (self._hosts[i],
                                                            self.subnet.prefixlen), "dev", "eth0")
            _ip("ip", "-n", name, "link", "set", "eth0", "up")
            if self.rate:
                _ip("tc", "-n", name, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate",
                    self.rate, "burst", burst, "latency", latency)

    # --- using ----------------------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def address(self, i):
        return str(self._hosts[i])

    def netns(self, i):
        return self.names[i]

    def command(self, i, argv):
        return ["ip", "netns", "exec", self.names[i], *[str(a) for a in argv]]

    def popen(self, i, argv, **kwargs):
        """subprocess.Popen of `argv` inside host i (`ip netns exec` execs it, so the pid
        is the program's own)."""
        if self._closed:
            raise HostsError("these hosts are closed")
        process = subprocess.Popen(self.command(i, argv), **kwargs)
        self._children.append(process)
        return process

    def run(self, i, argv, timeout, **kwargs):
        """subprocess.run inside host i, with a timeout (no check: look at returncode)."""
        return subprocess.run(self.command(i, argv), timeout=timeout, **kwargs)

    def qdisc(self, i):
        return _ip("tc", "-n", self.names[i], "qdisc", "show", "dev", "eth0").stdout.strip()

    def link_bytes(self, i):
        """(tx, rx) bytes counted on host i's eth0 since it was created."""
        text = _ip("ip", "-n", self.names[i], "-j", "-s", "link", "show", "dev", "eth0").stdout
        stats = json.loads(text)[0]["stats64"]
        return stats["tx"]["bytes"], stats["rx"]["bytes"]

    def pids(self, name):
        result = _ip("ip", "netns", "pids", name, check=False)
        return [int(p) for p in result.stdout.split()]

    # --- cleaning up ----------------------------------------------------------------

    def _signal_namespace(self, name, sig):
        """Signals every process in namespace `name`; returns how many were signalled."""
        count = 0
        for pid in self.pids(name):
            if pid == os.getpid():
                continue
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue  # already gone
            try:
                # The pidfd pins the process: if it is still in our namespace now, the
                # signal reaches that process and not a later one with the same pid.
                if os.stat("/proc/%d/ns/net" % pid).st_ino != self._inodes[name]:
                    continue
                signal.pidfd_send_signal(fd, sig)
                count += 1
            except OSError:
                pass
            finally:
                os.close(fd)
        return count

    def _empty_namespace(self, name, grace=1.0, limit=10.0):
        deadline = time.monotonic() + limit
        if self._signal_namespace(name, signal.SIGTERM):
            end = time.monotonic() + grace
            while time.monotonic() < end and self.pids(name):
                self._reap()
                time.sleep(0.05)
        while time.monotonic() < deadline and self._signal_namespace(name, signal.SIGKILL):
            self._reap()
            time.sleep(0.05)

    def _reap(self):
        for process in self._children:
            process.poll()

    def close(self):
        """Kills what runs in our namespaces and deletes them. Idempotent."""
        with _lock:
            if self._closed and not self._created:
                return
            self._closed = True
            errors = []
            for name in reversed(list(self._created)):
                try:
                    self._empty_namespace(name)
                    _ip("ip", "netns", "del", name)
                    self._created.remove(name)
                except (HostsError, subprocess.SubprocessError, OSError) as e:
                    errors.append(str(e))
            for process in self._children:
                if process.poll() is None:
                    try:
                        process.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        errors.append("pid %d did not exit" % process.pid)
            _live.discard(self)
            if not _live:
                _restore_handlers()
            if errors:
                raise HostsError("cleanup of %s incomplete: %s" % (self.prefix,
                                                                   "; ".join(errors)))

    def leftovers(self):
        """Namespaces of this object that still exist (empty after close())."""
        existing = set(_ip("ip", "netns", "list").stdout.split())
        return sorted(existing & set([self.bridge_ns, *self.names]))


# --- process-wide safety net ---------------------------------------------------------

def _close_all():
    with _lock:
        for hosts in list(_live):
            try:
                hosts.close()
            except Exception as e:  # keep cleaning the others
                print("netns cleanup: %s" % e, file=sys.stderr)


def _on_signal(signum, frame):
    _close_all()
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    _restore_handlers()
    if callable(previous):
        previous(signum, frame)
    elif signum == signal.SIGINT:
        raise KeyboardInterrupt
    else:
        raise SystemExit(128 + signum)


def _install_handlers():
    if _previous_handlers or threading.current_thread() is not threading.main_thread():
        return  # installed already, or not allowed here (atexit and `with` still clean up)
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)
        if previous is signal.SIG_IGN:
            continue
        _previous_handlers[signum] = previous
        signal.signal(signum, _on_signal)


def _restore_handlers():
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_previous_handlers.items()):
        if signal.getsignal(signum) is _on_signal:
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        del _previous_handlers[signum]


atexit.register(_close_all)


def _selftest(argv):
    """python3 benchmarks/netns.py [N] [RATE]: builds N hosts, shows them, tears down."""
    n = int(argv[0]) if argv else 2
    rate = argv[1] if len(argv) > 1 else None
    ok, why = available()
    if not ok:
        sys.exit(why)
    with Hosts(n, rate=rate) as hosts:
        print("prefix %s, subnet %s" % (hosts.prefix, hosts.subnet))
        for i in range(n):
            print("  %s  %s  %s" % (hosts.netns(i), hosts.address(i),
                                     hosts.qdisc(i).splitlines()[0] if rate else ""))
        names = [hosts.bridge_ns, *hosts.names]
    left = set(_ip("ip", "netns", "list").stdout.split()) & set(names)
    print("left behind:", sorted(left) or "nothing")


if __name__ == "__main__":
    _selftest(sys.argv[1:])
