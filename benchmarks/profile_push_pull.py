"""Where the CPU goes during push_pull: one benchmark configuration under `perf record -a`,
CPU time split by process and by kind of work (kernel copies, user memcpy, summation,
page faults, TCP/IP and veth/bridge, idle).

    python3 benchmarks/profile_push_pull.py [--hosts 2] [--rate 10gbit] [--size 67108864]
                                            [--seconds 4] [--env TFPS_X=Y ...]

Needs root and perf. Samples every CPU (the hosts share this machine's CPUs), so run it
on an otherwise idle machine; it prints the load average and the time of the run.
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from netns import Hosts  # noqa: E402
from ps_cluster import NetnsCluster  # noqa: E402
from push_pull_bench import loadavg  # noqa: E402
from push_pull_report import busbw_bits, rate_bits  # noqa: E402

# First match wins; patterns are matched against the symbol name.
KINDS = [
    ("idle", r"native_safe_halt|default_idle|cpuidle|do_idle|poll_idle|mwait"),
    ("summation", r"SumTyped|SumInto"),
    ("kernel<->user copy", r"copy_user|copy_to_user|copy_from_user|rep_movs|_copy_to_iter|"
                           r"_copy_from_iter|copyout|copyin|copy_page_to_iter|"
                           r"copy_page_from_iter|skb_copy_datagram|memcpy_orig|"
                           r"csum_partial_copy"),
    ("user memcpy", r"__memmove|__memcpy|memcpy_avx|memmove_avx|memcpy_evex|memmove_evex"),
    ("page faults / zeroing", r"clear_page|do_anonymous_page|handle_mm_fault|"
                              r"__handle_mm_fault|do_user_addr_fault|exc_page_fault|"
                              r"asm_exc_page_fault|folio|alloc_pages|__alloc_pages|"
                              r"get_page_from_freelist|zap_|unmap_|free_pages|"
                              r"release_pages|free_unref|lru_|mmap|munmap|page_counter|"
                              r"mem_cgroup|__rmqueue|vma_"),
    ("tcp/ip, veth, bridge, tbf", r"tcp_|ip_|ipv4|inet_|__dev_queue_xmit|dev_hard_start|"
                                  r"veth_|br_|netif_|napi|__netif|skb|sk_|sock_|tbf_|"
                                  r"qdisc|net_rx|net_tx|__sys_send|__sys_recv|process_backlog|"
                                  r"nf_|csum|__napi|kfree_skb|__kfree_skb|dst_|fib_|"
                                  r"neigh_|eth_|validate_xmit|loopback"),
    ("zeromq", r"zmq::"),
    ("scheduler, syscalls, locks", r"schedule|__schedule|futex|_raw_spin|syscall|"
                                   r"entry_SYSCALL|do_syscall|epoll|poll|eventfd|"
                                   r"finish_task_switch|try_to_wake_up|pick_next|"
                                   r"update_curr|enqueue_|dequeue_|select_task|irq|"
                                   r"__wake_up|hrtimer|clockevents|tick_"),
]


def categorise(symbol):
    for kind, pattern in KINDS:
        if re.search(pattern, symbol):
            return kind
    return "other"


def read_samples(data):
    """(pid, comm, symbol) per sample, from `perf script`."""
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,pid,tid,ip,sym"],
                          capture_output=True, text=True, timeout=600).stdout
    samples = []
    for line in text.splitlines():
        m = re.match(r"\s*(.+?)\s+(\d+)/(\d+)\s+[0-9a-f]+\s*(.*)$", line)
        if m:
            samples.append((int(m.group(2)), m.group(1), m.group(4).strip() or "[unknown]"))
    return samples


def print_shares(title, counter, total, limit=None):
    print(title)
    for key, count in counter.most_common(limit):
        print("  %6.1f%%  %s" % (100.0 * count / total, key))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--rate", default="10gbit")
    parser.add_argument("--size", type=int, default=64 << 20)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--top", type=int, default=25, help="symbols to list")
    args = parser.parse_args()
    env = dict(kv.split("=", 1) for kv in args.env)
    workdir = Path(tempfile.mkdtemp(prefix="tfps-profile-"))
    data = workdir / "perf.data"
    print("load average before: %s" % loadavg(), flush=True)
    rate = None if args.rate == "none" else args.rate
    with Hosts(args.hosts, rate=rate) as hosts:
        cluster = NetnsCluster(hosts, workdir, timeout=120 + 10 * args.seconds, env=env)
        perf = subprocess.Popen(["perf", "record", "-a", "-F", "999", "-o", str(data)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started = time.monotonic()
        try:
            cluster.start(lambda rank: [sys.executable, HERE / "push_pull_worker.py", "--sizes",
                                        str(args.size), "--target-seconds", args.seconds])
            cluster.wait()
        finally:
            perf.send_signal(2)
            perf.wait(timeout=60)
            cluster.close()
        wall = time.monotonic() - started
        cluster.check()
    import json
    rows = [json.loads(line) for line in cluster.result("worker", 0).stdout.splitlines()]
    row = rows[0]
    bits = busbw_bits(args.hosts, row["bytes"], row["mean_s"])
    link = rate_bits(args.rate)
    print("%d hosts, %s, %d bytes: %.1f ms per push_pull, busbw %.2f Gbit/s%s" % (
        args.hosts, args.rate, row["bytes"], 1e3 * row["mean_s"], bits / 1e9,
        " (%.0f%% of the link)" % (100 * bits / link) if link else ""))
    print("CPU-s per push_pull: worker %.4f, server %.4f (rank 0's host)" % (
        row["worker_cpu_s_per_iter"], row["server_cpu_s_per_iter"] or 0))
    for r in cluster.results():
        print("  %s %d: %.2f CPU-s in %.1f s" % (r.role, r.index, r.cpu_s, wall))
    samples = read_samples(data)
    roles = {r.pid: "%s %d" % (r.role, r.index) for r in cluster.processes()}
    by_owner, ours_kind, ours_sym = (collections.Counter() for _ in range(3))
    by_role = collections.defaultdict(collections.Counter)  # worker/server -> kind -> samples
    for pid, comm, sym in samples:
        if pid in roles:
            owner = roles[pid]
        elif pid == 0:
            owner = "idle"
        elif comm.startswith("ksoftirqd"):
            owner = "ksoftirqd (network softirqs)"
        else:
            owner = "other processes (not ours)"
        by_owner[owner] += 1
        if pid in roles or comm.startswith("ksoftirqd"):
            ours_kind[categorise(sym)] += 1
            ours_sym[sym] += 1
            if pid in roles:
                by_role[roles[pid].split()[0]][categorise(sym)] += 1
    total, ours = len(samples), sum(ours_kind.values())
    print("\n%d samples over both CPUs for %.1f s (whole run, start-up included)" % (
        total, wall))
    print_shares("share of all samples by owner:", by_owner, total)
    print_shares("our processes (+ksoftirqd), %.1f CPU-s, by kind of work:" % (
        ours / max(1, total) * wall * os.cpu_count()), ours_kind, ours)
    for role in sorted(by_role):
        print_shares("%ss (all of them), %.1f%% of ours, by kind of work:" % (
            role, 100.0 * sum(by_role[role].values()) / max(1, ours)), by_role[role],
            sum(by_role[role].values()))
    print_shares("top symbols in our processes:", ours_sym, ours, args.top)
    print("\nperf data: %s (perf report -i %s)" % (data, data))
    print("load average after: %s" % loadavg())


if __name__ == "__main__":
    main()
