"""The cost model's CPU floor beside the CPU a run measured, per host and step: for each
tf_ps_ops row of saved train_bench runs, what the busiest host's processes spent
(workers' and servers' CPU-seconds per step over the hosts) and the model's parts of it
(steptime.host_cpu: compute, the compute's extra CPU beside the busy link, optimizer
update, codecs/sums/rebuilds, transport per byte and per message), from the inputs the
row measured before training and the compute rate of the same sweep's single-process
row, as train_bench's --predict does.

    python3 benchmarks/plan_cpu_floor.py benchmarks/results/train_zoo_3h_1gbit_tie.json ...
    python3 benchmarks/plan_cpu_floor.py benchmarks/results/interleaved_3h_10gbit.json

(interleaved.py --predict runs too: each arm's median block, rank 0's lone step as the
single-process row.)

Columns, ms per step: the measured step; the measured CPU per host (its worker's and
server's); the model's floor parts and their sum; measured ÷ modelled CPU; the cores per
host the row measured; and the step over the floor the measured CPU makes (step ÷
(CPU per host / cores per host): above 1, time when the host's cores were not all busy).
No TensorFlow is imported.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from tf_ps_ops.plan import steptime  # noqa: E402
from train_report import pooled, pooled_probes, prediction_inputs  # noqa: E402


def floor_parts(row, single, probes):
    """{part: CPU-seconds per step on the busiest host} of the cost model for `row`, with
    the sweep's pooled probes (train_report.pooled_probes), as its prediction."""
    lay, choices, cluster, machine, settings = prediction_inputs(
        pooled(row, probes), single["step_s"], row["batch"], single.get("cpu_per_step"))
    costs, forward, backward, apply, busy = steptime.cpu_inputs(lay, choices, cluster,
                                                                machine, row["batch"], settings)
    workers = min(cluster.workers_per_host, cluster.workers)
    parts = {
        "compute": workers * machine.compute_cpu * (sum(forward) + sum(backward)),
        "beside the link": workers * machine.compute_cpu * sum(backward)
        * machine.compute_cpu_loss * busy,
        "update": workers * sum(apply),
        "ops": workers * sum(c.worker_ops for c in costs) * machine.tf_per_op,
        "sync": sum(c.host_cpu for c in costs),
        "bytes": sum(c.host_bytes for c in costs) * machine.transport_per_byte,
        "messages": sum(c.host_messages for c in costs) * machine.transport_per_message}
    assert abs(sum(parts.values()) - steptime.host_cpu(costs, forward, backward, apply,
                                                       cluster, machine, busy)) < 1e-9
    return parts, machine.cores_per_host


def interleaved_rows(saved):
    """An interleaved.py --predict run's cells as (tag, row, single, probes): each arm a
    row with its median step and CPU per host, rank 0's lone step the single row. Its
    arms share one measurement of the cluster: nothing to pool."""
    for cell in saved["cells"]:
        lone, inputs = cell.get("single"), cell["workers_results"][0].get("plan_inputs") or {}
        if not lone:
            continue
        single = dict(step_s=lone["step_s"], cpu_per_step=lone["cpu_s"])
        for arm, a in cell["arms"].items():
            if (inputs.get(arm) or {}).get("choices"):
                yield saved["meta"]["tag"], dict(
                    rate=cell["rate"], model=cell["model"], mode=arm, batch=cell["batch"],
                    workers=cell["workers"], step_s=a["step_s"], plan_inputs=inputs[arm],
                    cpu_per_step=a["cpu_host_s"] * cell["workers"],
                    worker_cpu_per_step=a["cpu_worker_s"],
                    server_cpu_per_step=a["cpu_server_s"]), single, {}


def rows_of(path):
    saved = json.load(open(path))
    if "cells" in saved:  # benchmarks/interleaved.py --predict
        yield from interleaved_rows(saved)
        return
    rows = saved["rows"]
    probes = pooled_probes(rows)
    singles = {(r["rate"], r["model"]): r for r in rows
               if r["mode"] == "single" and r["status"] != "failed"}
    for row in rows:
        single = singles.get((row["rate"], row["model"]))
        if single is None or not (row.get("plan_inputs") or {}).get("choices") or \
                row["status"] in ("failed", "unavailable"):
            continue
        yield saved["meta"]["tag"], row, single, probes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+",
                        help="train_<tag>.json or interleaved_<tag>.json files")
    args = parser.parse_args()
    print("| run | model | link | mode | step | CPU per host (worker, server) | model: compute, "
          "beside the link, update, sync, bytes, messages = floor | measured ÷ model CPU | "
          "cores per host | step ÷ measured CPU floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in args.runs:
        for tag, row, single, probes in rows_of(path):
            parts, cores = floor_parts(row, single, probes)
            hosts = row["workers"]  # one worker per emulated host in train_bench
            measured = row["cpu_per_step"] / hosts
            modelled = sum(parts.values())
            floor = measured / cores if cores else float("nan")
            print(f"| {tag} | {row['model']} | {row['rate']} | {row['mode']} | "
                  f"{row['step_s'] * 1e3:.1f} | {measured * 1e3:.1f} "
                  f"({row['worker_cpu_per_step'] * 1e3:.1f}, "
                  f"{row['server_cpu_per_step'] * 1e3:.1f}) | "
                  + ", ".join(f"{v * 1e3:.1f}" for v in parts.values())
                  + f" = {modelled * 1e3:.1f} | {measured / modelled:.2f} | {cores:.2f} | "
                  f"{row['step_s'] / floor:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
