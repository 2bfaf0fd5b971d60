"""Bytes push_pull moves per CPU-second, plain and with the job key, for 1, 2 and 4 ZeroMQ
I/O threads (TFPS_IO_THREADS), on loopback without a rate limit, next to memcpy.

    python3 benchmarks/io_threads.py [--mib 32] [--iterations 12] [--threads 1,2,4]

Two workers (the pybind11 core, no TensorFlow) and two ps_servers on this host, flat path
over TCP (TFPS_HIERARCHICAL=0, TFPS_SHM_SERVER=0: shared memory would bypass the sockets).
CPU time is utime+stime from /proc/PID/stat of every role process (workers, servers,
scheduler), read when every worker is warm and again when every worker has finished its
timed loop; per thread from /proc/PID/task/TID/stat, where libzmq names its I/O threads
ZMQbg/IO/N. Bytes moved: what the workers push plus what they pull. On a shared or small
machine wall time means little; CPU per byte is what the table compares. Writes
benchmarks/results/io_threads.md (and .json).
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402

PS_SERVER = REPO / "tf_ps_ops" / "bin" / "ps_server"
WORKER = HERE / "io_threads_worker.py"
TICK = os.sysconf("SC_CLK_TCK")
WORKERS, SERVERS = 2, 2


def stat_cpu_s(path):
    """(comm, utime+stime in seconds) of a /proc stat file; comm may hold spaces."""
    text = Path(path).read_text()
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return comm, (int(fields[11]) + int(fields[12])) / TICK


def snapshot(processes):
    """{(role, index): {"total": s, "io": [s per ZMQbg/IO/N thread], "threads": {...}}}."""
    out = {}
    for p in processes:
        _, total = stat_cpu_s(f"/proc/{p.pid}/stat")
        threads = {}
        for task in Path(f"/proc/{p.pid}/task").iterdir():
            try:
                comm, cpu = stat_cpu_s(task / "stat")
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended between listing and reading
            threads[comm] = threads.get(comm, 0.0) + cpu
        out[(p.role, p.index)] = {"total": total, "threads": threads}
    return out


def job_failed(results):
    return RuntimeError("the job failed:\n" + "\n".join(r.describe() for r in results))


def wait_files(paths, cluster, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not all(p.exists() for p in paths):
        failed = [r for r in cluster.results() if r.returncode not in (None, 0)]
        if failed or time.monotonic() > deadline:
            raise job_failed(failed or cluster.results())
        time.sleep(0.005)


def start_perf(processes, out):
    """`perf record` of every role process (None when perf is missing)."""
    pids = ",".join(str(p.pid) for p in processes)
    try:
        return subprocess.Popen(["perf", "record", "-q", "-F", "499", "-o", str(out), "-p", pids],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        return None


def perf_top(data, sort, lines):
    """perf report's first `lines` rows sorted by `sort` (e.g. "comm,dso"), >= 1%."""
    report = subprocess.run(["perf", "report", "-q", "-i", str(data), "--stdio", "--sort",
                             sort, "--percent-limit", "1"],
                            capture_output=True, text=True, timeout=300).stdout
    rows = [" ".join(line.split()).rstrip(" -") for line in report.splitlines()
            if line.strip() and not line.startswith("#")]
    return "\n".join(rows[:lines])


def run_one(workdir, io_threads, key, mib, iterations, perf=False):
    env = {"TFPS_IO_THREADS": str(io_threads), "TFPS_HIERARCHICAL": "0",
           "TFPS_SHM_SERVER": "0", "TFPS_BIND": "127.0.0.1", "TFPS_LOG_LEVEL": "warning"}
    if key:
        env["TFPS_AUTH_KEY_FILE"] = str(key)
    cluster = LoggedCluster(PS_SERVER, workdir, WORKERS, SERVERS, timeout=600, env=env,
                            cwd=REPO)
    try:
        cluster.start([sys.executable, str(WORKER), str(workdir), str(mib), str(iterations)])
        wait_files([workdir / f"warm.{r}" for r in range(WORKERS)], cluster, 300)
        recorder = start_perf(cluster.processes(), workdir / "perf.data") if perf else None
        if recorder is not None:
            time.sleep(1)  # perf attaches to every thread before the timed loop
        before = snapshot(cluster.processes())
        (workdir / "go").write_text("")
        wait_files([workdir / f"done.{r}" for r in range(WORKERS)], cluster, 600)
        after = snapshot(cluster.processes())
        if recorder is not None:
            recorder.send_signal(2)
            recorder.wait(timeout=60)
        (workdir / "end").write_text("")
        if any(not r.ok for r in cluster.wait()):
            raise job_failed(cluster.failures())
    finally:
        cluster.close()
    wall = max(float((workdir / f"done.{r}").read_text()) for r in range(WORKERS))
    result = summarize(before, after, WORKERS * 2 * (mib << 20) * iterations, wall)
    if perf and (workdir / "perf.data").exists():
        result["perf"] = {"by thread and library": perf_top(workdir / "perf.data", "comm,dso", 15),
                          "by symbol": perf_top(workdir / "perf.data", "dso,symbol", 20)}
    return result


def summarize(before, after, moved, wall):
    per_role, io_threads = {}, {}
    for name, a in after.items():
        b = before[name]
        per_role[name] = a["total"] - b["total"]
        io_threads[name] = sorted(
            a["threads"][t] - b["threads"].get(t, 0.0)
            for t in a["threads"] if t.startswith("ZMQbg/IO"))
    cpu = sum(per_role.values())
    io = sum(sum(v) for v in io_threads.values())
    return {"bytes": moved, "wall_s": wall, "cpu_s": cpu, "io_cpu_s": io,
            "gb_per_cpu_s": moved / 1e9 / cpu, "cpu_s_per_gb": cpu / (moved / 1e9),
            "per_role_cpu_s": {f"{r}{i}": v for (r, i), v in per_role.items()},
            "io_threads_cpu_s": {f"{r}{i}": v for (r, i), v in io_threads.items()}}


def memcpy_gb_s(mib=256, repeats=5):
    import numpy as np
    src = np.ones(mib << 18, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return src.nbytes / best / 1e9


def cipher_gb_per_cpu_s(mib=1, repeats=64):
    """libsodium on one core, 1 MiB messages: what CURVE's data frames cost (libzmq 4.3
    seals each frame with crypto_box_easy_afternm, XSalsa20-Poly1305) and the
    alternatives docs/security.md weighs. {} when libsodium cannot be loaded."""
    import ctypes
    try:
        so = ctypes.CDLL("libsodium.so.23")
    except OSError:
        return {}
    so.sodium_init()
    n, ull = mib << 20, ctypes.c_ulonglong
    key, nonce = ctypes.create_string_buffer(32), ctypes.create_string_buffer(24)
    src, dst = ctypes.create_string_buffer(n), ctypes.create_string_buffer(n + 64)
    out_len = ull(0)
    calls = {
        "XSalsa20-Poly1305 (CURVE)": lambda: so.crypto_box_easy_afternm(dst, src, ull(n), nonce,
                                                                       key),
        "Poly1305 alone (authenticate, no encryption)": lambda: so.crypto_onetimeauth(
            dst, src, ull(n), key),
        "ChaCha20-Poly1305 (IETF)": lambda: so.crypto_aead_chacha20poly1305_ietf_encrypt(
            dst, ctypes.byref(out_len), src, ull(n), None, ull(0), None, nonce, key),
    }
    if so.crypto_aead_aes256gcm_is_available():
        calls["AES-256-GCM (libsodium, AES-NI)"] = lambda: so.crypto_aead_aes256gcm_encrypt(
            dst, ctypes.byref(out_len), src, ull(n), None, ull(0), None, nonce, key)
    rates = {}
    for name, call in calls.items():
        call()
        start = time.process_time()
        for _ in range(repeats):
            call()
        rates[name] = repeats * n / (time.process_time() - start) / 1e9
    return rates


def spread(values):
    """The I/O threads' CPU seconds, busiest first, as '1.23/0.98'."""
    return "/".join(f"{v:.2f}" for v in sorted(values, reverse=True)) or "-"


def machine():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), platform.processor())
    return f"{os.cpu_count()} cores ({model}), Linux {platform.release()}"


def markdown(args, rows, memcpy, ciphers, command):
    lines = [
        "# I/O threads and the job key: bytes moved per CPU-second",
        "",
        f"Command: `{command}` ({args.mib} MiB float32 push_pull, {args.iterations} timed "
        f"iterations, {WORKERS} workers and {SERVERS} ps_servers on loopback, flat path over "
        "TCP, no rate limit).",
        "",
        f"Machine: {machine()}; shared with other jobs while this ran, so wall-clock "
        "numbers are rough. CPU time (utime+stime of every role process, /proc) per byte "
        "is what the rows compare; all rows come from one run.",
        "",
        "Each ps_server listens on one port per I/O thread (ZMQ_AFFINITY set before each "
        "bind) and worker r connects to port r mod their number, so with 2 or more threads "
        "each server's two workers run on two of its I/O threads; with 4, two of its four "
        "threads have no worker here (the per-thread columns list them busiest first).",
        "",
        f"memcpy on this machine (numpy copy of 256 MiB, best of 5): **{memcpy:.2f} GB/s** "
        "on one core.",
        "",
        "Ciphers on one core (libsodium, 1 MiB messages, GB sealed per CPU-second): "
        + (", ".join(f"{name} **{rate:.2f}**" for name, rate in ciphers.items())
           or "libsodium not found") + ".",
        "",
        "| job key | I/O threads | GB moved | wall s | CPU s (all roles) | GB per CPU-s | "
        "CPU-s per GB | I/O threads' share of CPU | worker 0 I/O threads (CPU s) | "
        "server 0 I/O threads (CPU s) | server 1 I/O threads (CPU s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if row.get("profile"):
            continue
        r = row["result"]
        lines.append(
            f"| {'CURVE' if row['keyed'] else 'plain'} | {row['io_threads']} | "
            f"{r['bytes'] / 1e9:.2f} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | "
            f"{r['gb_per_cpu_s']:.3f} | {r['cpu_s_per_gb']:.2f} | "
            f"{r['io_cpu_s'] / r['cpu_s']:.0%} | {spread(r['io_threads_cpu_s']['worker0'])} | "
            f"{spread(r['io_threads_cpu_s']['server0'])} | "
            f"{spread(r['io_threads_cpu_s']['server1'])} |")
    for row in rows:
        for title, text in row["result"].get("perf", {}).items():
            lines += ["", f"perf, {'CURVE' if row['keyed'] else 'plain'}, 1 I/O thread, a run "
                      f"of its own (samples of every role process {title}, >= 1%; thread "
                      "names: ZMQbg/IO/N are libzmq's I/O threads):", "", "```", text, "```"]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--threads", default="1,2,4")
    parser.add_argument("--perf", action="store_true",
                        help="also profile a plain and a keyed run with 1 I/O thread (perf)")
    parser.add_argument("--out", default=str(HERE / "results" / "io_threads"))
    args = parser.parse_args()
    if not PS_SERVER.exists():
        sys.exit(f"{PS_SERVER} is not built: run `make build`")
    command = shlex.join(["python3", "benchmarks/io_threads.py"] + sys.argv[1:])
    memcpy, ciphers = memcpy_gb_s(), cipher_gb_per_cpu_s()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "job.key"
        subprocess.run([str(PS_SERVER), "--gen-key", str(key)], check=True, timeout=30)
        for keyed in (False, True):
            for threads in (int(t) for t in args.threads.split(",")):
                workdir = Path(tmp) / f"{'keyed' if keyed else 'plain'}-{threads}"
                result = run_one(workdir, threads, key if keyed else None, args.mib,
                                 args.iterations)
                rows.append({"keyed": keyed, "io_threads": threads, "result": result})
                print(f"{'CURVE' if keyed else 'plain'} io_threads={threads}: "
                      f"{result['gb_per_cpu_s']:.3f} GB per CPU-s, "
                      f"{result['cpu_s_per_gb']:.2f} CPU-s per GB, wall {result['wall_s']:.2f} s",
                      flush=True)
        for keyed in (False, True) if args.perf else ():  # apart: perf costs CPU too
            workdir = Path(tmp) / f"perf-{'keyed' if keyed else 'plain'}"
            result = run_one(workdir, 1, key if keyed else None, args.mib, args.iterations,
                             perf=True)
            rows.append({"keyed": keyed, "io_threads": 1, "result": result, "profile": True})
    text = markdown(args, rows, memcpy, ciphers, command)
    Path(args.out + ".md").write_text(text)
    Path(args.out + ".json").write_text(json.dumps(
        {"command": command, "machine": machine(), "memcpy_gb_s": memcpy,
         "ciphers_gb_per_cpu_s": ciphers, "rows": rows},
        indent=1))
    print(text)


if __name__ == "__main__":
    main()
