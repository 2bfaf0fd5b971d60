"""Bytes each worker receives for one reducescatter and one Adasum, before and after
issue 12's changes, from the engine's own counters (tfps_bytes_received: from the servers;
tfps_peer_bytes_received: from other workers), on one host (no namespaces: bytes, not
time, are measured, so the machine's load does not matter).

  before, reducescatter: an allreduce through the servers of which each worker keeps
          its rows (still the path inside a process set or with a core codec)
  after,  reducescatter: peer to peer, each worker receives only its rows
  before, Adasum: every worker allgathers every tensor and evaluates the tree
  after,  Adasum: recursive halving and distance doubling (power-of-two sizes)

    python3 benchmarks/collective_bytes.py [--workers 2,4] [--elements 1048576]
writes results/collective_bytes/collective_bytes.{json,md}.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "collective_bytes"


def worker(elements, out_path):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import tf_ps_ops as hvd
    from tf_ps_ops.collectives import adasum
    from tf_ps_ops.collectives import alltoall as collectives
    from tf_ps_ops.common import library as _library
    from tf_ps_ops.compression import Compression

    hvd.init()
    api = _library.c_api()
    size, me = hvd.size(), hvd.rank()

    def counters():
        return np.array([api.tfps_bytes_received(), api.tfps_peer_bytes_received()])

    def measured(call):
        before = counters()
        hvd.barrier()
        middle = counters()
        call()
        after = counters()
        hvd.barrier()
        return int(after[0] - middle[0]), int(after[1] - before[1])

    x = tf.constant(np.random.default_rng(me).standard_normal([elements // 16, 16]),
                    tf.float32)
    rows = []
    cases = [
        ("reducescatter", "before (servers)", lambda: collectives._reducescatter_by_servers(
            x, Compression.none, "bench.rs.servers", None, None, 1.0)),
        ("reducescatter", "after (peer to peer)",
         lambda: hvd.reducescatter(x, op=hvd.Sum, name="bench.rs.peers")),
        ("adasum", "before (allgather + tree)",
         lambda: adasum._adasum(x, "bench.adasum.gather", None, halving=False)),
        ("adasum", "after (halving/doubling)",
         lambda: adasum._adasum(x, "bench.adasum.vhdd", None, halving=True)),
    ]
    for what, variant, call in cases:
        call()  # warm-up (tracing, connections)
        servers, peers = measured(call)
        rows.append({"collective": what, "variant": variant, "workers": size, "rank": me,
                     "tensor_bytes": elements * 4, "from_servers": servers,
                     "from_peers": peers})
    hvd.shutdown()
    with open(out_path, "w") as f:
        json.dump(rows, f)


def run(workers, elements):
    with tempfile.TemporaryDirectory(prefix="tfps-collective-bytes-") as tmp:
        # Replies from a colocated server through shared memory count no bytes: the
        # socket path stands for servers on other hosts.
        env = dict(os.environ, PYTHONPATH=str(ROOT), TFPS_TIMEOUT="300",
                   TF_CPP_MIN_LOG_LEVEL="2", TFPS_SHM_SERVER="0", TFPS_HIERARCHICAL="0")
        command = [sys.executable, "-m", "tf_ps_ops.run", "-np", str(workers), "-ns", "1",
                   "--timeout", "600", sys.executable, __file__, "--worker",
                   "--elements", str(elements), "--out", tmp + "/rank{rank}.json"]
        subprocess.run(command, env=env, check=True, cwd=ROOT)
        rows = []
        for rank in range(workers):
            rows += json.load(open(f"{tmp}/rank{rank}.json"))
    return rows


def report(rows):
    lines = ["# Bytes each worker receives for one collective", "",
             "From the engine's counters (`tfps_bytes_received` from the servers, "
             "`tfps_peer_bytes_received` from other workers), float32 tensor, mean over "
             "workers, TFPS_SHM_SERVER=0 and TFPS_HIERARCHICAL=0 (servers as if on other "
             "hosts). Command: `python3 benchmarks/collective_bytes.py " +
             " ".join(sys.argv[1:]) + "`", "",
             "\"before\" runs the old paths as they are in this tree: reducescatter through "
             "the servers (still used in a process set or with a core codec), and Adasum's "
             "allgather + tree, which now also travels in the tensor's dtype; on main "
             "(03a87ce) Adasum gathered float64, so there it received twice that row.", "",
             "| collective | workers | variant | tensor MB | from servers MB | from peers MB "
             "| received / tensor |", "|---|---|---|---|---|---|---|"]
    keys = []
    for r in rows:
        key = (r["collective"], r["workers"], r["variant"])
        if key not in keys:
            keys.append(key)
    for key in keys:
        group = [r for r in rows if (r["collective"], r["workers"], r["variant"]) == key]
        tensor = group[0]["tensor_bytes"]
        servers = sum(r["from_servers"] for r in group) / len(group)
        peers = sum(r["from_peers"] for r in group) / len(group)
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {tensor / 1e6:.2f} | "
                     f"{servers / 1e6:.3f} | {peers / 1e6:.3f} | "
                     f"{(servers + peers) / tensor:.3f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--out")
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--elements", type=int, default=1 << 20)
    args = parser.parse_args()
    if args.worker:
        rank = os.environ.get("TFPS_RANK", os.environ.get("DMLC_WORKER_ID", "0"))
        worker(args.elements, args.out.format(rank=rank))
        return
    rows = []
    for workers in (int(n) for n in args.workers.split(",")):
        rows += run(workers, args.elements)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "collective_bytes.json").write_text(json.dumps(rows, indent=1) + "\n")
    text = report(rows)
    (OUT / "collective_bytes.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
