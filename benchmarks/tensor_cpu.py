"""What one tensor costs a worker's CPU, and in which thread: push_pulls of four shapes
on emulated hosts (benchmarks/tensor_cpu_worker.py), each host a ps_server and a worker.

    python3 benchmarks/tensor_cpu.py --hosts 2 --rate 10gbit --tag 2h_10gbit
    python3 benchmarks/tensor_cpu.py --report benchmarks/results/tensor_cpu_2h_10gbit.json

The shapes, each one tf.function whose answers stay in the graph: `lone` (one tensor of
one float), `tiny` (--tensors of one float), `many` (--tensors of --kb KiB) and `one` (one
tensor of the same bytes as `many`). Their push_pulls carry no variable's handle, so
tf.function's automatic control dependencies run them one after another, each its own
round trip (a model's gradients, which carry theirs, overlap). From rank 0's CPU per call,
in total and per thread, over the calls (`derive`):

- per tensor: (tiny − lone) / (tensors − 1), what the cost model's transport_per_message
  prices per push and pull (tf_ps_ops.plan.tensor_probe.transport_costs: half of this);
- per byte sent or received: (one − lone) / (2 × bytes);
- per partition beyond a tensor's first: (many − tiny − one + lone) / (how many more
  such partitions `many` has than `one`), by the engine's cut (`cost.partition_count`, as
  cc/engine/partition.cc cuts; with --kb 64 or less, or one server, `many` has none).

Why: where the emulated hosts' cores bound the step (the DLRM-like model at 10 Gbit/s),
the workers' CPU is above what the cost model's probes add up to, and these split a
tensor's cost by thread (engine, ZeroMQ's I/O, TensorFlow, Python). The servers' CPU is
not in it. Writes results/tensor_cpu_<tag>.json and .md.
"""

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from netns import Hosts, available  # noqa: E402
from ps_cluster import NetnsCluster  # noqa: E402
from train_config import parse_results  # noqa: E402

sys.path.insert(0, str(HERE.parent))
from tf_ps_ops.plan import cost  # noqa: E402

RESULTS = HERE / "results"
WORKER = HERE / "tensor_cpu_worker.py"
PARTITION_BYTES = 1 << 20  # TFPS_PARTITION_BYTES's default


def derive(result, partition_bytes=PARTITION_BYTES):
    """{"tensor", "byte", "partition": {"cpu": seconds, "threads": {name: seconds}}, and
    "extra_partitions"} of a worker's TENSOR_CPU_RESULT (see the module's docstring);
    "partition" is None where `many` cuts no tensor in more than one."""
    shapes, n = result["shapes"], result["tensors"]
    nbytes = n * result["kb"] * 1024
    # partitions beyond each tensor's first (`tiny` and `lone` price a tensor with its one)
    cut = [cost.partition_count(b, partition_bytes, result["servers"]) - 1
           for b in (result["kb"] * 1024, nbytes)]
    extra = n * cut[0] - cut[1]

    def split(combine):
        names = sorted({name for s in shapes.values() for name in s["threads"]})
        return dict(cpu=combine({k: s["cpu_s"] for k, s in shapes.items()}),
                    threads={name: combine({k: s["threads"].get(name, 0.0)
                                            for k, s in shapes.items()}) for name in names})

    return {
        "tensor": split(lambda v: (v["tiny"] - v["lone"]) / (n - 1)),
        "byte": split(lambda v: (v["one"] - v["lone"]) / (2 * nbytes)),
        "partition": split(lambda v: (v["many"] - v["tiny"] - v["one"] + v["lone"])
                           / extra) if extra > 0 else None,
        "extra_partitions": extra,
    }


def run(args):
    """rank 0's TENSOR_CPU_RESULT of one job on args.hosts emulated hosts."""
    workdir = Path(tempfile.mkdtemp(prefix="tensor-cpu-"))
    with Hosts(args.hosts, rate=args.rate) as hosts:
        cluster = NetnsCluster(hosts, workdir, timeout=args.timeout,
                               env={"PYTHONPATH": str(HERE.parent)})
        try:
            cluster.start(lambda rank: [sys.executable, str(WORKER), "--tensors",
                                        str(args.tensors), "--kb", str(args.kb),
                                        "--repeats", str(args.repeats),
                                        "--rounds", str(args.rounds)])
            cluster.wait()
            cluster.check()
            results = parse_results(cluster.result("worker", 0).stdout,
                                    prefix="TENSOR_CPU_RESULT ")
        finally:
            cluster.close()
    if not results:
        raise RuntimeError(f"worker 0 printed no TENSOR_CPU_RESULT line (logs in {workdir})")
    return results[0]


def table(saved):
    result, derived = saved["result"], saved["derived"]
    # threads that ran at all, busiest first (CPU times come in clock ticks: 10 ms)
    names = sorted({n for s in result["shapes"].values() for n, v in s["threads"].items()
                    if v > 0}, key=lambda n: -result["shapes"]["many"]["threads"].get(n, 0.0))
    lines = ["| shape | CPU ms per call | wall ms | " + " | ".join(names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for shape, s in result["shapes"].items():
        lines.append(f"| {shape} | {s['cpu_s'] * 1e3:.2f} | {s['wall_s'] * 1e3:.2f} | "
                     + " | ".join(f"{s['threads'].get(n, 0.0) * 1e3:.2f}" for n in names)
                     + " |")
    lines += ["", "| per | CPU | " + " | ".join(names) + " |",
              "|---|---|" + "---|" * len(names)]
    for what, scale, unit in (("tensor", 1e6, "µs"), ("partition", 1e6, "µs"),
                              ("byte", 1e9, "ns")):
        d = derived[what]
        if d is None:
            lines.append(f"| {what} | — |" + " |" * len(names))
            continue
        lines.append(f"| {what} | {d['cpu'] * scale:.2f} {unit} | " + " | ".join(
            f"{d['threads'].get(n, 0.0) * scale:.2f}" for n in names) + " |")
    return "\n".join(lines)


def write(saved, results_dir):
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = results_dir / f"tensor_cpu_{saved['meta']['tag']}"
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(saved, indent=1) + "\n")
    r = saved["result"]
    md_path.write_text(
        f"# What a tensor costs a worker's CPU: {saved['meta']['tag']}\n\n"
        f"`{saved['meta']['command']}` ({saved['meta']['started']}; {r['size']} workers, "
        f"{r['servers']} servers, {saved['meta']['rate']}; {r['tensors']} tensors of "
        f"{r['kb']} KiB; medians of {r['rounds']} rounds of {r['repeats']} calls; "
        f"{saved['derived']['extra_partitions']} more partitions beyond a tensor's first in "
        f"`many` than in `one`)"
        f"\n\n{table(saved)}\n")
    return json_path, md_path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--rate", default="10gbit")
    parser.add_argument("--tensors", type=int, default=32)
    parser.add_argument("--kb", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--tag", default=None)
    parser.add_argument("--results-dir", default=str(RESULTS))
    parser.add_argument("--report", metavar="JSON", default=None,
                        help="print a saved run's tables")
    args = parser.parse_args(argv)
    if args.report:
        print(table(json.loads(Path(args.report).read_text())))
        return 0
    if args.tensors < 2:
        parser.error("--tensors must be at least 2")
    ok, why = available()
    if not ok:
        sys.exit("tensor_cpu.py needs network namespaces: " + why)
    started, t0 = datetime.datetime.now().astimezone(), time.monotonic()
    result = run(args)
    tag = args.tag or f"{args.hosts}h_{args.rate}"
    meta = dict(tag=tag, rate=args.rate, started=started.isoformat(timespec="seconds"),
                duration_s=round(time.monotonic() - t0, 1),
                command="python3 benchmarks/tensor_cpu.py " + " ".join(
                    sys.argv[1:] if argv is None else argv),
                machine=dict(cpus=os.cpu_count(), platform=platform.platform()))
    saved = dict(meta=meta, result=result, derived=derive(result))
    paths = write(saved, Path(args.results_dir))
    print(table(saved))
    print("wrote", ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
