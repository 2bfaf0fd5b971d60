"""SFB, PS and the decentralized algorithms at N = 16 and 32 TensorFlow workers on this
host: per worker the connections it holds, the bytes it sends per step, and what HybComm
(sfb/policy.py) chooses at that N, next to the cost model's numbers (docs/scale.md).

    python benchmarks/sfb_scale.py [--workers 16,32] [--servers 2]
                                   [--out benchmarks/results/sfb_scale]

The worker is benchmarks/sfb_scale_worker.py (a 1024 -> 1024 -> 10 MLP, K = 32 rows per
worker and step, TF pinned to one intra- and one inter-op thread). Its hybrid and PS
trainings are checked here against single-process Keras on the same global batches (the
oracle of tests/multiprocess/test_sfb.py), every rank's final weights must be identical,
and each worker checks its decentralized steps against NumPy itself. Counts are each
process's peak from /proc (benchmarks/scale.py's sampler); bytes are the engine's
counters; times depend on the machine's load, written next to them. Writes OUT.json and
OUT.md.
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from ps_cluster import PS_SERVER  # noqa: E402
from scale import loadavg, run_sampled, write_results  # noqa: E402
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402

WORKER = REPO / "benchmarks" / "sfb_scale_worker.py"
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "TFPS_TIMEOUT": "900",
       "TF_CPP_MIN_LOG_LEVEL": "2", "TFPS_BIND": "127.0.0.1", "TFPS_HIERARCHICAL": "0",
       "PYTHONPATH": str(REPO)}
TOLERANCE = dict(rtol=1e-4, atol=1e-5)  # N*K rows summed in another order than Keras's


def check_against_oracle(workdir, n):
    """Rank 0's weights after the first step and at the end, of the hybrid (SFB) and the
    PS trainings, against single-process Keras on the global batches of n*K rows."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import keras
    import sfb_scale_worker as w

    got = np.load(Path(workdir) / "weights.npz")
    x, y = w.dataset((1 + w.STEPS) * n * w.K)
    model = w.mlp(seed=100)  # rank 0's, which fit's broadcast gave every worker
    model.compile(optimizer=keras.optimizers.SGD(w.LEARNING_RATE, momentum=0.9),
                  loss="mse", jit_compile=False)
    deviation = {}
    for prefix, first, count in (("first", 0, 1), ("final", 1, w.STEPS)):
        rows = slice(first * n * w.K, (first + count) * n * w.K)
        model.fit(x[rows], y[rows], batch_size=n * w.K, epochs=1, shuffle=False, verbose=0)
        for trained in (["first"] if prefix == "first" else ["hybrid", "ps"]):
            for i, want in enumerate(model.get_weights()):
                have = got[f"{trained}.{i}"]
                np.testing.assert_allclose(have, want, **TOLERANCE,
                                           err_msg=f"N={n}: {trained} weight {i}")
                deviation[f"{trained}.{i}"] = float(np.abs(have - want).max())
    return deviation


def measure(n, servers, workdir):
    load_before = loadavg()
    cluster = LoggedCluster(PS_SERVER, workdir, n, servers, timeout=1500, env=ENV, cwd=REPO)
    sampler, duration = run_sampled(cluster, [sys.executable, str(WORKER), str(workdir)],
                                    f"N={n}", period=0.5)
    ranks = [json.loads((Path(workdir) / f"rank-{r}.json").read_text()) for r in range(n)]
    digests = {r["weights_sha256"] for r in ranks}
    if len(digests) != 1:
        raise RuntimeError(f"N={n}: the ranks' final weights differ ({len(digests)} kinds)")
    deviation = check_against_oracle(workdir, n)
    peaks = [v for (role, _), v in sampler.peak.items() if role == "worker"]

    def median(path):
        values = []
        for r in ranks:
            value = r
            for key in path:
                value = value[key]
            values.append(value)
        return statistics.median(values)

    r0 = ranks[0]
    return {
        "workers": n, "servers": servers, "load_before": load_before,
        "load_after": loadavg(), "duration_s": round(duration, 1),
        "kinds": r0["kinds"], "plans": r0["plans"],
        "tcp_established": {"min": min(r["tcp_established"] for r in ranks),
                            "max": max(r["tcp_established"] for r in ranks)},
        "worker_peak": {"sockets": max(p[0] for p in peaks), "threads": max(p[1] for p in peaks),
                        "rss_mb_median": round(statistics.median(p[2] for p in peaks) / 2**20),
                        "rss_anon_mb_median": median(("rss_anon_mb",)),
                        "fds": max(p[3] for p in peaks)},
        "hybrid": {k: median(("hybrid", k)) for k in r0["hybrid"]},
        "ps": {k: median(("ps", k)) for k in r0["ps"]},
        "decentralized": {a: {"peer_bytes_per_step": median(("decentralized", a,
                                                              "peer_bytes_per_step"))}
                          for a in r0["decentralized"]},
        "oracle_max_deviation": max(deviation.values()),
    }


def model_bytes(n, k=32, features=1024, units=1024):
    """The cost model's SFB bytes per worker and step for fc1: K·(N-1)·(M+N) floats."""
    return k * (n - 1) * (units + features) * 4


def table(rows):
    mb = 1e6
    lines = ["| N | S | load | TCP connections per worker | sockets / fds (peak) | anon RSS MB | "
             "HybComm: fc1 1024×1024, out 1024×10 (this job; colocated S=N; dedicated S=2) | "
             "hybrid: peer MB / server MB per step | cost model: fc1 SFB MB | PS only: "
             "server MB per step | ring / shift_one / int8 ring: peer MB per step | step s "
             "hybrid / PS | oracle max deviation |",
             "|" + "---|" * 13]
    for r in rows:
        plans = "; ".join(",".join(d["choice"] for d in r["plans"][where])
                          for where in ("this_job", "colocated", "dedicated"))
        dec = r["decentralized"]
        lines.append(
            f"| {r['workers']} | {r['servers']} | {r['load_before']:.1f} "
            f"| {r['tcp_established']['min']}-{r['tcp_established']['max']} "
            f"| {r['worker_peak']['sockets']} / {r['worker_peak']['fds']} "
            f"| {r['worker_peak']['rss_anon_mb_median']} | {plans} "
            f"| {r['hybrid']['peer_bytes_per_step'] / mb:.2f} / "
            f"{r['hybrid']['server_bytes_per_step'] / mb:.3f} "
            f"| {model_bytes(r['workers']) / mb:.2f} "
            f"| {r['ps']['server_bytes_per_step'] / mb:.2f} "
            f"| {dec['ring']['peer_bytes_per_step'] / mb:.2f} / "
            f"{dec['shift_one']['peer_bytes_per_step'] / mb:.2f} / "
            f"{dec['low_precision_int8']['peer_bytes_per_step'] / mb:.2f} "
            f"| {r['hybrid']['step_s']:.2f} / {r['ps']['step_s']:.2f} "
            f"| {r['oracle_max_deviation']:.1e} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="16,32")
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sfb_scale"))
    args = parser.parse_args()
    rows = []
    for n in map(int, args.workers.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"sfb-scale{n}-") as workdir:
            row = measure(n, args.servers, workdir)
        print(json.dumps(row), flush=True)
        rows.append(row)
        write(rows, args)  # after each N: a later one that fails keeps the earlier


def write(rows, args):
    write_results(
        args.out, rows, table(rows),
        "# SFB, PS and decentralized algorithms at N TensorFlow workers, one host\n\n"
        f"`python benchmarks/sfb_scale.py --workers {args.workers} --servers "
        f"{args.servers}`; load = 1-minute load average before the run (2 cores, shared). "
        "MB = 10^6 bytes a worker sends per step (medians over the workers): peer = over "
        "the peer mesh, server = to the servers. HybComm choices: fc1,out. Every job's "
        "hybrid and PS weights matched single-process Keras (rtol 1e-4, atol 1e-5; the "
        "largest deviation is given), identical on every rank; ring and shift_one matched "
        "NumPy bit for bit on every worker.")


if __name__ == "__main__":
    main()
